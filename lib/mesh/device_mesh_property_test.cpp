// Properties of DeviceMesh over random meshes (1-4 dims, sizes 1-4, permuted rank maps), in both
// layout models. The expected groups come from plain index arithmetic on the row-major mesh,
// never from the layout algebra under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

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
