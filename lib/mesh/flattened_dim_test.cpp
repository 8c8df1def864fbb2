// The flattened-dim rule alone: examples of both layout models, and the one_level rule against
// its definition (mesh_coalesce, then one nested mode for several leaves) on random layouts.
#include "mesh/flattened_dim.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "layout/layout_test_support.hpp"
#include "layout/random_layouts_test.hpp"
#include "mesh/device_mesh.hpp"

namespace meshgate {
namespace {

using Leaves = std::vector<LayoutLeaf>;
using testing::L;

Leaves flattened(const Leaves& in) {
  Leaves out(std::max<std::size_t>(in.size(), 1));
  out.resize(flattened_leaves(in, out));
  return out;
}

// What DeviceMesh::flatten registered before the rule had a function of its own.
Layout by_definition(const Layout& dims) {
  Layout expected = mesh_coalesce(dims);
  if (expected.rank() > 1) expected = nest(expected);
  return expected;
}

TEST(FlattenedLeaves, ContiguousDimsMergeIntoOneLeaf) {
  // (2,4):(4,1): the outer stride is the inner extent.
  EXPECT_EQ(flattened({{2, 4}, {4, 1}}), (Leaves{{8, 1}}));
  EXPECT_EQ(flattened({{2, 8}, {2, 4}, {4, 1}}), (Leaves{{16, 1}}));
}

TEST(FlattenedLeaves, NonContiguousDimsKeepTheirLeaves) {
  // Dims A and C of a 2x2x2 mesh: strides 4 and 1, a gap between them.
  EXPECT_EQ(flattened({{2, 4}, {2, 1}}), (Leaves{{2, 4}, {2, 1}}));
  // Order matters: the inner dim first does not merge.
  EXPECT_EQ(flattened({{4, 1}, {2, 4}}), (Leaves{{4, 1}, {2, 4}}));
}

TEST(FlattenedLeaves, SizeOneLeavesVanishAndZeroStridesBecomeOne) {
  EXPECT_EQ(flattened({{1, 7}, {4, 2}, {1, 3}}), (Leaves{{4, 2}}));
  EXPECT_EQ(flattened({{1, 5}, {1, 0}}), (Leaves{{1, 1}}));
  EXPECT_EQ(flattened({}), (Leaves{{1, 1}}));
  EXPECT_EQ(flattened({{2, 0}, {2, 0}}), (Leaves{{4, 1}}));
}

TEST(FlattenedLeaves, RefusesTooLittleRoom) {
  const Leaves in = {{2, 4}, {2, 1}};
  Leaves out(1);
  EXPECT_THROW(flattened_leaves(in, out), Error);
}

TEST(FlattenedLayout, OneLeafIsAnIntLayoutSeveralAreOneNestedMode) {
  EXPECT_EQ(flattened_layout(Leaves{{8, 1}}), L("8:1"));
  EXPECT_EQ(flattened_layout(Leaves{{2, 4}, {2, 1}}), L("((2,2)):((4,1))"));
  EXPECT_EQ(flattened_layout(L("(2,2,2):(4,2,1)")), L("8:1"));
  EXPECT_EQ(flattened_layout(L("(2,2):(4,1)")), L("((2,2)):((4,1))"));
}

TEST(FlattenedLayout, MatchesItsDefinitionOnRandomLayouts) {
  testing::LayoutGenerator gen(20240611);
  for (int i = 0; i < 2000; ++i) {
    const Layout dims = gen.coin() ? gen.arbitrary() : gen.injective();
    const Layout expected = by_definition(dims);
    ASSERT_EQ(flattened_layout(dims), expected) << to_string(dims);
    const std::vector<std::int64_t> sizes = leaves(dims.shape());
    const std::vector<std::int64_t> strides = leaves(dims.stride());
    Leaves in;
    for (std::size_t k = 0; k < sizes.size(); ++k) in.push_back({sizes[k], strides[k]});
    const Leaves out = flattened(in);
    EXPECT_TRUE(is_flattened_layout(expected, out)) << to_string(dims);
    // A layout of the same function but another structure is not the registered one.
    if (out.size() == 1) {
      EXPECT_FALSE(is_flattened_layout(nest(expected), out)) << to_string(dims);
    } else {
      EXPECT_FALSE(is_flattened_layout(flatten(expected), out)) << to_string(dims);
    }
  }
}

TEST(IsFlattenedLayout, ComparesEveryLeaf) {
  const Leaves two = {{2, 4}, {2, 1}};
  EXPECT_TRUE(is_flattened_layout(L("((2,2)):((4,1))"), two));
  EXPECT_FALSE(is_flattened_layout(L("((2,2)):((4,2))"), two));
  EXPECT_FALSE(is_flattened_layout(L("((2,4)):((4,1))"), two));
  EXPECT_FALSE(is_flattened_layout(L("((2,2,2)):((4,2,1))"), two));
  EXPECT_FALSE(is_flattened_layout(L("4:1"), two));
  EXPECT_TRUE(is_flattened_layout(L("4:1"), Leaves{{4, 1}}));
  EXPECT_FALSE(is_flattened_layout(L("4:2"), Leaves{{4, 1}}));
}

TEST(FlattenedAxes, CollapsesEveryAxisIntoOne) {
  const MeshAxes axes = mesh_axes_from_layout(L("(2,2,2):(4,2,1)"));
  EXPECT_EQ(flattened_axes(axes), (MeshAxes{{collapse(axes)}}));
  EXPECT_EQ(flattened_axes(axes).axes.size(), 1u);
}

// DeviceMesh::flatten registers what the rule computes, in both models.
TEST(FlattenedLayout, IsWhatDeviceMeshRegisters) {
  const std::vector<std::int64_t> shape = {2, 2, 2};
  const DeviceMesh one = DeviceMesh::create(shape, {"A", "B", "C"});
  const std::vector<std::string> ac = {"A", "C"};
  one.slice(ac).flatten();
  ASSERT_EQ(one.flattened().size(), 1u);
  EXPECT_EQ(one.flattened()[0].second, flattened_layout(one.slice(ac).layout()));

  const DeviceMesh two = DeviceMesh::create(shape, {"A", "B", "C"}, {}, LayoutModel::two_level);
  two.slice(ac).flatten();
  ASSERT_EQ(two.flattened().size(), 1u);
  EXPECT_EQ(two.flattened()[0].second,
            make_layout(flattened_axes(mesh_axes_from_layout(two.slice(ac).layout())).axes));
}

}  // namespace
}  // namespace meshgate
