#pragma once
// An alpha-beta model of collectives on a node topology: time = latency * steps + bytes *
// bus_factor / bandwidth, where the group's layout over the world says how many nodes it spans and
// how many of its ranks share a node. Pure host code; a group is described by its layout, so
// costing a step of a 16384-rank mesh enumerates no ranks.
#include <cstdint>
#include <span>
#include <string_view>

#include "layout/layout.hpp"
#include "mesh/device_mesh.hpp"
#include "mesh/flattened_dim.hpp"

namespace meshgate {

enum class CollectiveOp : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  broadcast
};
std::string_view to_string(CollectiveOp op);
CollectiveOp parse_collective_op(std::string_view text);  // Error(value) otherwise

// A cluster of identical nodes. Ranks are placed on nodes in blocks: world rank r (the mesh
// position, i.e. the rank map is taken as consecutive ranks) lives on node r / ranks_per_node.
// Defaults: an 8-GPU node with NVLink-class links (about 150 GB/s bus bandwidth per rank, 3 us
// per step) and an InfiniBand-class network (one 200 Gb/s NIC per rank: 25 GB/s, 10 us).
struct Topology {
  std::int64_t ranks_per_node = 8;
  double intra_bandwidth = 150e9;  // bytes/s per rank inside a node
  double intra_latency = 3e-6;     // seconds per algorithm step inside a node
  double inter_bandwidth = 25e9;   // bytes/s per rank across nodes
  double inter_latency = 10e-6;    // seconds per algorithm step across nodes
  double launch_overhead = 5e-6;   // seconds per collective call (kernel launch, proxy setup)
  // Ring: n-1 latency steps (2(n-1) for all_reduce). Tree: ceil(log2 n) (twice for all_reduce);
  // the model takes the cheaper of the two for all_reduce and broadcast, ring for the others.
  double ring_latency_factor = 1.0;
  double tree_latency_factor = 1.0;
  friend bool operator==(const Topology&, const Topology&) = default;
};

// Where a group's ranks sit: derived from its layout without enumerating ranks.
struct GroupPlacement {
  std::int64_t size = 1;            // ranks in the group
  std::int64_t ranks_per_node = 1;  // of them on one node (the node of the group's first rank)
  std::int64_t nodes = 1;           // nodes the group spans: ceil(size / ranks_per_node)
  friend bool operator==(const GroupPlacement&, const GroupPlacement&) = default;
};
// `group` maps a group coordinate to a world position (a mode or several modes of a mesh
// layout). Cost: O(number of modes).
GroupPlacement place_group(const Layout& group, const Topology& topology);
// The same for a group given as flat (size, stride) modes, e.g. some modes of a mesh layout.
GroupPlacement place_group(std::span<const LayoutLeaf> modes, const Topology& topology);

// nccl-tests bus-bandwidth factor: all_reduce 2(n-1)/n, all_gather / reduce_scatter /
// all_to_all (n-1)/n, broadcast 1 (0 for n = 1).
double bus_factor(CollectiveOp op, std::int64_t n);

// Modeled seconds of one collective over a group placed as `where`, moving `bytes` in the
// nccl-tests convention (the full buffer: all_reduce's buffer, all_gather's gathered output,
// reduce_scatter's input, all_to_all's buffer). A size-1 group costs 0: it issues nothing.
// @post non-decreasing in bytes, and never cheaper when the same group spans more nodes.
double modeled_time(CollectiveOp op, const GroupPlacement& where, std::int64_t bytes,
                    const Topology& topology = {});
// The group of `mesh` over `dims` (several dims = their flattened group, row-major over the
// dims in the order given), costed as above. Error(index) on a dim out of range.
double modeled_time(const DeviceMesh& mesh, std::span<const std::int64_t> dims, CollectiveOp op,
                    std::int64_t bytes, const Topology& topology = {});

}  // namespace meshgate
