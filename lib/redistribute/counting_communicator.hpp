#pragma once
// What CommDebugMode counts in DTensor's tests: the collectives a rank issued, each in its
// comm-string form (plan/comm_string.hpp), recorded by a Communicator that forwards every call.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/forwarding_communicator.hpp"
#include "plan/plan.hpp"

namespace meshgate {

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
// recorded string (a communicator call alone does not know them). Groups it splits are the
// inner backend's, uncounted: the log only names groups the executor creates.
class CountingCommunicator final : public comm::ForwardingCommunicator {
 public:
  CountingCommunicator(std::unique_ptr<comm::Communicator> inner, std::string group, CommLog* log);

  // Tensor dims and reduce op (placement form) of the next collective, as the step has them.
  void annotate(std::int64_t src_tensor_dim, std::int64_t dst_tensor_dim, ReduceOp op);
  // Where the following collectives are recorded; nullptr records nothing.
  void set_log(CommLog* log) { log_ = log; }

  void all_reduce(const void* send, void* recv, std::size_t count, comm::DType dtype,
                  comm::ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::size_t count, comm::DType dtype) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, comm::DType dtype,
                      comm::ReduceOp op) override;
  void all_to_all(const void* send, void* recv, std::size_t count, comm::DType dtype) override;
  // broadcast is no redistribution collective: forwarded, not counted.

 private:
  void note(StepKind kind, std::int64_t bytes);

  std::string group_;
  CommLog* log_;
  std::int64_t src_dim_ = -1;
  std::int64_t dst_dim_ = -1;
  ReduceOp op_ = ReduceOp::sum;
};

}  // namespace meshgate
