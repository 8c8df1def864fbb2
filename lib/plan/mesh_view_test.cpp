// The planner's view of a mesh alone: the lookup of flattened dims with and without the dims'
// leaves, and the checks of a plan's arguments.
#include "plan/mesh_view.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "plan/plan.hpp"

namespace meshgate::plan_internal {
namespace {

using Dims = std::vector<std::int64_t>;
using Names = std::vector<std::string>;

// Every subset of dims of meshes with a few flattened dims: the lookup on the dims' leaves and
// the one on the layout (find_flattened_dim) name the same flattened dim.
TEST(MeshView, FindFlattenedAgreesWithAndWithoutTheDimsLeaves) {
  const Names names = {"A", "B", "C", "D"};
  int found = 0;
  for (const Dims& shape : {Dims{2, 2, 2, 2}, Dims{2, 1, 3, 2}, Dims{4, 2, 1, 2}}) {
    const DeviceMesh mesh = DeviceMesh::create(shape, names);
    for (const Names& flat :
         {Names{"A", "B"}, Names{"B", "D"}, Names{"A", "C", "D"}, Names{"A", "B", "C", "D"}}) {
      mesh.slice(flat).flatten();
    }
    const std::span<const LayoutLeaf> leaves = mesh.single_leaf_dims();
    ASSERT_EQ(leaves.size(), 4u);
    for (unsigned mask = 1; mask < 16; ++mask) {
      Dims dims;
      for (std::int64_t d = 0; d < 4; ++d) {
        if (mask >> d & 1) dims.push_back(d);
      }
      const std::optional<std::string> by_leaves = find_flattened(mesh, leaves, dims);
      EXPECT_EQ(by_leaves, find_flattened(mesh, {}, dims)) << mask;
      EXPECT_EQ(by_leaves, find_flattened_dim(mesh, dims)) << mask;
      found += by_leaves.has_value();
    }
  }
  EXPECT_GT(found, 12);
}

TEST(MeshView, FindFlattenedOnDimsOfSeveralLeaves) {
  const DeviceMesh mesh =
      DeviceMesh::from_layout(parse_layout("((2,2),2):((4,1),2)"), Names{"X", "Y"});
  mesh.flatten("XY");
  EXPECT_EQ(find_flattened(mesh, {}, Dims{0, 1}), "XY");
  EXPECT_EQ(find_flattened(mesh, {}, Dims{0}), std::nullopt);
  // A dim outside the mesh, and an unnamed mesh, have none.
  EXPECT_EQ(find_flattened(mesh, {}, Dims{0, 2}), std::nullopt);
  const Dims shape = {2, 2};
  EXPECT_EQ(find_flattened(DeviceMesh::create(shape), {}, Dims{0, 1}), std::nullopt);
}

TEST(MeshView, ViewsTheRankCoordinateAndChecksIt) {
  const Dims shape = {2, 4};
  const DeviceMesh mesh = DeviceMesh::create(shape, Names{"A", "B"});
  const DTensorSpec spec = DTensorSpec::create(mesh, parse_placements("S(0),R"), {8});
  const MeshView v = check_and_view(spec, spec, Dims{1, 3});
  EXPECT_EQ(v.shape, shape);
  EXPECT_EQ(v.coord, (Dims{1, 3}));
  EXPECT_EQ(check_and_view(spec, spec, {}).coord, (Dims{0, 0}));
  EXPECT_THROW(check_and_view(spec, spec, Dims{0}), Error);
  EXPECT_THROW(check_and_view(spec, spec, Dims{2, 0}), Error);
  const DTensorSpec other = DTensorSpec::create(mesh, parse_placements("R,R"), {9});
  EXPECT_THROW(check_and_view(spec, other, {}), Error);
}

}  // namespace
}  // namespace meshgate::plan_internal
