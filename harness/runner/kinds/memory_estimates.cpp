#include "kinds/memory_estimates.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.hpp"

namespace meshgate::runner {
namespace {

// Calls fn(shape leaf, stride leaf) for every mode of a layout.
template <class Fn>
void for_each_leaf(const IntTuple& shape, const IntTuple& stride, Fn&& fn) {
  if (shape.is_int()) {
    fn(static_cast<double>(shape.value()),
       stride.is_int() ? static_cast<double>(stride.value()) : 0);
    return;
  }
  for (std::size_t i = 0; i < shape.length(); ++i) {
    for_each_leaf(shape[i], stride.is_int() ? stride : stride[i], fn);
  }
}

}  // namespace

double size_estimate(const IntTuple& shape) {
  if (shape.is_int()) return static_cast<double>(std::max<std::int64_t>(shape.value(), 0));
  double product = 1;
  for (std::size_t i = 0; i < shape.length(); ++i) product *= size_estimate(shape[i]);
  return product;
}

double cosize_estimate(const Layout& layout) {
  double last = 0;
  for_each_leaf(layout.shape(), layout.stride(), [&](double size, double stride) {
    if (size > 0) last += (size - 1) * std::abs(stride);
  });
  return last + 1;
}

double mesh_ranks_estimate(const MeshSpec& mesh) {
  if (!mesh.shape) return size_estimate(mesh.layout->shape());
  double product = 1;
  for (std::int64_t s : *mesh.shape) product *= static_cast<double>(s);
  return product;
}

double rank_map_estimate(const MeshSpec& mesh) {
  double map = std::max(mesh_ranks_estimate(mesh), static_cast<double>(mesh.ranks.size()));
  if (!mesh.layout) return map;
  map = std::max(map, cosize_estimate(*mesh.layout));
  if (mesh.ranks.empty()) {
    // Every dim's process groups must fit the default rank map, which can take it far above
    // the cosize; a layout beyond int64 keeps the cosize estimate, and its creation says why.
    try {
      map = std::max(map, static_cast<double>(DeviceMesh::default_rank_count(*mesh.layout)));
    } catch (const meshgate::Error&) {
    }
  }
  return map;
}

std::vector<double> mesh_dim_sizes(const MeshSpec& mesh) {
  std::vector<double> sizes;
  if (mesh.shape) {
    for (std::int64_t s : *mesh.shape) sizes.push_back(static_cast<double>(s));
  } else if (mesh.layout->shape().is_int()) {
    sizes.push_back(size_estimate(mesh.layout->shape()));
  } else {
    for (std::size_t i = 0; i < mesh.layout->shape().length(); ++i)
      sizes.push_back(size_estimate(mesh.layout->shape()[i]));
  }
  return sizes;
}

void check_runnable_mesh(const CaseNode& node, const MeshSpec& mesh) {
  const double ranks = rank_map_estimate(mesh);
  if (ranks <= kMaxCaseRanks) return;
  char count[32];
  std::snprintf(count, sizeof count, "%.4g", ranks);
  reject_value(node, "mesh",
               std::string("spans ") + count + " ranks; a case runs on at most " +
                   std::to_string(static_cast<std::int64_t>(kMaxCaseRanks)) +
                   " ranks (one thread or process each)");
}

int case_world_size(const CaseNode& node, std::int64_t highest_rank) {
  if (static_cast<double>(highest_rank) + 1 > kMaxCaseRanks) {
    reject_value(node, "mesh",
                 "its highest rank is " + std::to_string(highest_rank) + ", so the case needs " +
                     std::to_string(highest_rank + 1) + " ranks; a case runs on at most " +
                     std::to_string(static_cast<std::int64_t>(kMaxCaseRanks)) +
                     " ranks (one thread or process each)");
  }
  return static_cast<int>(highest_rank + 1);
}

}  // namespace meshgate::runner
