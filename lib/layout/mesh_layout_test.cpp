#include "layout/mesh_layout.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "layout/layout_test_support.hpp"
#include "layout/random_layouts_test.hpp"

namespace meshgate {
namespace {

using namespace meshgate::testing;

using Ranks = std::vector<std::int64_t>;

Ranks arange(std::int64_t from, std::int64_t to) {
  Ranks r(static_cast<std::size_t>(to - from));
  std::iota(r.begin(), r.end(), from);
  return r;
}

// Rows of a [rows, *mesh] tensor, each flattened: the rank groups of a dim.
std::vector<Ranks> rows(const RankTensor& t) {
  std::vector<Ranks> out;
  const auto rows_count = static_cast<std::size_t>(t.shape.at(0));
  const std::size_t width = rows_count == 0 ? 0 : t.values.size() / rows_count;
  for (std::size_t r = 0; r < rows_count; ++r) {
    out.emplace_back(t.values.begin() + static_cast<std::ptrdiff_t>(r * width),
                     t.values.begin() + static_cast<std::ptrdiff_t>((r + 1) * width));
  }
  return out;
}

// DeviceMesh's rank groups of dim d in the 1-level model: layout[d].nest().remap_to_tensor.
std::vector<Ranks> groups(const Layout& mesh, std::int64_t dim, const Ranks& rank_map) {
  return rows(remap_to_tensor(nest(mesh_mode(mesh, dim)), rank_map));
}

TEST(MeshLayout, MeshModeBoundsAndNegativeDims) {
  const Layout l = L("(2,4):(4,1)");
  EXPECT_EQ(mesh_mode(l, 0), L("2:4"));
  EXPECT_EQ(mesh_mode(l, -1), L("4:1"));
  EXPECT_EQ(mesh_mode(l, -2), L("2:4"));
  const Error e = error_of([&] { (void)mesh_mode(l, 2); });
  EXPECT_EQ(e.kind(), ErrorKind::index);
  EXPECT_TRUE(contains(e,
                       "IndexError: tuple index out of range (Dim 2 is out of range for layout "
                       "with 2 dimensions. Expected dim to be in range [-2, 1].)"))
      << e.what();
  EXPECT_EQ(error_of([&] { (void)mesh_mode(l, -3); }).kind(), ErrorKind::index);
  EXPECT_EQ(mesh_mode(L("8:1"), 0), L("8:1"));
  // pycute asserts i == 0 on an int shape, so the in-range -1 fails there.
  EXPECT_EQ(error_of([] { (void)mesh_mode(L("8:1"), -1); }).kind(), ErrorKind::assertion);
}

TEST(MeshLayout, TopLevelSizesNestSplice) {
  EXPECT_EQ(top_level_sizes(L("(2,(2,3)):(6,(3,1))")), (Ranks{2, 6}));
  EXPECT_EQ(top_level_sizes(L("8:1")), (Ranks{8}));
  EXPECT_EQ(top_level_sizes(L("((2,2)):((4,1))")), (Ranks{4}));
  EXPECT_EQ(nest(L("8:1")), L("(8):(1)"));
  EXPECT_EQ(nest(L("(2,2):(4,1)")), L("((2,2)):((4,1))"));
  EXPECT_EQ(splice(L("(2,4):(4,1)"), 1, 2, L("(2,2):(2,1)")), L("(2,2,2):(4,2,1)"));
  EXPECT_EQ(splice(L("8:1"), 0, 1, L("(2,4):(4,1)")), L("(2,4):(4,1)"));
  EXPECT_EQ(splice(L("(2,4):(4,1)"), 0, 1, L("2:4")), L("(2,4):(4,1)"));
  EXPECT_EQ(splice(L("(2,4):(4,1)"), 1, 1, L("3:8")), L("(2,3,4):(4,8,1)"));
  EXPECT_EQ(splice(L("(2,4):(4,1)"), 5, 9, L("3:8")), L("(2,4,3):(4,1,8)"));
  EXPECT_EQ(splice(L("(2,4):(4,1)"), 0, 2, L("((2,2)):((4,1))")), L("((2,2)):((4,1))"));
}

TEST(MeshLayout, MeshCoalesceRewritesZeroStrides) {
  EXPECT_EQ(mesh_coalesce(L("(1,1):(5,7)")), L("1:1"));
  EXPECT_EQ(coalesce(L("(1,1):(5,7)")), L("1:0"));
  EXPECT_EQ(mesh_coalesce(L("(2,1,3):(0,1,1)")), L("(2,3):(1,1)"));
  EXPECT_EQ(mesh_coalesce(L("(2,4):(4,1)")), L("8:1"));
  EXPECT_EQ(mesh_coalesce(L("(2,2):(4,1)")), L("(2,2):(4,1)"));
}

TEST(MeshLayout, AllRanksAndGlobalRanks) {
  EXPECT_EQ(all_ranks_from_zero(L("(2,3):(1,2)")), (Ranks{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(all_ranks_from_zero(L("(2,3):(3,1)")), (Ranks{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(all_ranks_from_zero(L("(2,(2,2)):(1,(4,2))")), (Ranks{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(all_ranks_from_zero(L("():()")), (Ranks{0}));
  EXPECT_EQ(all_ranks_from_zero(L("(2,0):(1,1)")), Ranks{});
  EXPECT_EQ(global_ranks(L("4:1"), 16),
            (std::vector<Ranks>{arange(0, 4), arange(4, 8), arange(8, 12), arange(12, 16)}));
  EXPECT_EQ(global_ranks(L("2:4"), 8), (std::vector<Ranks>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(global_ranks(L("(2,2):(4,1)"), 8), (std::vector<Ranks>{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

TEST(MeshLayout, NonOverlap) {
  EXPECT_TRUE(check_non_overlap(L("(2,3):(6,1)")));
  EXPECT_FALSE(check_non_overlap(L("(2,3):(2,1)")));
  EXPECT_FALSE(check_non_overlap(L("(4,2):(1,1)")));
  EXPECT_TRUE(check_non_overlap(L("(2,3):(3,2)")));
  EXPECT_FALSE(check_non_overlap(L("2:0")));
}

TEST(MeshLayout, RemapToTensor) {
  const Ranks ranks{10, 20, 30, 40};
  const RankTensor t = remap_to_tensor(L("2:2"), ranks);
  EXPECT_EQ(t.shape, (Ranks{2, 2}));
  EXPECT_EQ(t.values, (Ranks{10, 30, 20, 40}));
  const RankTensor whole = remap_to_tensor(L("(2,2):(2,1)"), arange(0, 4));
  EXPECT_EQ(whole.shape, (Ranks{1, 2, 2}));
  EXPECT_EQ(whole.values, (Ranks{0, 1, 2, 3}));
  const RankTensor transposed = remap_to_tensor(L("(2,2):(1,2)"), ranks);
  EXPECT_EQ(transposed.shape, (Ranks{1, 2, 2}));
  EXPECT_EQ(transposed.values, (Ranks{10, 30, 20, 40}));
  const RankTensor flat_nc = remap_to_tensor(L("((2,2)):((4,1))"), arange(0, 8));
  EXPECT_EQ(flat_nc.shape, (Ranks{2, 4}));
  EXPECT_EQ(flat_nc.values, (Ranks{0, 1, 4, 5, 2, 3, 6, 7}));
}

TEST(MeshLayout, RemapToTensorErrors) {
  const Error small = error_of([] { (void)remap_to_tensor(L("4:2"), arange(0, 6)); });
  EXPECT_EQ(small.kind(), ErrorKind::assertion);
  EXPECT_TRUE(contains(small, "cosize 7")) << small.what();
  // The complement rounds up past the rank map, which torch's as_strided rejects.
  const Error bounds = error_of([] { (void)remap_to_tensor(L("3:1"), arange(0, 4)); });
  EXPECT_EQ(bounds.kind(), ErrorKind::runtime);
  EXPECT_TRUE(contains(bounds, "out of bounds for storage")) << bounds.what();
  EXPECT_EQ(error_of([] { (void)remap_to_tensor(L("(8,2):(1,2)"), arange(0, 16)); }).kind(),
            ErrorKind::assertion);
}

// check_remap_view raises what remap_to_tensor raises, from the rank map's size alone.
TEST(MeshLayout, CheckRemapViewWithoutARankMap) {
  EXPECT_NO_THROW(check_remap_view(L("3:1"), 6));
  EXPECT_NO_THROW(check_remap_view(L("(2,2):(4,1)"), 8));
  const Error small = error_of([] { check_remap_view(L("4:2"), 6); });
  EXPECT_EQ(small.kind(), ErrorKind::assertion);
  EXPECT_TRUE(contains(small, "cosize 7")) << small.what();
  // 2:3 over 5 ranks: the complement 3:1 ++ 2:3 reaches position 5.
  const Error bounds = error_of([] { check_remap_view(L("((2)):((3))"), 5); });
  EXPECT_EQ(bounds.kind(), ErrorKind::runtime);
  EXPECT_EQ(std::string(bounds.what()),
            "RuntimeError: setStorage: sizes [3, 2], strides [1, 3], storage offset 0, and "
            "itemsize 8 requiring a storage size of 48 are out of bounds for storage of size 40");
  const MeshAxes two{{L("(2):(3)")}};
  EXPECT_EQ(error_of([&] { check_remap_view(two, 5); }).kind(), ErrorKind::runtime);
  EXPECT_NO_THROW(check_remap_view(two, 6));
  EXPECT_EQ(error_of([&] { check_remap_view(two, 3); }).kind(), ErrorKind::assertion);
  // Near the int64 limit the bytes torch quotes leave int64: 2:1 over 2^62 + 1 ranks views
  // (2^61 + 1, 2):(2, 1), whose last position 2^62 + 1 is one past the map.
  const Error huge = error_of([] { check_remap_view(L("2:1"), 4611686018427387905); });
  EXPECT_TRUE(contains(huge, "requiring a storage size of 36893488147419103248 are out of bounds "
                             "for storage of size 36893488147419103240"))
      << huge.what();
}

TEST(MeshLayout, RankGroupsOfA2x4Mesh) {
  const Layout mesh(parse_int_tuple("(2,4)"));
  EXPECT_EQ(groups(mesh, 0, arange(0, 8)), (std::vector<Ranks>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(groups(mesh, 1, arange(0, 8)), (std::vector<Ranks>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(groups(mesh, 0, arange(8, 16)),
            (std::vector<Ranks>{{8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(groups(mesh, 1, arange(8, 16)), (std::vector<Ranks>{{8, 9, 10, 11}, {12, 13, 14, 15}}));
}

TEST(MeshLayout, FlattenNonContiguousDims) {
  // ("dp","tp") of a 2x2x2 mesh: slice, coalesce (still two modes), nest.
  const Layout mesh(parse_int_tuple("(2,2,2)"));
  const std::array<Layout, 2> picked{mesh_mode(mesh, 0), mesh_mode(mesh, 2)};
  const Layout sliced = make_layout(picked);
  EXPECT_EQ(sliced, L("(2,2):(4,1)"));
  const Layout flat = nest(coalesce(sliced));
  EXPECT_EQ(flat, L("((2,2)):((4,1))"));
  EXPECT_EQ(rows(remap_to_tensor(flat, arange(0, 8))),
            (std::vector<Ranks>{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

TEST(MeshLayout, UnflattenExamples) {
  const Ranks two_four{2, 4};
  const Ranks two_two{2, 2};
  EXPECT_EQ(unflatten(L("8:1"), 0, two_four), L("(2,4):(4,1)"));
  EXPECT_EQ(unflatten(L("(8):(1)"), 0, two_four), Layout(parse_int_tuple("(2,4)")));
  EXPECT_EQ(unflatten(L("(2,4):(4,1)"), 1, two_two), Layout(parse_int_tuple("(2,2,2)")));
  EXPECT_EQ(unflatten(L("((2,2)):((4,1))"), 0, two_two), L("(2,2):(4,1)"));
  EXPECT_EQ(unflatten(L("(3,(2,2)):(4,(2,1))"), -1, two_two), L("(3,2,2):(4,2,1)"));
  const Ranks bad{2, 3};
  const Error e = error_of([&] { (void)unflatten(L("(8,2):(2,1)"), 0, bad); });
  EXPECT_EQ(e.kind(), ErrorKind::value);
  EXPECT_TRUE(contains(e,
                       "The product of mesh_sizes=(2, 3) is 6, but the original dimension at "
                       "dim=0 has size 8."))
      << e.what();
  const Ranks one{4};
  EXPECT_TRUE(contains(error_of([&] { (void)unflatten(L("8:1"), 0, one); }), "mesh_sizes=(4,)"));
  const Error range = error_of([&] { (void)unflatten(L("(2,4):(4,1)"), 2, two_two); });
  EXPECT_EQ(range.kind(), ErrorKind::value);
  EXPECT_TRUE(contains(range, "out of range")) << range.what();
}

// ---- 2-level model ----

TEST(FlatLayout, CanonicalForm) {
  EXPECT_EQ(flat_canonical(L("(2,(1,6)):(1,(6,2))")), L("(2,6):(1,2)"));
  EXPECT_EQ(flat_canonical(L("(2,4):(4,1)")), L("(8):(1)"));
  EXPECT_EQ(flat_canonical(L("8:1")), L("(8):(1)"));
  EXPECT_EQ(flat_canonical(L("(8):(1)")), flat_canonical(L("8:1")));
  EXPECT_EQ(flat_canonical(L("(1,1):(5,7)")), L("():()"));
  EXPECT_EQ(flat_canonical(L("1:0")), L("():()"));
  EXPECT_EQ(flat_canonical(L("((2,2)):((4,1))")), L("(2,2):(4,1)"));
  EXPECT_EQ(flat_canonical(L("(2,3):(0,1)")), L("(2,3):(0,1)"));
}

TEST(FlatLayout, OrthogonalAndSorted) {
  EXPECT_FALSE(check_orthogonal(L("(2,3):(3,2)")));
  EXPECT_TRUE(check_non_overlap(L("(2,3):(3,2)")));
  EXPECT_TRUE(check_orthogonal(L("(2,3):(6,1)")));
  EXPECT_FALSE(check_orthogonal(L("(2,3):(2,1)")));
  EXPECT_FALSE(check_orthogonal(L("(4,2):(1,1)")));
  EXPECT_TRUE(check_orthogonal(L("(2,2):(1,4)")));
  EXPECT_TRUE(check_orthogonal(L("8:1")));
  EXPECT_TRUE(check_orthogonal(L("1:0")));
  // A single broadcast (stride-0) mode passes: the reference only compares pairs of modes.
  EXPECT_TRUE(check_orthogonal(L("5:0")));
  EXPECT_FALSE(check_non_overlap(L("5:0")));
  EXPECT_TRUE(check_orthogonal(L("(2,4):(4,1)")));
  EXPECT_TRUE(check_sorted(L("(2,2):(4,1)")));
  EXPECT_FALSE(check_sorted(L("(2,2):(1,4)")));
  EXPECT_FALSE(check_sorted(L("(2,(1,2)):(1,(9,4))")));
  EXPECT_TRUE(check_sorted(L("(2,(1,2)):(4,(9,1))")));
  EXPECT_TRUE(check_sorted(L("():()")));
  EXPECT_EQ(error_of([] { (void)check_orthogonal(L("(2,3):(1,0)")); }).kind(), ErrorKind::value);
}

TEST(FlatLayout, MeshAxesCollapseAndRemap) {
  const MeshAxes m = mesh_axes_from_layout(L("(2,(2,2)):(4,(2,1))"));
  ASSERT_EQ(m.axes.size(), 2u);
  EXPECT_EQ(m.axes[0], L("(2):(4)"));
  EXPECT_EQ(m.axes[1], L("(4):(1)"));
  EXPECT_EQ(collapse(m), L("(8):(1)"));
  EXPECT_EQ(to_layout(m), L("((2),(4)):((4),(1))"));
  EXPECT_EQ(to_layout(MeshAxes{}), L("1:0"));
  EXPECT_EQ(to_layout(MeshAxes{{L("():()")}}), L("(1):(0)"));
  EXPECT_EQ(mesh_axes_from_layout(L("8:1")).axes, (std::vector<Layout>{L("(8):(1)")}));

  // Flattening ("dp","tp") of 2x2x2 collapses to one axis; its groups match the 1-level ones.
  const MeshAxes dp_tp{{L("(2):(4)"), L("(2):(1)")}};
  const MeshAxes flat{{collapse(dp_tp)}};
  EXPECT_EQ(flat.axes[0], L("(2,2):(4,1)"));
  const RankTensor t = remap_to_tensor(flat, arange(0, 8));
  EXPECT_EQ(t.shape, (Ranks{2, 4}));
  EXPECT_EQ(t.values, (Ranks{0, 1, 4, 5, 2, 3, 6, 7}));
  const MeshAxes one{{L("(2):(2)")}};
  const RankTensor r = remap_to_tensor(one, Ranks{10, 20, 30, 40});
  EXPECT_EQ(r.shape, (Ranks{2, 2}));
  EXPECT_EQ(r.values, (Ranks{10, 30, 20, 40}));
  EXPECT_EQ(error_of([&] {
              (void)remap_to_tensor(one, Ranks{1, 2});
            }).kind(),
            ErrorKind::assertion);
  // A flattened non-contiguous dim is sorted, so the 2-level model lets it be sliced.
  EXPECT_TRUE(check_sorted(collapse(flat)));
}

// ---- contracts over generated layouts ----

TEST(MeshLayoutContract, AllRanksMatchesLayoutEvaluation) {
  testing::LayoutGenerator gen(201);
  for (int n = 0; n < 2000; ++n) {
    const Layout l = gen.coin() ? gen.arbitrary() : gen.injective();
    const Ranks ranks = all_ranks_from_zero(l);
    ASSERT_EQ(static_cast<std::int64_t>(ranks.size()), size(l));
    for (std::int64_t i = 0; i < size(l); ++i) ASSERT_EQ(ranks[static_cast<std::size_t>(i)], l(i));
    Ranks sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(check_non_overlap(l),
              std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  }
}

TEST(MeshLayoutContract, EqualFunctionsHaveEqualCanonicalForms) {
  testing::LayoutGenerator gen(202);
  for (int n = 0; n < 2000; ++n) {
    const Layout l = gen.coin() ? gen.arbitrary() : gen.injective();
    const Layout canon = flat_canonical(l);
    // Same function written differently: coalesced, flattened, with size-1 modes inserted,
    // or with a leaf split into two.
    const std::array<Layout, 2> padded_modes{L("1:7"), l};
    const Layout padded = make_layout(padded_modes);
    ASSERT_EQ(flat_canonical(coalesce(l)), canon) << to_string(l);
    ASSERT_EQ(flat_canonical(flatten(l)), canon) << to_string(l);
    ASSERT_EQ(flat_canonical(padded), canon) << to_string(l);
    const Ranks s = leaves(l.shape());
    const Ranks d = leaves(l.stride());
    Ranks split_s;
    Ranks split_d;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] % 2 == 0 && s[i] > 2) {
        split_s.insert(split_s.end(), {2, s[i] / 2});
        split_d.insert(split_d.end(), {d[i] * (s[i] / 2), d[i]});
      } else {
        split_s.push_back(s[i]);
        split_d.push_back(d[i]);
      }
    }
    const Layout split(IntTuple::tuple(std::vector<IntTuple>(split_s.begin(), split_s.end())),
                       IntTuple::tuple(std::vector<IntTuple>(split_d.begin(), split_d.end())));
    ASSERT_EQ(flat_canonical(split), canon) << to_string(l) << " split " << to_string(split);
    // The canonical form is the same function, and canonical forms are fixed points.
    ASSERT_EQ(size(canon), size(l));
    for (std::int64_t i = 0; i < size(l); ++i) ASSERT_EQ(canon(i), l(i)) << to_string(l);
    ASSERT_EQ(flat_canonical(canon), canon);
  }
}

TEST(MeshLayoutContract, OrthogonalImpliesNonOverlapping) {
  testing::LayoutGenerator gen(203);
  int orthogonal = 0;
  int only_set_check = 0;
  for (int n = 0; n < 2000; ++n) {
    const Layout l = gen.coin() ? gen.arbitrary() : gen.injective();
    bool ortho = false;
    try {
      ortho = check_orthogonal(l);
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::value) << e.what();  // a stride-0 mode divides by zero
      continue;
    }
    const Ranks strides = leaves(flat_canonical(l).stride());
    const bool broadcast = std::find(strides.begin(), strides.end(), 0) != strides.end();
    if (ortho && !broadcast) {
      ++orthogonal;
      ASSERT_TRUE(check_non_overlap(l)) << to_string(l);
    } else if (check_non_overlap(l)) {
      ++only_set_check;
    }
  }
  EXPECT_GT(orthogonal, 500);
  EXPECT_GT(only_set_check, 0);
}

TEST(MeshLayoutContract, RemapAgreesAcrossModelsAndWithGlobalRanks) {
  testing::LayoutGenerator gen(204);
  int checked = 0;
  for (int n = 0; n < 1500; ++n) {
    const Layout l = gen.injective(4, 64);
    const std::int64_t world = cosize(l) * gen.pick({1, 2, 3});
    Ranks rank_map = arange(100, 100 + world);
    std::shuffle(rank_map.begin(), rank_map.end(), gen.engine());
    RankTensor one;
    try {
      one = remap_to_tensor(l, rank_map);
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::runtime) << e.what();  // complement past the rank map
      continue;
    }
    const RankTensor two = remap_to_tensor(mesh_axes_from_layout(l), rank_map);
    ASSERT_EQ(one, two) << to_string(l) << " world " << world;
    // Rows are the complement offsets; through an identity rank map they are global_ranks.
    const std::vector<Ranks> expected = global_ranks(l, world);
    const RankTensor ident = remap_to_tensor(l, arange(0, world));
    ASSERT_EQ(rows(ident), expected) << to_string(l);
    // Every rank appears exactly once across the rows.
    Ranks all = ident.values;
    std::sort(all.begin(), all.end());
    ASSERT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end()) << to_string(l);
    ++checked;
  }
  EXPECT_GT(checked, 500);
}

// @post check_remap_view(l, n) throws exactly when remap_to_tensor(l, map of n ranks) throws, with
// the same error, in both models.
TEST(MeshLayoutContract, CheckRemapViewAgreesWithRemapToTensor) {
  testing::LayoutGenerator gen(206);
  int rejected = 0;
  int accepted = 0;
  for (int n = 0; n < 1500; ++n) {
    const Layout l = gen.coin() ? gen.injective(4, 64) : gen.arbitrary(4, 64);
    if (!check_non_overlap(l)) continue;
    const std::int64_t world = gen.uniform(1, 2 * cosize(l) + 2);
    const Ranks rank_map = arange(0, world);
    for (const bool two_level : {false, true}) {
      const MeshAxes axes = mesh_axes_from_layout(l);
      std::string built;
      std::string checked;
      try {
        two_level ? (void)remap_to_tensor(axes, rank_map) : (void)remap_to_tensor(l, rank_map);
      } catch (const Error& e) {
        built = e.what();
      }
      try {
        two_level ? check_remap_view(axes, world) : check_remap_view(l, world);
      } catch (const Error& e) {
        checked = e.what();
      }
      ASSERT_EQ(checked, built) << to_string(l) << " over " << world << " ranks";
      ++(built.empty() ? accepted : rejected);
    }
  }
  EXPECT_GT(accepted, 300);
  EXPECT_GT(rejected, 300);
}

TEST(MeshLayoutContract, UnflattenKeepsTheRanks) {
  testing::LayoutGenerator gen(205);
  int checked = 0;
  for (int n = 0; n < 1500; ++n) {
    const Layout l = gen.injective(4, 128);
    const auto dim =
        static_cast<std::int64_t>(gen.uniform(0, static_cast<std::int64_t>(l.rank()) - 1));
    const std::int64_t extent = size(mesh_mode(l, dim));
    Ranks sizes;
    std::int64_t rest = extent;
    for (std::int64_t f : {2, 3, 2, 5}) {
      if (rest % f == 0 && gen.coin()) {
        sizes.push_back(f);
        rest /= f;
      }
    }
    sizes.push_back(rest);
    Layout u;
    try {
      u = unflatten(l, dim, sizes);
    } catch (const Error& e) {
      // composition's divisibility assertion, as in the reference (e.g. 3 split across a 2-gap).
      ASSERT_EQ(e.kind(), ErrorKind::assertion) << e.what();
      continue;
    }
    ASSERT_EQ(u.rank(), l.rank() + sizes.size() - 1) << to_string(l);
    if (size(u) != size(l)) continue;  // the reference's truncation of non-dividing shapes
    ++checked;
    ASSERT_EQ(all_ranks_from_zero(u), all_ranks_from_zero(l))
        << to_string(l) << " -> " << to_string(u);
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace meshgate
