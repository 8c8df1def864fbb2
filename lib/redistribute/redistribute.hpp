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

namespace meshgate {

// A contiguous row-major host tensor: shape, dtype and bytes. Enough for the executor and its
// checks; float16/bfloat16 are stored as their 16-bit patterns.
struct HostTensor {
  Shape shape;
  comm::DType dtype = comm::DType::f32;
  std::vector<std::byte> data;

  // A zero-filled tensor. Error(value) on a negative size.
  static HostTensor zeros(Shape shape, comm::DType dtype);
  std::int64_t numel() const;
  std::size_t element_size() const { return comm::element_size(dtype); }
  std::size_t bytes() const { return data.size(); }

  // Element `i` (flat index) read as / written from a double; exact for integer values that the
  // dtype represents exactly.
  double get(std::int64_t i) const;
  void set(std::int64_t i, double value);

  // Same shape, dtype and bytes (bitwise: replicas must agree to the last bit).
  friend bool operator==(const HostTensor&, const HostTensor&) = default;
};

// Copies the box of extents `extent` at `src_offset` in `src` to `dst_offset` in `dst` (same
// rank and dtype). Error(value) when the box leaves either tensor.
void copy_box(const HostTensor& src, std::span<const std::int64_t> src_offset, HostTensor& dst,
              std::span<const std::int64_t> dst_offset, std::span<const std::int64_t> extent);
// The piece [offset, offset + length) of `t` along `dim`, as a new tensor.
HostTensor narrow(const HostTensor& t, std::int64_t dim, std::int64_t offset, std::int64_t length);
// Divides every element by `divisor` (floating dtypes: rounded once to the dtype; integer
// dtypes: truncated, as C++ division).
void divide(HostTensor& t, std::int64_t divisor);

// The DType of a dtype name as written in case files ("float32", "bfloat16", "int64", ...).
comm::DType parse_tensor_dtype(std::string_view text);

// One collective as issued: what CommDebugMode counts, in the CONTRACT comm-string form.
struct IssuedComm {
  StepKind kind = StepKind::all_reduce;
  std::string group;  // mesh dim names (indices on an unnamed mesh) joined by '+', ascending
  ReduceOp reduce_op = ReduceOp::sum;
  std::int64_t src_tensor_dim = -1;
  std::int64_t dst_tensor_dim = -1;
  std::int64_t group_size = 1;
  // The collective's full buffer on this rank in the nccl-tests convention (all_gather: the
  // gathered output; reduce_scatter, all_to_all: the input; all_reduce: the buffer).
  std::int64_t bytes = 0;

  // Its comm string (comm_string.hpp): "all_reduce(A+C, sum)", "reduce_scatter(B, avg, dim=0)",
  // "all_gather(B+C, dim=1)", "all_to_all(B, dim=0->1)".
  std::string to_string() const;
  friend bool operator==(const IssuedComm&, const IssuedComm&) = default;
};

// The record of one rank's issued collectives, in issue order.
class CommLog {
 public:
  void record(IssuedComm c) { entries_.push_back(std::move(c)); }
  void clear() { entries_.clear(); }
  const std::vector<IssuedComm>& entries() const { return entries_; }
  std::vector<std::string> strings() const;
  std::int64_t bytes() const;  // sum of the entries' bytes

 private:
  std::vector<IssuedComm> entries_;
};

// A Communicator that forwards every call to `inner` and records each collective in `log`
// under the group name it was created with, like DTensor tests' CommDebugMode. The executor
// declares the tensor dims of the next collective with annotate(); they are part of the
// recorded string (a communicator call alone does not know them).
class CountingCommunicator final : public comm::Communicator {
 public:
  CountingCommunicator(std::unique_ptr<comm::Communicator> inner, std::string group, CommLog* log);

  // Tensor dims and reduce op (placement form) of the next collective, as the step has them.
  void annotate(std::int64_t src_tensor_dim, std::int64_t dst_tensor_dim, ReduceOp op);
  // Where the following collectives are recorded; nullptr records nothing.
  void set_log(CommLog* log) { log_ = log; }

  std::string_view backend() const override { return inner_->backend(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce(const void* send, void* recv, std::size_t count, comm::DType dtype,
                  comm::ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::size_t count, comm::DType dtype) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, comm::DType dtype,
                      comm::ReduceOp op) override;
  void all_to_all(const void* send, void* recv, std::size_t count, comm::DType dtype) override;
  void broadcast(const void* send, void* recv, std::size_t count, comm::DType dtype,
                 int root) override;
  void barrier() override { inner_->barrier(); }
  // Uncounted groups (the log only names groups the executor creates).
  std::unique_ptr<comm::Communicator> split(const std::vector<std::vector<int>>& groups) override {
    return inner_->split(groups);
  }
  void* allocate(std::size_t bytes) override { return inner_->allocate(bytes); }
  void deallocate(void* ptr) override { inner_->deallocate(ptr); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    inner_->copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    inner_->copy_to_host(dst, src, bytes);
  }
  void synchronize() override { inner_->synchronize(); }

 private:
  void note(StepKind kind, std::int64_t bytes);

  std::unique_ptr<comm::Communicator> inner_;
  std::string group_;
  CommLog* log_;
  std::int64_t src_dim_ = -1;
  std::int64_t dst_dim_ = -1;
  ReduceOp op_ = ReduceOp::sum;
};

// The world ranks of every group of `dims` of `mesh` over a world of `world_size` ranks: the
// ranks sharing their coordinates outside `dims` (and their row, on a mesh whose layout leaves
// ranks of its rank map to sub-meshes of their own), each group ordered row-major over `dims`
// (ascending), groups ordered by row and those outside coordinates. Ranks not in the mesh are
// left out.
std::vector<std::vector<int>> mesh_groups(const DeviceMesh& mesh,
                                          std::span<const std::int64_t> dims, int world_size);

// The "A+C" name of a group of mesh dims (indices on an unnamed mesh), in ascending order
// whatever the order of `dims`, as comm strings name groups.
std::string group_name(const DeviceMesh& mesh, std::span<const std::int64_t> dims);

// The sets of mesh dims (each ascending) that the collectives of `steps` run on, size-1
// groups left out, sorted and without duplicates.
std::vector<std::vector<std::int64_t>> collective_groups(std::span<const TransformStep> steps);

// The group dim sets that the plans of src -> dst under any of `options` use at ANY coordinate of
// the mesh, sorted and without duplicates. Plans depend on the rank's coordinate (uneven shards
// give different logical shapes, hence different merge decisions, docs/kinds.md, Planning), so
// ranks can need different groups; this list is the same on every rank, and splitting it in order
// (Redistributor::create_groups) before running keeps the world-wide splits paired. Errors as
// plan_redistribute.
std::vector<std::vector<std::int64_t>> groups_of_all_coordinates(
    const DTensorSpec& src, const DTensorSpec& dst, std::span<const PlanOptions> options);

// What a rank of `world` that is not in `mesh` calls while the mesh's ranks call
// create_groups(dim_sets) on executors that hold no group yet: the same world-wide splits in
// the same order, joining none of the groups. Collective over `world`. Error(value) when the
// rank is in the mesh or a mesh dim is outside it.
void join_group_splits(comm::Communicator& world, const DeviceMesh& mesh,
                       std::span<const std::vector<std::int64_t>> dim_sets);

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
