// Properties of DeviceMesh over random meshes (1-4 dims, sizes 1-4, permuted rank maps), in both
// layout models. The expected groups come from plain index arithmetic on the row-major mesh,
// never from the layout algebra under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "layout/mesh_layout.hpp"
#include "layout/random_layouts_test.hpp"
#include "mesh/device_mesh.hpp"

namespace meshgate {
namespace {

using Groups = std::vector<std::vector<std::int64_t>>;
using Names = std::vector<std::string>;
using Sizes = std::vector<std::int64_t>;

struct RandomMesh {
  Sizes shape;
  Names names;
  Sizes ranks;  // ranks[p] = the rank at row-major position p
  std::int64_t numel() const { return static_cast<std::int64_t>(ranks.size()); }
};

RandomMesh random_mesh(std::mt19937& rng) {
  RandomMesh m;
  const int ndim = std::uniform_int_distribution<int>(1, 4)(rng);
  std::int64_t numel = 1;
  for (int d = 0; d < ndim; ++d) {
    m.shape.push_back(std::uniform_int_distribution<std::int64_t>(1, 4)(rng));
    m.names.push_back("d" + std::to_string(d));
    numel *= m.shape.back();
  }
  const std::int64_t offset = std::bernoulli_distribution(0.5)(rng) ? 0 : 100;
  for (std::int64_t r = 0; r < numel; ++r) m.ranks.push_back(offset + r);
  std::shuffle(m.ranks.begin(), m.ranks.end(), rng);
  return m;
}

Sizes unravel(std::int64_t position, const Sizes& shape) {
  Sizes coord(shape.size());
  for (std::size_t i = shape.size(); i-- > 0;) {
    coord[i] = position % shape[i];
    position /= shape[i];
  }
  return coord;
}

// The groups over the dims in `dims` (ascending): ranks agreeing on every other coordinate,
// listed in lexicographic order of their coordinates in `dims`. Sorted, for comparison as a set.
Groups product_groups(const RandomMesh& m, const std::vector<std::size_t>& dims) {
  std::map<Sizes, std::vector<std::int64_t>> buckets;
  for (std::int64_t p = 0; p < m.numel(); ++p) {
    const Sizes coord = unravel(p, m.shape);
    Sizes key;
    for (std::size_t d = 0; d < coord.size(); ++d) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) key.push_back(coord[d]);
    }
    buckets[key].push_back(m.ranks[static_cast<std::size_t>(p)]);
  }
  Groups out;
  for (auto& [key, members] : buckets) out.push_back(members);
  std::sort(out.begin(), out.end());
  return out;
}

Groups sorted(Groups g) {
  std::sort(g.begin(), g.end());
  return g;
}

// coordinate(r) indexes mesh_for_rank(r) back to r, for a sample of the ranks of `m`.
void expect_coordinates_round_trip(const DeviceMesh& mesh, const RandomMesh& m,
                                   const std::string& what) {
  const std::size_t step = std::max<std::size_t>(1, m.ranks.size() / 12);
  for (std::size_t i = 0; i < m.ranks.size(); i += step) {
    const std::int64_t rank = m.ranks[i];
    const std::optional<Sizes> coord = mesh.coordinate(rank);
    ASSERT_TRUE(coord.has_value()) << what << ": rank " << rank << " has no coordinate";
    const RankTensor seen = mesh.mesh_for_rank(rank);
    ASSERT_EQ(seen.shape, mesh.shape()) << what;
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < coord->size(); ++d) flat = flat * seen.shape[d] + (*coord)[d];
    EXPECT_EQ(seen.values[static_cast<std::size_t>(flat)], rank) << what << ": rank " << rank;
  }
}

// A random split of n into factors > 1 (n itself when it has none), in random order.
Sizes random_factors(std::int64_t n, std::mt19937& rng) {
  Sizes factors;
  for (std::int64_t p = 2; p <= n; ++p) {
    while (n % p == 0) {
      factors.push_back(p);
      n /= p;
    }
  }
  if (factors.empty()) factors.push_back(n);
  std::shuffle(factors.begin(), factors.end(), rng);
  Sizes sizes;  // merge neighbours at random, so [2,2,3] may become [4,3] or [2,6] or [12]
  for (std::int64_t f : factors) {
    if (!sizes.empty() && std::bernoulli_distribution(0.4)(rng)) {
      sizes.back() *= f;
    } else {
      sizes.push_back(f);
    }
  }
  return sizes;
}

// The groups of new dim `j` after the dims `dims` (ascending) of `m` are flattened in
// lexicographic order and unflattened into `sizes`: ranks agreeing on the dims outside `dims`
// and on every new coordinate but j, by plain index arithmetic. Sorted, as a set.
Groups unflattened_groups(const RandomMesh& m, const std::vector<std::size_t>& dims,
                          const Sizes& sizes, std::size_t j) {
  std::map<Sizes, std::vector<std::int64_t>> buckets;
  for (std::int64_t p = 0; p < m.numel(); ++p) {
    const Sizes coord = unravel(p, m.shape);
    Sizes key;
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < coord.size(); ++d) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
        key.push_back(coord[d]);
      } else {
        flat = flat * m.shape[d] + coord[d];
      }
    }
    const Sizes inner = unravel(flat, sizes);
    for (std::size_t i = 0; i < inner.size(); ++i) {
      if (i != j) key.push_back(inner[i]);
    }
    buckets[key].push_back(m.ranks[static_cast<std::size_t>(p)]);
  }
  Groups out;
  for (auto& [key, members] : buckets) out.push_back(members);
  std::sort(out.begin(), out.end());
  return out;
}

class MeshProperties : public ::testing::TestWithParam<LayoutModel> {};

INSTANTIATE_TEST_SUITE_P(Models, MeshProperties,
                         ::testing::Values(LayoutModel::one_level, LayoutModel::two_level),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST_P(MeshProperties, RandomMeshes) {
  std::mt19937 rng(20260121);
  for (int iteration = 0; iteration < 150; ++iteration) {
    const RandomMesh m = random_mesh(rng);
    const std::string what = "iteration " + std::to_string(iteration);
    const DeviceMesh root = DeviceMesh::create(m.shape, m.names, m.ranks, GetParam());
    Sizes all_ranks = m.ranks;
    std::sort(all_ranks.begin(), all_ranks.end());

    // The groups of every dim partition the ranks, and are the product groups of that dim.
    for (std::size_t d = 0; d < m.shape.size(); ++d) {
      const Groups groups = root.groups(static_cast<std::int64_t>(d));
      Sizes members;
      for (const auto& g : groups) {
        EXPECT_EQ(static_cast<std::int64_t>(g.size()), m.shape[d]) << what;
        members.insert(members.end(), g.begin(), g.end());
      }
      std::sort(members.begin(), members.end());
      EXPECT_EQ(members, all_ranks) << what << " dim " << d;
      EXPECT_EQ(sorted(groups), product_groups(m, {d})) << what << " dim " << d;
    }
    expect_coordinates_round_trip(root, m, what + " root");

    // A random non-empty ascending subset of the dims, sliced, flattened and unflattened.
    std::vector<std::size_t> dims;
    while (dims.empty()) {
      for (std::size_t d = 0; d < m.shape.size(); ++d) {
        if (std::bernoulli_distribution(0.5)(rng)) dims.push_back(d);
      }
    }
    Names picked;
    Sizes picked_sizes;
    for (std::size_t d : dims) {
      picked.push_back(m.names[d]);
      picked_sizes.push_back(m.shape[d]);
    }
    const DeviceMesh sliced = root.slice(picked);
    for (std::size_t i = 0; i < dims.size(); ++i) {
      EXPECT_EQ(sliced.groups(static_cast<std::int64_t>(i)),
                root.groups(static_cast<std::int64_t>(dims[i])))
          << what;
    }
    expect_coordinates_round_trip(sliced, m, what + " slice");

    const DeviceMesh flat = sliced.flatten("flat");
    EXPECT_EQ(sorted(flat.groups(std::int64_t{0})), product_groups(m, dims)) << what;
    EXPECT_EQ(root.groups("flat"), flat.groups(std::int64_t{0})) << what;
    expect_coordinates_round_trip(flat, m, what + " flatten");

    Names renamed;
    for (const std::string& n : picked) renamed.push_back(n + "_u");
    const DeviceMesh back = flat.unflatten(std::int64_t{0}, picked_sizes, renamed);
    ASSERT_EQ(back.shape(), picked_sizes) << what;
    for (std::size_t i = 0; i < dims.size(); ++i) {
      EXPECT_EQ(back.groups(static_cast<std::int64_t>(i)),
                root.groups(static_cast<std::int64_t>(dims[i])))
          << what << " unflatten dim " << i;
    }
    expect_coordinates_round_trip(back, m, what + " unflatten");
  }
}

// unflatten(d - ndim) is unflatten(d) for every dim, -1 included; below -ndim is an IndexError.
// The new dims' groups are those of the refined row-major mesh.
TEST_P(MeshProperties, UnflattenNegativeDims) {
  std::mt19937 rng(1729);
  for (int iteration = 0; iteration < 150; ++iteration) {
    const RandomMesh m = random_mesh(rng);
    const std::string what = "iteration " + std::to_string(iteration);
    const DeviceMesh root = DeviceMesh::create(m.shape, m.names, m.ranks, GetParam());
    const auto n = static_cast<std::int64_t>(m.shape.size());
    const std::int64_t d = std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng);
    const Sizes sizes = random_factors(m.shape[static_cast<std::size_t>(d)], rng);
    Names new_names;
    for (std::size_t i = 0; i < sizes.size(); ++i) new_names.push_back("u" + std::to_string(i));

    const DeviceMesh by_index = root.unflatten(d, sizes, new_names);
    const DeviceMesh by_negative = root.unflatten(d - n, sizes, new_names);
    EXPECT_EQ(by_negative, by_index) << what << " dim " << d << " as " << d - n;
    Names expected_names = m.names;
    expected_names.erase(expected_names.begin() + d);
    expected_names.insert(expected_names.begin() + d, new_names.begin(), new_names.end());
    EXPECT_EQ(by_negative.names(), expected_names) << what;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(sorted(by_negative.groups(d + static_cast<std::int64_t>(i))),
                unflattened_groups(m, {static_cast<std::size_t>(d)}, sizes, i))
          << what << " new dim " << i;
    }
    try {
      root.unflatten(-n - 1, sizes, new_names);
      ADD_FAILURE() << what << ": dim " << -n - 1 << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::index) << what << ": " << e.what();
    }
  }
}

// Flattening any ascending subset of dims (contiguous or not) and unflattening it into any
// factorisation gives the groups of index arithmetic, by index, by negative index and by name.
TEST_P(MeshProperties, UnflattenFlattenedDims) {
  std::mt19937 rng(65542);
  int non_contiguous = 0;
  for (int iteration = 0; iteration < 200; ++iteration) {
    const RandomMesh m = random_mesh(rng);
    const std::string what = "iteration " + std::to_string(iteration);
    const DeviceMesh root = DeviceMesh::create(m.shape, m.names, m.ranks, GetParam());
    std::vector<std::size_t> dims;
    while (dims.empty()) {
      for (std::size_t d = 0; d < m.shape.size(); ++d) {
        if (std::bernoulli_distribution(0.6)(rng)) dims.push_back(d);
      }
    }
    if (dims.back() - dims.front() + 1 != dims.size()) ++non_contiguous;
    Names picked;
    for (std::size_t d : dims) picked.push_back(m.names[d]);
    const DeviceMesh flat = root.slice(picked).flatten("flat");
    // Each picked dim split into factors, kept in dim order and merged with neighbours at
    // random: a split that cuts a flattened dim at a non-dividing point has no layout.
    Sizes sizes;
    for (std::size_t d : dims) {
      for (std::int64_t f : random_factors(m.shape[d], rng)) {
        if (!sizes.empty() && std::bernoulli_distribution(0.3)(rng)) {
          sizes.back() *= f;
        } else {
          sizes.push_back(f);
        }
      }
    }
    Names new_names;
    for (std::size_t i = 0; i < sizes.size(); ++i) new_names.push_back("u" + std::to_string(i));
    const DeviceMesh back = flat.unflatten(std::int64_t{0}, sizes, new_names);
    EXPECT_EQ(flat.unflatten(std::int64_t{-1}, sizes, new_names), back) << what;
    EXPECT_EQ(flat.unflatten("flat", sizes, new_names), back) << what;
    ASSERT_EQ(back.shape(), sizes) << what;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(sorted(back.groups(static_cast<std::int64_t>(i))),
                unflattened_groups(m, dims, sizes, i))
          << what << " new dim " << i;
    }
    expect_coordinates_round_trip(back, m, what + " unflatten");
  }
  EXPECT_GT(non_contiguous, 20) << "the generator should reach non-contiguous subsets";
}

// Construction evaluates the mesh tensor. A compact layout with permuted strides over a rank
// map of N ranks tiles it with N / numel rows: accepted exactly when numel divides N (else the
// remap view runs past the rank map, or the map is smaller than the layout).
TEST_P(MeshProperties, ConstructionChecksTheRemapView) {
  std::mt19937 rng(163213);
  for (int iteration = 0; iteration < 150; ++iteration) {
    const RandomMesh m = random_mesh(rng);
    std::vector<std::size_t> order(m.shape.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::shuffle(order.begin(), order.end(), rng);
    Sizes strides(m.shape.size());
    std::int64_t stride = 1;
    for (std::size_t k = order.size(); k-- > 0;) {
      strides[order[k]] = stride;
      stride *= m.shape[order[k]];
    }
    std::vector<IntTuple> shape_modes(m.shape.begin(), m.shape.end());
    std::vector<IntTuple> stride_modes(strides.begin(), strides.end());
    const Layout layout(IntTuple::tuple(std::move(shape_modes)),
                        IntTuple::tuple(std::move(stride_modes)));
    const std::int64_t world = std::uniform_int_distribution<std::int64_t>(1, 3 * m.numel())(rng);
    Sizes rank_map(static_cast<std::size_t>(world));
    std::iota(rank_map.begin(), rank_map.end(), std::int64_t{0});
    const bool fits = world >= m.numel() && world % m.numel() == 0;
    const std::string what = "iteration " + std::to_string(iteration) + " layout " +
                             to_string(layout) + " over " + std::to_string(world) + " ranks";
    try {
      const DeviceMesh mesh = DeviceMesh::from_layout(layout, m.names, rank_map, GetParam());
      EXPECT_TRUE(fits) << what << " was accepted";
      EXPECT_EQ(mesh.mesh_for_rank(0).values.size(), static_cast<std::size_t>(m.numel())) << what;
    } catch (const Error& e) {
      EXPECT_FALSE(fits) << what << " was rejected: " << e.what();
    }
  }
}

// A mesh from a layout without a rank map gets one that the mesh tensor and every dim's groups
// fit, so no group lookup fails later; for a layout check_orthogonal accepts, it is the smallest
// such rank map, and every multiple of it fits too.
TEST_P(MeshProperties, TheDefaultRankMapFitsEveryDimsGroups) {
  testing::LayoutGenerator gen(163367);
  int created = 0;
  int smallest_checked = 0;
  for (int iteration = 0; iteration < 400; ++iteration) {
    const Layout layout = gen.coin(0.7) ? gen.injective(4, 64) : gen.arbitrary(4, 64);
    if (!check_non_overlap(layout)) continue;
    const std::string what =
        "iteration " + std::to_string(iteration) + " layout " + to_string(layout);
    const std::int64_t count = DeviceMesh::default_rank_count(layout);
    std::optional<DeviceMesh> mesh;
    try {
      mesh = DeviceMesh::from_layout(layout, {}, {}, GetParam());
    } catch (const Error& e) {
      // Only layouts without a row (a complement with a 0-sized mode) or whose complement
      // asserts fail, and they fail for every rank map.
      EXPECT_FALSE(check_orthogonal(layout)) << what << ": " << e.what();
      continue;
    }
    ++created;
    EXPECT_EQ(static_cast<std::int64_t>(mesh->rank_map().size()), count) << what;
    for (std::size_t d = 0; d < mesh->ndim(); ++d) {
      EXPECT_NO_THROW(mesh->groups(static_cast<std::int64_t>(d))) << what << " dim " << d;
    }
    for (const std::int64_t k : {2, 3}) {
      EXPECT_NO_THROW(DeviceMesh::check_rank_map_size(layout, k * count)) << what << " x" << k;
    }
    if (!check_orthogonal(layout)) continue;
    ++smallest_checked;
    for (std::int64_t smaller = 1; smaller < count; ++smaller) {
      EXPECT_THROW(DeviceMesh::check_rank_map_size(layout, smaller), Error)
          << what << " fits " << smaller << " ranks, fewer than " << count;
    }
  }
  EXPECT_GT(created, 150);
  EXPECT_GT(smallest_checked, 100);
}

// A rank map that repeats a rank is rejected at creation; a slice whose rows all miss the
// current rank is rejected at creation, and otherwise its mesh is the current rank's row.
TEST_P(MeshProperties, ConstructionChecksRanksAndTheCurrentRank) {
  std::mt19937 rng(181223);
  for (int iteration = 0; iteration < 150; ++iteration) {
    const RandomMesh m = random_mesh(rng);
    const std::string what = "iteration " + std::to_string(iteration);
    if (m.numel() > 1) {
      Sizes repeated = m.ranks;
      repeated[1] = repeated[0];
      try {
        DeviceMesh::create(m.shape, m.names, repeated, GetParam());
        ADD_FAILURE() << what << ": a repeated rank was accepted";
      } catch (const Error& e) {
        // new_group's ValueError when a dim's group holds the rank twice, else RuntimeError.
        EXPECT_TRUE(e.kind() == ErrorKind::value || e.kind() == ErrorKind::runtime) << e.what();
        EXPECT_NE(std::string(e.what()).find("duplicate values"), std::string::npos) << e.what();
      }
    }
    // The current rank: one of the mesh's ranks, or a rank outside it (ranks stop below 400).
    const bool inside = std::bernoulli_distribution(0.5)(rng);
    const std::int64_t current =
        inside ? m.ranks[std::uniform_int_distribution<std::size_t>(0, m.ranks.size() - 1)(rng)]
               : 1000 + iteration;
    const DeviceMesh root = DeviceMesh::create(m.shape, m.names, m.ranks, GetParam(), current);
    std::vector<std::size_t> dims;
    Names picked;
    std::int64_t rows = 1;
    for (std::size_t d = 0; d < m.shape.size(); ++d) {
      if (std::bernoulli_distribution(0.5)(rng)) {
        dims.push_back(d);
        picked.push_back(m.names[d]);
      } else {
        rows *= m.shape[d];
      }
    }
    if (picked.empty()) continue;
    try {
      const DeviceMesh sliced = root.slice(picked);
      EXPECT_TRUE(inside || rows == 1)
          << what << ": rank " << current << " in none of " << rows
          << " rows, but the slice was created: " << to_string(sliced.layout());
      if (inside) {
        Sizes seen = sliced.mesh_for_rank(current).values;
        std::sort(seen.begin(), seen.end());
        Groups groups = product_groups(m, dims);
        for (auto& g : groups) std::sort(g.begin(), g.end());
        std::sort(groups.begin(), groups.end());
        EXPECT_TRUE(std::binary_search(groups.begin(), groups.end(), seen)) << what;
        EXPECT_TRUE(std::binary_search(seen.begin(), seen.end(), current)) << what;
      }
    } catch (const Error& e) {
      EXPECT_FALSE(inside || rows == 1) << what << ": " << e.what();
      EXPECT_EQ(e.kind(), ErrorKind::runtime) << what;
    }
  }
}

// Both models give the same groups, coordinates and flattened groups on the same inputs.
TEST(MeshPropertiesAcrossModels, SameGroupsAndCoordinates) {
  std::mt19937 rng(7);
  for (int iteration = 0; iteration < 100; ++iteration) {
    const RandomMesh m = random_mesh(rng);
    const DeviceMesh one = DeviceMesh::create(m.shape, m.names, m.ranks, LayoutModel::one_level);
    const DeviceMesh two = DeviceMesh::create(m.shape, m.names, m.ranks, LayoutModel::two_level);
    for (std::size_t d = 0; d < m.shape.size(); ++d) {
      EXPECT_EQ(one.groups(static_cast<std::int64_t>(d)), two.groups(static_cast<std::int64_t>(d)));
    }
    const std::int64_t rank = m.ranks[static_cast<std::size_t>(iteration) % m.ranks.size()];
    EXPECT_EQ(one.coordinate(rank), two.coordinate(rank));
    EXPECT_EQ(one.mesh_for_rank(rank), two.mesh_for_rank(rank));
    EXPECT_EQ(one.flatten().groups(std::int64_t{0}), two.flatten().groups(std::int64_t{0}));
  }
}

}  // namespace
}  // namespace meshgate
