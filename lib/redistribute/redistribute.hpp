#pragma once
// Executes a redistribution plan on one rank's local tensor through a Communicator, as
// DTensor's redistribute_local_tensor: one step, one collective on the step's group (the
// rank's group of the step's mesh dims; a merged step's flattened group), with torch.chunk
// padding and trimming for uneven shards. See docs/kinds.md, Redistribution.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "mesh/device_mesh.hpp"
#include "placement/placement.hpp"
#include "plan/plan.hpp"
#include "redistribute/counting_communicator.hpp"
#include "redistribute/group_cache.hpp"
#include "redistribute/host_tensor.hpp"

namespace meshgate {

// One rank's executor, one group communicator per set of mesh dims, kept for its life.
// Splitting a group is a collective call over every rank of `world`, so all ranks must split
// the same groups in the same order. Two ways to keep that:
//   - create_groups() up front with a list that is the same on every rank (for a plan that
//     differs between ranks: groups_of_all_coordinates); after that a step whose group was not
//     created is an error instead of a split that no other rank joins;
//   - or, when every rank runs plans with the same groups in the same order, let run() split
//     each group the first time a step needs it.
class Redistributor {
 public:
  // `world` must outlive the executor; its ranks are the global ranks of `mesh`.
  // Error(value) when the world's rank is not in the mesh.
  Redistributor(comm::Communicator& world, DeviceMesh mesh);

  // Runs `steps` (a plan of this rank's coordinate) on `local`, which must have the first
  // step's input shape; returns the local tensor of the target placements. Size-1 groups are
  // skipped. Every collective is recorded in `log` when given.
  // Error(value) on a local tensor whose shape does not match a step's input shape.
  HostTensor run(std::span<const TransformStep> steps, HostTensor local, CommLog* log = nullptr);

  // Splits, in the given order, the group of each set of mesh dims in `dim_sets` that this
  // executor does not hold yet. Collective over `world`: every rank passes the same list.
  // From then on run() never splits: a step on a group not created is Error(runtime).
  // Error(value) for a mesh dim outside the mesh.
  void create_groups(std::span<const std::vector<std::int64_t>> dim_sets);

  // src -> dst of this rank's `local`, safe when plans differ between ranks: creates the groups
  // of every coordinate's plan (groups_of_all_coordinates), then runs this rank's plan.
  // Collective over `world`. Errors as plan_redistribute and run().
  HostTensor redistribute(const DTensorSpec& src, const DTensorSpec& dst, HostTensor local,
                          const PlanOptions& options = {}, CommLog* log = nullptr);

  const DeviceMesh& mesh() const { return mesh_; }
  const std::vector<std::int64_t>& coordinate() const { return coordinate_; }
  // How many group communicators were split so far (for tests of the cache).
  std::size_t groups_created() const { return groups_.size(); }

 private:
  CountingCommunicator& group(std::span<const std::int64_t> dims, CommLog* log);
  // The group of step `s`, checked to have the step's group size.
  CountingCommunicator& step_group(const TransformStep& s, CommLog* log);
  CountingCommunicator& split_group(std::vector<std::int64_t> sorted_dims);
  HostTensor step(const TransformStep& s, HostTensor x, CommLog* log);

  comm::Communicator* world_;
  DeviceMesh mesh_;
  std::vector<std::int64_t> coordinate_;
  std::map<std::vector<std::int64_t>, std::unique_ptr<CountingCommunicator>> groups_;
  bool groups_fixed_ = false;  // create_groups() was called: run() no longer splits
};

}  // namespace meshgate
