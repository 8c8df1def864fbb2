// DeviceMesh against the examples of docs/kinds.md (DeviceMesh), in both layout models, with
// the points where the models differ asserted explicitly.
#include "mesh/device_mesh.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace meshgate {
namespace {

using Groups = std::vector<std::vector<std::int64_t>>;
using Names = std::vector<std::string>;
using Sizes = std::vector<std::int64_t>;

// Runs `op`, which must throw meshgate::Error of `kind` whose message contains `text`.
template <class Op>
void expect_error(Op&& op, ErrorKind kind, std::string_view text) {
  try {
    op();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos)
        << "message '" << e.what() << "' lacks '" << text << "'";
    return;
  }
  ADD_FAILURE() << "expected " << python_name(kind) << " containing '" << text << "'";
}

DeviceMesh mesh(Sizes shape, Names names, LayoutModel model, Sizes ranks = {}) {
  return DeviceMesh::create(shape, std::move(names), std::move(ranks), model);
}

DeviceMesh slice(const DeviceMesh& m, Names names) {
  return m.slice(names);
}

std::string printed(const DeviceMesh& m) {
  return to_string(m.layout());
}

class BothModels : public ::testing::TestWithParam<LayoutModel> {
 protected:
  LayoutModel model() const { return GetParam(); }
  bool one_level() const { return GetParam() == LayoutModel::one_level; }
};

INSTANTIATE_TEST_SUITE_P(Models, BothModels,
                         ::testing::Values(LayoutModel::one_level, LayoutModel::two_level),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

// ---- construction, shape, groups ----

TEST_P(BothModels, GroupsOf2x4MeshFollowComplementOffsets) {
  const DeviceMesh m = mesh({2, 4}, {"dp", "tp"}, model());
  EXPECT_EQ(m.shape(), (Sizes{2, 4}));
  EXPECT_EQ(m.ndim(), 2u);
  EXPECT_EQ(m.size(), 8);
  EXPECT_EQ(m.size(1), 4);
  EXPECT_EQ(m.size(-2), 2);
  EXPECT_EQ(m.rank_map(), (Sizes{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(m.is_root());
  EXPECT_EQ(m.groups(std::int64_t{0}), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.groups(std::int64_t{1}), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(m.groups("dp"), m.groups(std::int64_t{0}));
  EXPECT_EQ(m.groups(std::int64_t{-1}), m.groups(std::int64_t{1}));
  EXPECT_EQ(printed(m), one_level() ? "(2,4):(4,1)" : "((2),(4)):((4),(1))");
}

TEST_P(BothModels, RankMap8To15GoesThroughTheMap) {
  const DeviceMesh m = mesh({2, 4}, {"dp", "tp"}, model(), {8, 9, 10, 11, 12, 13, 14, 15});
  EXPECT_EQ(m.groups(std::int64_t{0}), (Groups{{8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(m.groups(std::int64_t{1}), (Groups{{8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(m.coordinate(12), (Sizes{1, 0}));
  EXPECT_EQ(m.coordinate(0), std::nullopt);
  // A root has one row, so every rank (even one outside the mesh) sees the whole mesh.
  EXPECT_EQ(m.mesh_for_rank(0), (RankTensor{{2, 4}, {8, 9, 10, 11, 12, 13, 14, 15}}));

  const DeviceMesh dp = slice(m, {"dp"});
  EXPECT_EQ(dp.mesh_for_rank(9), (RankTensor{{2}, {9, 13}}));
  EXPECT_EQ(dp.coordinate(13), (Sizes{1}));
  EXPECT_EQ(dp.coordinate(0), std::nullopt);
  expect_error([&] { dp.mesh_for_rank(0); }, ErrorKind::runtime, "In order to get the mesh Tensor");
}

TEST_P(BothModels, PermutedRankMap) {
  const DeviceMesh m = mesh({2, 2}, {"a", "b"}, model(), {3, 0, 2, 1});
  EXPECT_EQ(m.groups("a"), (Groups{{3, 2}, {0, 1}}));
  EXPECT_EQ(m.groups("b"), (Groups{{3, 0}, {2, 1}}));
  EXPECT_EQ(m.coordinate(1), (Sizes{1, 1}));
  EXPECT_EQ(slice(m, {"b"}).mesh_for_rank(1), (RankTensor{{2}, {2, 1}}));
}

TEST_P(BothModels, ConstructorChecks) {
  expect_error([&] { DeviceMesh::from_layout(parse_layout("(2,2):(1,1)"), {}, {}, model()); },
               ErrorKind::assertion, "Please use a non-overlapping layout");
  expect_error(
      [&] {
        DeviceMesh::from_layout(parse_layout("(2,2):(4,1)"), {}, {0, 1, 2, 3}, model());
      },
      ErrorKind::assertion, "The rank map contains 4 element, which isn't large enough");
  expect_error(
      [&] {
        mesh({2, 2}, {"a", "a"}, model());
      },
      ErrorKind::runtime, "Each mesh_dim_name must be unique");
  expect_error(
      [&] {
        mesh({2, 2}, {"a"}, model());
      },
      ErrorKind::runtime, "mesh_shape and mesh_dim_names should have same length");
  expect_error([&] { mesh({}, {}, model()); }, ErrorKind::value, "mesh shape is empty");
  expect_error([&] { mesh({2, 0}, {}, model()); }, ErrorKind::value, "below 1");
  // An explicit layout takes the same sizes: a negative one would size the default rank map
  // negatively, a 0-dim layout has no dims to group.
  for (const char* bad : {"-2:1", "0:1", "(2,(3,0)):(1,(2,6))"}) {
    expect_error([&] { DeviceMesh::from_layout(parse_layout(bad), {}, {}, model()); },
                 ErrorKind::value, "has a size below 1");
  }
  expect_error([&] { DeviceMesh::from_layout(parse_layout("():()"), {}, {}, model()); },
               ErrorKind::value, "has no dims");
  // The last rank 2 * 2^62 does not fit in int64.
  expect_error(
      [&] {
        DeviceMesh::from_layout(parse_layout("(3,2):(4611686018427387904,1)"), {}, {}, model());
      },
      ErrorKind::value, "integer overflow in cosize");

  // An explicit layout defaults to the world it tiles with its complement: 0..7 here.
  const DeviceMesh m =
      DeviceMesh::from_layout(parse_layout("(2,2):(4,1)"), {"x", "y"}, {}, model());
  EXPECT_EQ(m.rank_map(), (Sizes{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(m.groups("x"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.mesh_for_rank(5), (RankTensor{{2, 2}, {0, 1, 4, 5}}));
  EXPECT_EQ(m.mesh_for_rank(7), (RankTensor{{2, 2}, {2, 3, 6, 7}}));
  EXPECT_EQ(m.coordinate(7), (Sizes{1, 1}));
  EXPECT_EQ(DeviceMesh::from_layout(parse_layout("4:2"), {}, {}, model()).rank_map().size(), 8u);
}

// Both models use the reference's set-based overlap check on the (collapsed) layout, so
// (2,3):(3,2), injective but not a view of a row-major mesh, is accepted; its complement has a
// 0-sized mode, so no rank can find its row (the stricter check_orthogonal of #172343 would
// reject it up front).
TEST_P(BothModels, SetDisjointLayoutWithoutRowsFailsAtCreation) {
  // (2,3):(3,2) passes the set check, but its complement has a 0-sized mode: the mesh tensor
  // has no row, so the reference constructor, which evaluates it, raises.
  expect_error(
      [&] {
        DeviceMesh::from_layout(parse_layout("(2,3):(3,2)"), {"a", "b"}, {}, model());
      },
      ErrorKind::runtime, "rank 0 is in none of the 0 sub-meshes");
  // (2,2):(3,1) is not orthogonal either (3 is no multiple of 1*2) but has one row: accepted.
  const DeviceMesh m =
      DeviceMesh::from_layout(parse_layout("(2,2):(3,1)"), {"a", "b"}, {}, model());
  EXPECT_EQ(m.mesh_for_rank(0), (RankTensor{{2, 2}, {0, 1, 3, 4}}));
  EXPECT_EQ(m.coordinate(2), std::nullopt);
}

// The constructor creates every dim's process groups before it evaluates the mesh tensor, so a
// rank map must fit the groups of each dim, not only the mesh: (2,2):(3,1) over 5 ranks has the
// mesh [[0,1],[3,4]], but dim 0's groups (complement 3:1 ++ 2:3) reach position 5.
TEST_P(BothModels, ARankMapMustFitTheGroupsOfEveryDim) {
  const Layout layout = parse_layout("(2,2):(3,1)");
  expect_error(
      [&] {
        DeviceMesh::from_layout(layout, {"a", "b"}, {0, 1, 2, 3, 4}, model());
      },
      ErrorKind::runtime,
      "out of bounds for storage of size 40 (the process groups of dim 0 ('a') of "
      "layout ");
  EXPECT_THROW(DeviceMesh::check_rank_map_size(layout, 5), Error);
  EXPECT_NO_THROW(DeviceMesh::check_rank_map_size(layout, 6));
  // dim 1 (2:1) has groups over an even number of ranks only.
  EXPECT_THROW(DeviceMesh::check_rank_map_size(layout, 7), Error);
  expect_error([&] { DeviceMesh::check_rank_map_size(parse_layout("(2,2):(4,1)"), 4); },
               ErrorKind::assertion, "The rank map contains 4 element");

  // The default rank map is the smallest one that every dim's groups fit: 0..5.
  EXPECT_EQ(DeviceMesh::default_rank_count(layout), 6);
  const DeviceMesh m = DeviceMesh::from_layout(layout, {"a", "b"}, {}, model());
  EXPECT_EQ(m.rank_map(), (Sizes{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(m.groups("a"), (Groups{{0, 3}, {1, 4}, {2, 5}}));
  EXPECT_EQ(m.groups("b"), (Groups{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(DeviceMesh::default_rank_count(parse_layout("(2,2):(4,1)")), 8);
  EXPECT_EQ(DeviceMesh::default_rank_count(parse_layout("(4,2):(1,4)")), 8);
  EXPECT_EQ(DeviceMesh::default_rank_count(parse_layout("2:2")), 4);
  // The span 2 * (2^62 - 1) leaves no room to round 2^62 up to it without overflow: no rank map
  // of int64 size fits, so the default is the cosize.
  EXPECT_EQ(DeviceMesh::default_rank_count(parse_layout("2:4611686018427387903")),
            4611686018427387904);
  // Injective, but its complement asserts whatever the rank map: no size fits it.
  EXPECT_EQ(DeviceMesh::default_rank_count(parse_layout("(5,2):(2,3)")), 12);
  EXPECT_THROW(DeviceMesh::from_layout(parse_layout("(5,2):(2,3)"), {}, {}, model()), Error);
}

// The dims' leaves that the planner reads for every plan: one (size, stride) per dim of a
// one_level mesh whose dims are single leaves, on every mesh the family builds.
TEST(SingleLeafDims, OneLevelMeshesOfSingleLeafDims) {
  using Leaves = std::vector<LayoutLeaf>;
  const auto leaves = [](const DeviceMesh& m) {
    const std::span<const LayoutLeaf> l = m.single_leaf_dims();
    return Leaves(l.begin(), l.end());
  };
  const DeviceMesh mesh = DeviceMesh::create(Sizes{2, 3, 4}, Names{"A", "B", "C"});
  EXPECT_EQ(leaves(mesh), (Leaves{{2, 12}, {3, 4}, {4, 1}}));
  EXPECT_EQ(leaves(DeviceMesh::create(Sizes{8})), (Leaves{{8, 1}}));
  EXPECT_EQ(leaves(mesh.slice(Names{"A", "C"})), (Leaves{{2, 12}, {4, 1}}));
  // A flattened dim of non-contiguous dims has two leaves; the 1-D mesh of it none to offer.
  EXPECT_TRUE(leaves(mesh.slice(Names{"A", "C"}).flatten()).empty());
  EXPECT_EQ(leaves(mesh.slice(Names{"B", "C"}).flatten()), (Leaves{{12, 1}}));
  EXPECT_EQ(leaves(mesh.unflatten("C", Sizes{2, 2}, {"c0", "c1"})),
            (Leaves{{2, 12}, {3, 4}, {2, 2}, {2, 1}}));
  // A copy carries them.
  const DeviceMesh copy = mesh;
  EXPECT_EQ(leaves(copy), leaves(mesh));
  // A dim of several leaves, or the two_level model: the planner reads layouts instead.
  EXPECT_TRUE(leaves(DeviceMesh::from_layout(parse_layout("((2,2),2):((4,1),2)"))).empty());
  EXPECT_TRUE(leaves(DeviceMesh::create(Sizes{2, 3, 4}, {}, {}, LayoutModel::two_level)).empty());
}

TEST(LayoutModelNames, ParseAndPrint) {
  EXPECT_EQ(parse_layout_model("one_level"), LayoutModel::one_level);
  EXPECT_EQ(parse_layout_model("two_level"), LayoutModel::two_level);
  EXPECT_EQ(to_string(LayoutModel::two_level), "two_level");
  expect_error([] { parse_layout_model("three_level"); }, ErrorKind::value, "three_level");
}

TEST_P(BothModels, DimLookupErrors) {
  const DeviceMesh m = mesh({2, 4}, {"dp", "tp"}, model());
  expect_error([&] { m.groups("pp"); }, ErrorKind::key, "Mesh dimension 'pp' does not exist");
  expect_error([&] { m.groups(std::int64_t{2}); }, ErrorKind::index,
               "IndexError: tuple index out of range (Dim 2 is out of range for layout with 2 "
               "dimensions");
  expect_error([&] { m.size(-3); }, ErrorKind::index, "Expected dim to be in range [-2, 1]");
  const DeviceMesh unnamed = mesh({2, 4}, {}, model());
  expect_error([&] { unnamed.groups("dp"); }, ErrorKind::key, "No `mesh_dim_names` found.");
}

// ---- slicing ----

TEST_P(BothModels, Slices2x2x2) {
  const DeviceMesh m = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model());
  const DeviceMesh dp_tp = slice(m, {"dp", "tp"});
  EXPECT_EQ(printed(dp_tp), one_level() ? "(2,2):(4,1)" : "((2),(2)):((4),(1))");
  EXPECT_FALSE(dp_tp.is_root());
  EXPECT_EQ(dp_tp.names(), (Names{"dp", "tp"}));
  EXPECT_EQ(dp_tp.groups("dp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(dp_tp.groups("tp"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(dp_tp.mesh_for_rank(6), (RankTensor{{2, 2}, {2, 3, 6, 7}}));
  EXPECT_EQ(dp_tp.coordinate(6), (Sizes{1, 0}));

  const DeviceMesh dp_cp = slice(m, {"dp", "cp"});
  EXPECT_EQ(dp_cp.mesh_for_rank(5), (RankTensor{{2, 2}, {1, 3, 5, 7}}));
  EXPECT_EQ(dp_cp.coordinate(5), (Sizes{1, 0}));

  // The same names give the mesh back; a slice of a slice keeps the root's rank map.
  EXPECT_EQ(slice(m, {"dp", "cp", "tp"}), m);
  EXPECT_EQ(slice(dp_tp, {"tp"}).groups(std::int64_t{0}), dp_tp.groups("tp"));
}

TEST_P(BothModels, SliceErrors) {
  const DeviceMesh m = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model());
  expect_error(
      [&] {
        slice(m, {"tp", "dp"});
      },
      ErrorKind::key,
      "Invalid mesh_dim_names ('tp', 'dp') specified. Mesh dim indices should be in "
      "ascending order.");
  expect_error([&] { slice(m, {"pp"}); }, ErrorKind::key,
               "Invalid mesh_dim_names ('pp',) specified. Valid mesh_dim_names are ['dp', 'cp', "
               "'tp'].");
  expect_error([&] { slice(m, {}); }, ErrorKind::key, "Invalid mesh_dim_names ()");
  const DeviceMesh unnamed = mesh({2, 2}, {}, model());
  expect_error([&] { slice(unnamed, {"dp"}); }, ErrorKind::runtime,
               "Cannot slice a DeviceMesh without mesh_dim_names!");

  slice(m, {"dp", "cp"}).flatten();
  expect_error(
      [&] {
        slice(m, {"dp", "dp_cp"});
      },
      ErrorKind::runtime, "Slicing overlapping dim_names ('dp', 'dp_cp') is not allowed.");
  // Flattened names are visible from the root only.
  expect_error(
      [&] {
        slice(slice(m, {"dp", "cp"}), {"dp_cp"});
      },
      ErrorKind::key, "Valid mesh_dim_names are ['dp', 'cp'].");
}

TEST_P(BothModels, SlicingAContiguousFlattenedDimFromTheRootWarns) {
  const DeviceMesh m = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model());
  EXPECT_TRUE(m.warnings().empty());
  const DeviceMesh flat = slice(m, {"dp", "cp"}).flatten();
  EXPECT_EQ(flat.names(), (Names{"dp_cp"}));
  EXPECT_EQ(printed(flat), one_level() ? "4:2" : "((4)):((2))");
  EXPECT_EQ(flat.groups(std::int64_t{0}), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));

  const DeviceMesh sliced = slice(m, {"dp_cp", "tp"});
  EXPECT_EQ(printed(sliced), one_level() ? "(4,2):(2,1)" : "((4),(2)):((2),(1))");
  EXPECT_EQ(sliced.groups("dp_cp"), flat.groups(std::int64_t{0}));
  EXPECT_EQ(sliced.groups("tp"), m.groups("tp"));
  slice(m, {"dp_cp"});
  ASSERT_EQ(m.warnings().size(), 1u);
  EXPECT_NE(m.warnings()[0].find("Slicing a flattened dim from root mesh will be deprecated"),
            std::string::npos);
  // Any mesh of the family sees the same registry and warnings.
  EXPECT_EQ(sliced.warnings(), m.warnings());
  EXPECT_EQ(sliced.groups("dp_cp"), flat.groups(std::int64_t{0}));
}

// ---- flatten ----

TEST_P(BothModels, FlattenNonContiguousDims) {
  const DeviceMesh m = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model());
  const DeviceMesh flat = slice(m, {"dp", "tp"}).flatten();
  EXPECT_EQ(flat.names(), (Names{"dp_tp"}));
  EXPECT_EQ(printed(flat), "((2,2)):((4,1))");
  EXPECT_EQ(flat.shape(), (Sizes{4}));
  EXPECT_EQ(flat.groups(std::int64_t{0}), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(flat.mesh_for_rank(3), (RankTensor{{4}, {2, 3, 6, 7}}));
  EXPECT_EQ(flat.coordinate(6), (Sizes{2}));
  // The root and its slices find the flattened dim's groups by name.
  EXPECT_EQ(m.groups("dp_tp"), flat.groups(std::int64_t{0}));
  ASSERT_EQ(m.flattened().size(), 1u);
  EXPECT_EQ(m.flattened()[0].first, "dp_tp");
  EXPECT_EQ(to_string(m.flattened()[0].second), "((2,2)):((4,1))");
}

// A repeated rank fails where PyTorch's constructor meets it, creating the process groups dim by
// dim, in its words; the text earlier releases raised follows.
TEST_P(BothModels, RepeatedRanksInTheWordsOfProcessGroupCreation) {
  expect_error(
      [&] {
        mesh({4}, {"a"}, model(), {1, 0, 1, 0});
      },
      ErrorKind::value,
      "ranks list must not contain duplicate entries, got [0, 0, 1, 1] (DeviceMesh "
      "cannot have duplicate values, but found [1, 0, 1, 0]: list every rank once)");
  // Rows [0, 0] and [1, 1]: dim 0's groups [0, 1] and [0, 1] both hold rank 0.
  expect_error(
      [&] {
        mesh({2, 2}, {"a", "b"}, model(), {0, 0, 1, 1});
      },
      ErrorKind::runtime,
      "Each device mesh dimension should get only one process group, but got 0 in "
      "[0, 1]! (DeviceMesh cannot have duplicate values");
  expect_error(
      [&] {
        mesh({2, 2}, {"a", "b"}, model(), {0, 1, 1, 0});
      },
      ErrorKind::runtime,
      "Each device mesh dimension should get only one process group, but got 0 in "
      "[1, 0]!");
  // No group holds a rank twice and rank 0 is in one group per dim: PyTorch 2.15 builds this
  // mesh; meshgate keeps rejecting a repeated rank.
  expect_error(
      [&] {
        mesh({2, 2}, {"a", "b"}, model(), {0, 1, 1, 2});
      },
      ErrorKind::runtime, "DeviceMesh cannot have duplicate values, but found [0, 1, 1, 2]");
  // The layout is checked before the groups are created.
  expect_error(
      [&] {
        DeviceMesh::from_layout(parse_layout("(2,2):(1,1)"), {}, {0, 0, 1, 1}, model());
      },
      ErrorKind::assertion, "Please use a non-overlapping layout");
}

TEST_P(BothModels, FlattenNamesAndReuse) {
  const DeviceMesh m = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model());
  const DeviceMesh tp = slice(m, {"tp"});
  EXPECT_EQ(tp.flatten(), tp);
  EXPECT_EQ(tp.flatten("tp"), tp);
  expect_error(
      [&] {
        slice(m, {"cp", "tp"}).flatten("dp");
      },
      ErrorKind::value,
      "dp already exists for submesh of the DeviceMesh((dp=2, cp=2, tp=2), stride=(4, 2, 1)). "
      "The mesh_dim_names of submesh and flattened mesh are ('dp', 'cp', 'tp'). Please specify "
      "another valid mesh_dim_name.");
  expect_error([&] { m.flatten("cp"); }, ErrorKind::value, "cp already exists for submesh of the");
  const DeviceMesh first = slice(m, {"cp", "tp"}).flatten("inner");
  EXPECT_EQ(slice(m, {"cp", "tp"}).flatten("inner"), first);
  expect_error(
      [&] {
        slice(m, {"dp", "cp"}).flatten("inner");
      },
      ErrorKind::value, "Flatten mesh with mesh_dim_name inner has been created before");
  EXPECT_EQ(m.flattened().size(), 1u);
  const DeviceMesh all = m.flatten();
  EXPECT_EQ(all.names(), (Names{"dp_cp_tp"}));
  EXPECT_EQ(printed(all), one_level() ? "8:1" : "((8)):((1))");
  const DeviceMesh unnamed = mesh({2, 2}, {}, model());
  expect_error([&] { unnamed.flatten(); }, ErrorKind::runtime,
               "Cannot flatten a DeviceMesh without mesh_dim_names!");
}

// ---- unflatten ----

TEST_P(BothModels, UnflattenContiguousReproducesInitDeviceMesh) {
  const DeviceMesh world = mesh({8}, {"world"}, model());
  const DeviceMesh m = world.unflatten(std::int64_t{0}, Sizes{2, 2, 2}, {"dp", "cp", "tp"});
  const DeviceMesh expected = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model());
  EXPECT_EQ(m.layout(), expected.layout());
  for (std::int64_t d = 0; d < 3; ++d) EXPECT_EQ(m.groups(d), expected.groups(d));
  EXPECT_FALSE(m.is_root());

  const DeviceMesh m2 = mesh({2, 4}, {"dp", "tp"}, model());
  const DeviceMesh split = m2.unflatten("tp", Sizes{2, 2}, {"a", "b"});
  EXPECT_EQ(split.names(), (Names{"dp", "a", "b"}));
  EXPECT_EQ(split.layout(), mesh({2, 2, 2}, {"dp", "a", "b"}, model()).layout());
}

TEST_P(BothModels, UnflattenNonContiguousFlattenedDim) {
  const DeviceMesh m = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model());
  const DeviceMesh flat = slice(m, {"dp", "tp"}).flatten();
  const DeviceMesh back = flat.unflatten("dp_tp", Sizes{2, 2}, {"a", "b"});
  EXPECT_EQ(printed(back), one_level() ? "(2,2):(4,1)" : "((2),(2)):((4),(1))");
  EXPECT_EQ(back.layout(), slice(m, {"dp", "tp"}).layout());
  EXPECT_EQ(back.groups("a"), m.groups("dp"));
  EXPECT_EQ(back.groups("b"), m.groups("tp"));
}

TEST_P(BothModels, UnflattenErrors) {
  const DeviceMesh m = mesh({8}, {"world"}, model());
  expect_error(
      [&] {
        m.unflatten(std::int64_t{1}, Sizes{2, 4}, {"a", "b"});
      },
      ErrorKind::value, "dim 1 specified in `_unflatten` is out of range 1");
  expect_error(
      [&] {
        m.unflatten(std::int64_t{-2}, Sizes{2, 4}, {"a", "b"});
      },
      ErrorKind::index, "Dim -2 is out of range for layout with 1 dimensions");
  expect_error(
      [&] {
        m.unflatten("dp", Sizes{2, 4}, {"a", "b"});
      },
      ErrorKind::value, "dim dp specified in `_unflatten` is not in ('world',)");
  expect_error(
      [&] {
        m.unflatten("world", Sizes{2, 4}, {"a"});
      },
      ErrorKind::runtime, "mesh_dim_names must have same length as mesh_sizes in _unflatten!");
  expect_error(
      [&] {
        m.unflatten("world", Sizes{2, 3}, {"a", "b"});
      },
      ErrorKind::value,
      "The product of mesh_sizes=(2, 3) is 6, but the original dimension at dim=0 has "
      "size 8.");
  // 3 * 6148914691236517208 is 8 modulo 2^64: a wrapped product would match the dim's size.
  expect_error(
      [&] {
        m.unflatten("world", Sizes{3, 6148914691236517208}, {"a", "b"});
      },
      ErrorKind::value,
      "The product of mesh_sizes=(3, 6148914691236517208) is above 2^63, but the original "
      "dimension at dim=0 has size 8.");
  // Sizes below 1 fail the product comparison first, as in PyTorch; negative sizes whose
  // product matches fail when the new mesh reshapes its rank map.
  expect_error(
      [&] {
        m.unflatten("world", Sizes{8, 0, 1}, {"a", "b", "c"});
      },
      ErrorKind::value,
      "The product of mesh_sizes=(8, 0, 1) is 0, but the original dimension at dim=0 "
      "has size 8. These must be equal for unflatten to work correctly.");
  const DeviceMesh m2 = mesh({2, 4}, {"dp", "tp"}, model());
  expect_error(
      [&] {
        m2.unflatten("tp", Sizes{-2, -2}, {"a", "b"});
      },
      ErrorKind::runtime,
      "invalid shape dimension -2 at index 2 of shape [-1, 2, -2, -2] (mesh_sizes=(-2, "
      "-2) has a size below 1");
  expect_error([&] { m2.unflatten(std::int64_t{-3}, Sizes{2}, {"a"}); }, ErrorKind::index,
               "tuple index out of range (Dim -3 is out of range for layout with 2 dimensions.");
  const DeviceMesh unnamed = mesh({8}, {}, model());
  expect_error(
      [&] {
        unnamed.unflatten("world", Sizes{2, 4}, {"a", "b"});
      },
      ErrorKind::type, "Invariant encountered");
}

// ---- all submeshes ----

TEST_P(BothModels, SubmeshesAreOneDimRoots) {
  const DeviceMesh m = mesh({2, 4}, {"dp", "tp"}, model(), {8, 9, 10, 11, 12, 13, 14, 15});
  const std::vector<DeviceMesh> tps = m.submeshes("tp");
  ASSERT_EQ(tps.size(), 2u);
  EXPECT_EQ(tps[1].rank_map(), (Sizes{12, 13, 14, 15}));
  EXPECT_EQ(tps[1].shape(), (Sizes{4}));
  EXPECT_EQ(tps[1].names(), (Names{"tp"}));
  EXPECT_TRUE(tps[1].is_root());
  EXPECT_EQ(tps[1].groups(std::int64_t{0}), (Groups{{12, 13, 14, 15}}));
  Groups dp_rows;
  for (const DeviceMesh& s : m.submeshes("dp")) dp_rows.push_back(s.rank_map());
  EXPECT_EQ(dp_rows, m.groups("dp"));
  expect_error([&] { m.submeshes("pp"); }, ErrorKind::key, "Mesh dimension 'pp' does not exist");
}

// ---- concatenate ----

TEST_P(BothModels, ConcatenateKeepsOrderAndCanTranspose) {
  const DeviceMesh m = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model());
  const std::vector<DeviceMesh> parts{slice(m, {"tp"}), slice(m, {"dp"})};
  const DeviceMesh cat = DeviceMesh::concatenate(parts);
  EXPECT_EQ(printed(cat), one_level() ? "(2,2):(1,4)" : "((2),(2)):((1),(4))");
  EXPECT_EQ(cat.names(), (Names{"tp", "dp"}));
  EXPECT_EQ(cat.groups("tp"), m.groups("tp"));
  EXPECT_EQ(cat.groups("dp"), m.groups("dp"));
  EXPECT_EQ(cat.mesh_for_rank(5), (RankTensor{{2, 2}, {0, 4, 1, 5}}));
  EXPECT_EQ(cat.coordinate(4), (Sizes{0, 1}));
  // Slicing cannot transpose, concatenation can.
  expect_error([&] { slice(m, {"tp", "dp"}); }, ErrorKind::key, "ascending order");

  const std::vector<DeviceMesh> in_order{slice(m, {"dp"}), slice(m, {"cp", "tp"})};
  EXPECT_EQ(DeviceMesh::concatenate(in_order).layout(), m.layout());
  EXPECT_EQ(DeviceMesh::concatenate(in_order), m);
  EXPECT_FALSE(DeviceMesh::concatenate(in_order).is_root()) << "equal by value, not the root";
  // The reference tests `self != self._get_root_mesh()` by value, so the mesh equal to the root
  // slices the root's flattened dims; the transposed concatenation is no such mesh.
  slice(m, {"cp", "tp"}).flatten();
  const DeviceMesh cp_tp = slice(DeviceMesh::concatenate(in_order), {"dp", "cp_tp"});
  EXPECT_EQ(cp_tp.groups("cp_tp"), m.groups("cp_tp"));
  EXPECT_EQ(cp_tp.shape(), (Sizes{2, 4}));
  expect_error([&] { slice(cat, {"cp_tp"}); }, ErrorKind::key,
               "Valid mesh_dim_names are ['tp', 'dp'].");
}

TEST_P(BothModels, ConcatenateErrors) {
  const DeviceMesh m = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model());
  const std::vector<DeviceMesh> twice{slice(m, {"dp"}), slice(m, {"dp"})};
  expect_error([&] { DeviceMesh::concatenate(twice); }, ErrorKind::runtime,
               "Cannot concatenate overlapping meshes: [DeviceMesh((dp=2), stride=(4,)), "
               "DeviceMesh((dp=2), stride=(4,))]");
  const DeviceMesh other =
      mesh({2, 2, 2}, {"dp", "cp", "tp"}, model(), {8, 9, 10, 11, 12, 13, 14, 15});
  const std::vector<DeviceMesh> mixed{slice(m, {"dp"}), slice(other, {"tp"})};
  expect_error([&] { DeviceMesh::concatenate(mixed); }, ErrorKind::runtime,
               "Cannot concatenate DeviceMeshes derived from different device meshs");
  expect_error([&] { DeviceMesh::concatenate({}); }, ErrorKind::index, "at least one mesh");
}

// ---- where the two models differ ----

TEST(ModelDifferences, SlicingANonContiguousFlattenedDimFromTheRoot) {
  for (LayoutModel model : {LayoutModel::one_level, LayoutModel::two_level}) {
    const DeviceMesh m = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model);
    slice(m, {"dp", "tp"}).flatten();
    if (model == LayoutModel::one_level) {
      expect_error([&] { slice(m, {"dp_tp"}); }, ErrorKind::not_implemented,
                   "only allows slicing out a contiguous flattened dim");
    } else {
      const DeviceMesh s = slice(m, {"dp_tp"});
      EXPECT_EQ(to_string(s.layout()), "((2,2)):((4,1))");
      EXPECT_EQ(s.groups(std::int64_t{0}), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
      // The order check runs on the collapsed leaves: (2,2):(4,1) next to cp's 2:2 is not
      // sorted in either order, so cp cannot join a flattened dim that straddles it.
      expect_error([&] { slice(m, {"dp_tp", "cp"}); }, ErrorKind::key, "ascending order");
      expect_error([&] { slice(m, {"cp", "dp_tp"}); }, ErrorKind::key, "ascending order");
    }
    EXPECT_EQ(m.warnings().size(), 1u) << to_string(model);
  }
}

TEST(ModelDifferences, SizeOneDimsDoNotBreakTheOrderInTwoLevel) {
  const DeviceMesh one = mesh({2, 1, 4}, {"a", "b", "c"}, LayoutModel::one_level);
  const DeviceMesh two = mesh({2, 1, 4}, {"a", "b", "c"}, LayoutModel::two_level);
  // one_level compares raw strides (c:1 then b:4); two_level drops the empty axis first.
  expect_error([&] { slice(one, {"c", "b"}); }, ErrorKind::key, "ascending order");
  const DeviceMesh cb = slice(two, {"c", "b"});
  EXPECT_EQ(cb.shape(), (Sizes{4, 1}));
  EXPECT_EQ(cb.groups("b"), two.groups("b"));
  // Both accept a size-1 dim before an equal stride.
  EXPECT_EQ(slice(one, {"b", "a"}).shape(), (Sizes{1, 2}));
  EXPECT_EQ(slice(two, {"b", "a"}).shape(), (Sizes{1, 2}));
  // The size-1 axis is the 0-dim canonical flat layout () of the 2-level model
  // (docs/kinds.md).
  EXPECT_EQ(to_string(two.layout()), "((2),(),(4)):((4),(),(1))");
  EXPECT_EQ(to_string(one.layout()), "(2,1,4):(4,4,1)");
}

TEST(ModelDifferences, EquivalentLayoutsCompareEqualOnlyInTwoLevel) {
  const Layout nested = parse_layout("(2,(1,4)):(4,(4,1))");
  const Sizes shape{2, 4};
  for (LayoutModel model : {LayoutModel::one_level, LayoutModel::two_level}) {
    const DeviceMesh a = DeviceMesh::from_layout(nested, {"dp", "tp"}, {}, model);
    const DeviceMesh b = DeviceMesh::create(shape, {"dp", "tp"}, {}, model);
    EXPECT_EQ(a == b, model == LayoutModel::two_level) << to_string(model);
    EXPECT_EQ(a.groups("tp"), b.groups("tp"));
  }
}

TEST(ModelDifferences, SubmeshesOfANestedFlattenedDim) {
  // one_level remaps the nested mode without nest(), so each submesh keeps the 2-D shape of the
  // mode under a single name; two_level gives 1-D submeshes.
  const DeviceMesh one =
      slice(mesh({2, 2, 2}, {"dp", "cp", "tp"}, LayoutModel::one_level), {"dp", "tp"}).flatten();
  const DeviceMesh two =
      slice(mesh({2, 2, 2}, {"dp", "cp", "tp"}, LayoutModel::two_level), {"dp", "tp"}).flatten();
  const std::vector<DeviceMesh> a = one.submeshes("dp_tp");
  const std::vector<DeviceMesh> b = two.submeshes("dp_tp");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(a[1].shape(), (Sizes{2, 2}));
  EXPECT_EQ(b[1].shape(), (Sizes{4}));
  EXPECT_EQ(a[1].rank_map(), (Sizes{2, 3, 6, 7}));
  EXPECT_EQ(b[1].rank_map(), (Sizes{2, 3, 6, 7}));
}

// ---- concurrency and scale ----

TEST_P(BothModels, FamilyIsSafeAcrossThreads) {
  const DeviceMesh m = mesh({2, 2, 2}, {"dp", "cp", "tp"}, model());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m, t] {
      const DeviceMesh flat = slice(m, {"dp", "cp"}).flatten();
      slice(m, {"dp_cp", "tp"});
      EXPECT_EQ(m.groups("dp_cp"), flat.groups(std::int64_t{0}));
      EXPECT_EQ(m.coordinate(t), (Sizes{0, t / 2, t % 2}));
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(m.flattened().size(), 1u);
  EXPECT_EQ(m.warnings().size(), 1u);
}

TEST_P(BothModels, SixteenThousandRanksPlanInLinearTime) {
  const DeviceMesh m = mesh({16, 32, 32}, {"pp", "dp", "tp"}, model());
  EXPECT_EQ(m.groups("tp").size(), 512u);
  EXPECT_EQ(m.groups("pp")[511], (Sizes{511, 1535, 2559, 3583, 4607, 5631, 6655, 7679, 8703, 9727,
                                        10751, 11775, 12799, 13823, 14847, 15871}));
  const DeviceMesh pp_tp = slice(m, {"pp", "tp"}).flatten();
  EXPECT_EQ(pp_tp.groups(std::int64_t{0}).size(), 32u);
  const DeviceMesh back = pp_tp.unflatten(std::int64_t{0}, Sizes{16, 32}, {"a", "b"});
  EXPECT_EQ(back.groups("b"), m.groups("tp"));
  EXPECT_EQ(m.coordinate(16383), (Sizes{15, 31, 31}));
  EXPECT_EQ(slice(m, {"dp"}).coordinate(16383), (Sizes{31}));
  EXPECT_EQ(m.submeshes("pp").size(), 1024u);
}

}  // namespace
}  // namespace meshgate
