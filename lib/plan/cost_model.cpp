#include "plan/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/small_vector.hpp"
#include "layout/int_tuple.hpp"
#include "layout/mesh_layout.hpp"

namespace meshgate {
std::string_view to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce:
      return "all_reduce";
    case CollectiveOp::all_gather:
      return "all_gather";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::all_to_all:
      return "all_to_all";
    case CollectiveOp::broadcast:
      return "broadcast";
  }
  return "?";
}

CollectiveOp parse_collective_op(std::string_view text) {
  for (CollectiveOp op :
       {CollectiveOp::all_reduce, CollectiveOp::all_gather, CollectiveOp::reduce_scatter,
        CollectiveOp::all_to_all, CollectiveOp::broadcast}) {
    if (text == to_string(op)) return op;
  }
  throw Error(ErrorKind::value, "unknown collective '" + std::string(text) +
                                    "': use all_reduce, all_gather, reduce_scatter, all_to_all "
                                    "or broadcast");
}

namespace {

// Every leaf of the given modes, inline for up to 16: mesh layouts have a handful of leaves and
// costing must not allocate on the planning path.
using Leaves = SmallVector<LayoutLeaf, 16>;

void add_leaves(Leaves& out, const Layout& mode) {
  if (mode.shape().is_int()) {
    out.push_back({mode.shape().value(), mode.stride().value()});
    return;
  }
  const std::vector<std::int64_t> shapes = leaves(mode.shape());
  const std::vector<std::int64_t> strides = leaves(mode.stride());
  for (std::size_t i = 0; i < shapes.size(); ++i) out.push_back({shapes[i], strides[i]});
}

// Walk the leaves from the finest stride: a leaf whose whole extent still fits in the first
// node multiplies the ranks per node; the first one that does not fit contributes the members
// it still has inside the node, and every coarser leaf only adds nodes. Adjacent leaves need
// no coalescing first: walking them one after the other reaches the same extent.
GroupPlacement place_leaves(Leaves& modes, const Topology& topology) {
  GroupPlacement g;
  for (const LayoutLeaf& leaf : modes) g.size *= leaf.size;
  if (g.size <= 1) return g;
  const std::int64_t per_node_limit = std::max<std::int64_t>(1, topology.ranks_per_node);
  std::sort(modes.begin(), modes.end(), [](const LayoutLeaf& a, const LayoutLeaf& b) {
    return a.stride != b.stride ? a.stride < b.stride : a.size < b.size;
  });
  std::int64_t per_node = 1;
  std::int64_t extent = 0;  // largest offset reached by the leaves taken so far
  for (const auto& [shape, stride] : modes) {
    if (shape <= 1) continue;
    if (stride == 0) {
      per_node *= shape;
      continue;
    }
    if (extent + stride * (shape - 1) < per_node_limit) {
      per_node *= shape;
      extent += stride * (shape - 1);
      continue;
    }
    if (stride < per_node_limit) {
      per_node *= std::min(shape, (per_node_limit - 1 - extent) / stride + 1);
    }
    break;
  }
  g.ranks_per_node = std::max<std::int64_t>(1, per_node);
  g.nodes = (g.size + g.ranks_per_node - 1) / g.ranks_per_node;
  return g;
}

}  // namespace

GroupPlacement place_group(const Layout& group, const Topology& topology) {
  Leaves l;
  add_leaves(l, group);
  return place_leaves(l, topology);
}

GroupPlacement place_group(std::span<const LayoutLeaf> modes, const Topology& topology) {
  Leaves l{modes};
  return place_leaves(l, topology);
}

double bus_factor(CollectiveOp op, std::int64_t n) {
  if (n <= 1) return 0;
  const double nd = static_cast<double>(n);
  switch (op) {
    case CollectiveOp::all_reduce:
      return 2 * (nd - 1) / nd;
    case CollectiveOp::broadcast:
      return 1;
    default:
      return (nd - 1) / nd;
  }
}

double modeled_time(CollectiveOp op, const GroupPlacement& where, std::int64_t bytes,
                    const Topology& t) {
  const std::int64_t n = where.size;
  if (n <= 1) return 0;
  // A ring or tree advances at the pace of its slowest link: once the group leaves its node,
  // every step pays the network's latency and the bytes go at the network's bandwidth.
  const bool crosses = where.nodes > 1;
  const double alpha = crosses ? t.inter_latency : t.intra_latency;
  const double bandwidth = crosses ? t.inter_bandwidth : t.intra_bandwidth;
  const double nd = static_cast<double>(n);
  const double ring_steps = (op == CollectiveOp::all_reduce ? 2.0 : 1.0) * (nd - 1);
  double latency = t.ring_latency_factor * ring_steps * alpha;
  if (op == CollectiveOp::all_reduce || op == CollectiveOp::broadcast) {
    const double tree_steps =
        (op == CollectiveOp::all_reduce ? 2.0 : 1.0) * std::ceil(std::log2(nd));
    latency = std::min(latency, t.tree_latency_factor * tree_steps * alpha);
  }
  const double transfer =
      bus_factor(op, n) * static_cast<double>(std::max<std::int64_t>(0, bytes)) / bandwidth;
  return t.launch_overhead + latency + transfer;
}

double modeled_time(const DeviceMesh& mesh, std::span<const std::int64_t> dims, CollectiveOp op,
                    std::int64_t bytes, const Topology& topology) {
  Leaves l;
  const Layout& layout = mesh.layout();
  for (std::int64_t d : dims) {
    if (d < 0 || static_cast<std::size_t>(d) >= mesh.ndim()) {
      throw Error(ErrorKind::index, "mesh dim " + std::to_string(d) + " is out of range for a " +
                                        std::to_string(mesh.ndim()) + "-dim mesh");
    }
    add_leaves(l, mesh_mode(layout, d));
  }
  return modeled_time(op, place_leaves(l, topology), bytes, topology);
}

}  // namespace meshgate
