#include "plan/mesh_view.hpp"

#include <algorithm>
#include <cstdint>

#include "core/error.hpp"
#include "layout/int_tuple.hpp"
#include "layout/mesh_layout.hpp"
#include "plan/plan.hpp"

namespace meshgate {
namespace plan_internal {

MeshView check_and_view(const DTensorSpec& src, const DTensorSpec& dst,
                        std::span<const std::int64_t> coordinate) {
  if (!(src.mesh.layout() == dst.mesh.layout() && src.mesh.names() == dst.mesh.names())) {
    throw Error(ErrorKind::value, "source and target specs are on different meshes (" +
                                      to_string(src.mesh.layout()) + " vs " +
                                      to_string(dst.mesh.layout()) + "): redistribute on one mesh");
  }
  if (src.shape != dst.shape || src.element_size != dst.element_size) {
    throw Error(ErrorKind::value,
                "source and target specs describe different tensors (shape or dtype): "
                "redistribution keeps the global tensor");
  }
  const std::size_t nd = src.mesh.ndim();
  if (src.placements.size() != nd || dst.placements.size() != nd) {
    throw Error(ErrorKind::value, "placements " + to_string(src.placements) + " -> " +
                                      to_string(dst.placements) + " need one entry per mesh dim (" +
                                      std::to_string(nd) + ")");
  }
  check_no_mixed_partial_types(src.placements);
  check_no_mixed_partial_types(dst.placements);
  // Default-initialized, then filled: `MeshView v{...}` would zero its inline buffers first.
  MeshView v;
  v.mesh = &src.mesh;
  v.dim_leaves = src.mesh.single_leaf_dims();
  if (v.dim_leaves.empty()) {
    v.shape.assign(src.mesh.shape());
  } else {
    v.shape.reserve(v.dim_leaves.size());
    for (const LayoutLeaf& leaf : v.dim_leaves) v.shape.push_back(leaf.size);
  }
  if (coordinate.empty()) {
    v.coord.resize(nd);
  } else {
    if (coordinate.size() != nd) {
      throw Error(ErrorKind::value, "coordinate has " + std::to_string(coordinate.size()) +
                                        " entries but the mesh has " + std::to_string(nd) +
                                        " dims");
    }
    v.coord.assign(coordinate);
    for (std::size_t i = 0; i < nd; ++i) {
      if (v.coord[i] < 0 || v.coord[i] >= v.shape[i]) {
        throw Error(ErrorKind::value, "coordinate entry " + std::to_string(v.coord[i]) +
                                          " is outside mesh dim " + std::to_string(i) +
                                          " of size " + std::to_string(v.shape[i]));
      }
    }
  }
  return v;
}

std::optional<std::string> find_flattened(const DeviceMesh& mesh,
                                          std::span<const LayoutLeaf> dim_leaves,
                                          std::span<const std::int64_t> dims) {
  if (mesh.names().empty()) return std::nullopt;
  for (std::int64_t d : dims) {
    // Mesh dims index the current mesh; a dim past its end cannot have been flattened (#174006).
    if (d < 0 || static_cast<std::size_t>(d) >= mesh.ndim()) return std::nullopt;
  }

  if (mesh.model() == LayoutModel::two_level) {
    std::vector<Layout> modes;
    modes.reserve(dims.size());
    for (std::int64_t d : dims) modes.push_back(mesh_mode(mesh.layout(), d));
    const Layout expected =
        make_layout(flattened_axes(mesh_axes_from_layout(make_layout(modes))).axes);
    return mesh.find_flattened([&](const Layout& flat) { return flat == expected; });
  }

  // one_level: the dims' leaves, outermost first, flattened as DeviceMesh::flatten does. The
  // usual mesh (each dim one leaf, a few dims) needs no allocation here.
  SmallVector<LayoutLeaf, 16> in;
  for (std::int64_t d : dims) {
    if (!dim_leaves.empty()) {
      in.push_back(dim_leaves[static_cast<std::size_t>(d)]);
      continue;
    }
    const Layout mode = mesh_mode(mesh.layout(), d);
    const std::vector<std::int64_t> sizes = leaves(mode.shape());
    const std::vector<std::int64_t> strides = leaves(mode.stride());
    for (std::size_t k = 0; k < sizes.size(); ++k) in.push_back({sizes[k], strides[k]});
  }
  SmallVector<LayoutLeaf, 16> out;
  out.resize_for_overwrite(std::max<std::size_t>(1, in.size()));
  out.resize_for_overwrite(flattened_leaves(in, out));
  return mesh.find_flattened([&](const Layout& flat) { return is_flattened_layout(flat, out); });
}

std::int64_t numel(std::span<const std::int64_t> shape) {
  std::int64_t n = 1;
  for (std::int64_t x : shape) n *= x;
  return n;
}

CollectiveOp collective_of(StepKind kind) {
  switch (kind) {
    case StepKind::all_reduce:
      return CollectiveOp::all_reduce;
    case StepKind::reduce_scatter:
      return CollectiveOp::reduce_scatter;
    case StepKind::all_gather:
      return CollectiveOp::all_gather;
    default:
      return CollectiveOp::all_to_all;
  }
}

namespace {

// The rank's index inside the (row-major, ascending dims) group of `dims`.
std::int64_t group_index(const MeshView& v, std::span<const std::int64_t> dims) {
  std::int64_t idx = 0;
  for (std::int64_t d : dims) {
    idx = idx * v.shape[static_cast<std::size_t>(d)] + v.coord[static_cast<std::size_t>(d)];
  }
  return idx;
}

// numel of `shape` with the extent of tensor dim `d` replaced by `extent` (and of `d2` by
// `extent2`, if given): the size of a collective's padded buffer, without building its shape.
std::int64_t numel_with(std::span<const std::int64_t> shape, std::size_t d, std::int64_t extent,
                        std::size_t d2 = SIZE_MAX, std::int64_t extent2 = 0) {
  std::int64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    n *= i == d2 ? extent2 : i == d ? extent : shape[i];
  }
  return n;
}

}  // namespace

void fill_shapes(TransformStep& s, const MeshView& v, std::span<const std::int64_t> input,
                 std::int64_t es) {
  const std::int64_t n = s.group_size;
  const std::int64_t idx = group_index(v, s.mesh_dims);
  s.input_shape.assign(input);
  s.output_shape.assign(input);
  s.bytes = 0;
  // The executor skips size-1 groups: the local tensor stays as it is.
  if (n == 1) return;
  switch (s.kind) {
    case StepKind::all_reduce:
      s.bytes = numel(input) * es;
      break;
    case StepKind::reduce_scatter:
    case StepKind::local_chunk: {
      const auto d = static_cast<std::size_t>(s.dst_tensor_dim);
      s.output_shape[d] = chunk_range(input[d], n, idx).length;
      if (s.kind == StepKind::reduce_scatter) {
        s.bytes = numel_with(input, d, padded_chunk(input[d], n) * n) * es;
      }
      break;
    }
    case StepKind::all_gather: {
      const auto d = static_cast<std::size_t>(s.src_tensor_dim);
      s.output_shape[d] = s.logical_shape[d];
      s.bytes = numel_with(input, d, padded_chunk(s.logical_shape[d], n) * n) * es;
      break;
    }
    case StepKind::all_to_all: {
      const auto a = static_cast<std::size_t>(s.src_tensor_dim);
      const auto b = static_cast<std::size_t>(s.dst_tensor_dim);
      s.output_shape[a] = s.logical_shape[a];
      s.output_shape[b] = chunk_range(input[b], n, idx).length;
      // As the reference's padded buffer: b's assignment wins should a equal b.
      s.bytes = numel_with(input, a, padded_chunk(s.logical_shape[a], n), b,
                           padded_chunk(input[b], n) * n) *
                es;
      break;
    }
    case StepKind::local_partial:
      break;
  }
}

void fill_cost(TransformStep& s, const MeshView& v, const Topology& topology) {
  s.modeled_time = 0;
  if (!is_collective(s.kind) || s.group_size <= 1) return;
  if (v.dim_leaves.empty()) {
    s.modeled_time = modeled_time(*v.mesh, s.mesh_dims, collective_of(s.kind), s.bytes, topology);
    return;
  }
  SmallVector<LayoutLeaf, 16> group;
  for (std::int64_t d : s.mesh_dims) group.push_back(v.dim_leaves[static_cast<std::size_t>(d)]);
  s.modeled_time = modeled_time(collective_of(s.kind), place_group(group, topology), s.bytes,
                                topology);
}

double total_cost(std::span<const TransformStep> steps) {
  double t = 0;
  for (const TransformStep& s : steps) t += s.modeled_time;
  return t;
}

}  // namespace plan_internal

std::optional<std::string> find_flattened_dim(const DeviceMesh& mesh,
                                              std::span<const std::int64_t> dims) {
  return plan_internal::find_flattened(mesh, {}, dims);
}

}  // namespace meshgate
