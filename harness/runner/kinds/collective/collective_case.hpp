#pragma once
// kind: collective — one collective (all_reduce, all_gather, reduce_scatter, all_to_all,
// broadcast) on the groups of a mesh dim (or of several dims flattened), over a list or sweep
// of sizes, in place and out of place. As nccl-tests: inputs are small integers generated from
// (seed, rank, index) so that every result is exactly representable, every rank counts its
// wrong output elements and the counts are summed over the ranks; any wrong element fails the
// case. Every size is timed (max over ranks; with perf: the median per-call time of the timed
// samples, each a batch of calls sized as the runner sizes its own, timing.hpp), and reported as
// time, algbw and busbw with nccl-tests' bus factors.
// Another implementation (external_impl.hpp) gets the same inputs as files and answers each
// rank's outputs, which the same check counts and the same table reports; a row it declines
// (an in-place row of an op its API has no in-place form of) is a skip in that table, and the
// case is judged on the rows it ran.
// What differs between the collectives (buffers, inputs, expected outputs, bus factor, the call)
// is in their entries of collective_table.hpp.
//
// The kind's files: parse.cpp reads the case, run.cpp runs it on meshgate's communicators,
// impl.cpp hands it to another implementation and reads its outputs, judge.cpp counts wrong
// elements and makes the verdict and the per-size table for both; values.hpp generates the
// exact inputs and expected outputs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "byte_size.hpp"
#include "case_kind.hpp"
#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/half_float.hpp"
#include "external_impl.hpp"
#include "kinds/case_values.hpp"
#include "kinds/collective/collective_table.hpp"
#include "kinds/memory_estimates.hpp"
#include "kinds/mesh_spec.hpp"
#include "mesh/device_mesh.hpp"
#include "plan/cost_model.hpp"
#include "kinds/collective/values.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_collective_case(CaseNode& node, bool expect_error);
const std::vector<std::string>& collective_case_keys();

namespace collective_kind {


// ---- the case -----------------------------------------------------------------------------

struct SizeResult {
  std::int64_t bytes = 0;
  bool inplace = false;
  double time_s = 0;
  std::int64_t wrong = 0;
  // With perf, timed here: how many calls each of the size's timed samples made.
  std::optional<std::int64_t> calls_per_sample;
  // Why another implementation did not run this row ({"unsupported": REASON} in its answer):
  // the row is a skip in the table, and neither time nor wrong elements are counted for it.
  std::optional<std::string> unsupported;
};

// What one rank keeps between run() and the runner's timed iterations: its group's
// communicator and the buffers of the largest size.
struct RankState {
  std::unique_ptr<comm::Communicator> group;
  void* send = nullptr;
  void* recv = nullptr;

  RankState() = default;
  RankState(const RankState&) = delete;
  RankState& operator=(const RankState&) = delete;
  RankState(RankState&&) = default;
  RankState& operator=(RankState&&) = default;
  ~RankState() { release(); }
  void release() {
    if (group) {
      if (send != nullptr) group->deallocate(send);
      if (recv != nullptr && recv != send) group->deallocate(recv);
    }
    send = recv = nullptr;
    group.reset();
  }
};

// An all_reduce of a few host values over `comm`, through the backend's own memory (device
// memory for nccl), in place.
template <class T>
void reduce_host(comm::Communicator& comm, T* values, std::size_t n, DType dtype, ReduceOp op) {
  const std::size_t bytes = n * sizeof(T);
  void* buffer = comm.allocate(bytes);
  try {
    comm.copy_from_host(buffer, values, bytes);
    comm.all_reduce(buffer, buffer, n, dtype, op);
    comm.synchronize();
    comm.copy_to_host(values, buffer, bytes);
  } catch (...) {
    comm.deallocate(buffer);
    throw;
  }
  comm.deallocate(buffer);
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median of a size's timed iterations: what its row of the table reports.
inline double median_of(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  if (n == 0) return 0;
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

// The input files handed to another implementation are written, and its outputs read back, for
// every rank and size; above this they would cost more time than the collectives they check.
inline constexpr double kImplInputLimitBytes = 256.0 * 1024 * 1024;

class CollectiveCase final : public PreparedCase {
 public:
  const CollectiveEntry* op = nullptr;  // the collective's entry of collective_table()
  DType dtype = DType::f32;
  std::optional<ReduceOp> reduce;
  int root = 0;
  std::uint64_t seed = 0;
  std::vector<std::int64_t> sizes;  // bytes, nccl-tests meaning
  std::vector<bool> inplace = {false};
  std::vector<std::vector<int>> groups;  // case ranks of every group
  int group_size = 1;
  int case_ranks = 1;
  nlohmann::json params_json;
  // The mesh and group dims (indices) for the alpha-beta cost model of lib/plan.
  std::optional<DeviceMesh> mesh;
  std::vector<std::int64_t> dims;
  // The runner times only cases that do not expect a rejection: only then run() keeps buffers.
  bool expect_error = false;

  int ranks() const override { return case_ranks; }
  nlohmann::json params() const override { return params_json; }

  // Every rank of a group holds the send and receive buffers of the largest size and a host
  // staging buffer as large as either (plus the threads backend's scratch copy for an in-place
  // all_to_all); the threads backend holds every rank in this process.
  MemoryEstimate memory_estimate() const override;

  Outcome run(RunContext& ctx) override;

  // `calls` calls of the largest size (the first in-place setting) on the buffers run() kept.
  double time_calls(RunContext& ctx, std::int64_t calls) override;

  void release() override { release_states(); }

  // Every group rank's send buffer of every size, as meshgate's own run fills it, in one file
  // per (size, rank): the in-place and out-of-place rows of a size share their inputs.
  std::optional<nlohmann::json> impl_request(const std::filesystem::path& dir,
                                             std::string& why) override;

  // Each row's outputs (and an out-of-place broadcast root's send) counted by the check of
  // meshgate's own run; its time is the median of the answered iterations.
  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path& dir) override;

 private:
  std::vector<RankState> states_;

  nlohmann::json skip_row(const SizeResult& r) const;
  static void note_declined(std::vector<std::pair<std::string, std::string>>& declined,
                            const SizeResult& r);
  static void add_declined(Outcome& outcome,
                           const std::vector<std::pair<std::string, std::string>>& declined,
                           std::size_t declined_rows, std::size_t row_count);
  SizeResult read_row(const nlohmann::json& entry, std::int64_t bytes, bool in_place,
                      const std::filesystem::path& dir) const;

  // The verdict and the per-size table of every (in-place setting, size) row, in the order
  // they ran: the same for meshgate's own run and for another implementation's answer.
  Outcome judge(const std::vector<SizeResult>& results) const;

  // "8 B out-of-place": a row of the per-size table in messages.
  static std::string row_name(const SizeResult& r);

  std::size_t element_size() const { return comm::element_size(dtype); }

  // The generated values of the group with this index: every group has its own inputs.
  Values values_of(int group_index) const;

  // The cost model's time for one call of `bytes` on the case's groups (default topology: 8
  // ranks per node), a deterministic number beside the measured one.
  double modeled(std::int64_t bytes) const;
  CollectiveBuffers buffers(std::int64_t bytes) const;
  // Per-rank element count of the Communicator call for a size in bytes.
  std::size_t count_of(std::int64_t bytes) const { return buffers(bytes).count; }
  std::size_t send_bytes(std::int64_t bytes) const { return buffers(bytes).send_bytes; }
  std::size_t recv_bytes(std::int64_t bytes) const { return buffers(bytes).recv_bytes; }

  // (group index, rank in the group) of a case rank; group -1 when the rank is in no group.
  std::pair<int, int> place_of(int rank) const;
  int group_rank_of(int rank) const { return place_of(rank).second; }

  std::string plan_line() const;

  // Pointers of the call for one size: in place as NCCL defines it.
  using Call = CollectiveEntry::Pointers;
  Call call_buffers(const RankState& state, std::int64_t bytes, bool in_place, int g) const;

  void issue(comm::Communicator& group, const Call& call, std::int64_t bytes) const;

  // Seconds of `calls` calls back to back, the slowest rank's: every group calls at once after
  // a barrier of the whole case (ranks in no group only join the barrier and the maximum). As
  // in nccl-tests, the calls of a batch are issued one after the other and waited for once.
  double timed_calls(comm::Communicator& case_comm, RankState& state, std::int64_t bytes,
                     bool in_place, int g, std::int64_t calls) const;

  std::vector<SizeResult> run_rank(int rank, comm::Communicator& case_comm,
                                   const std::optional<PerfSpec>& perf);

  // Fills the call's buffers: the output with the sentinel, then this rank's inputs
  // (fill_send).
  void prepare(RankState& state, std::vector<std::byte>& host, const Codec& codec,
               const Values& values, std::int64_t bytes, bool in_place, int g) const;

  // Writes the send buffer of group rank `g` for a size into `host` and returns its element
  // count. A broadcast's input is the root's alone: the other ranks' send holds the sentinel,
  // so that a backend which reads it, or leaves any recv unwritten (the root's included), is
  // counted wrong.
  std::size_t fill_send(std::byte* host, const Codec& codec, const Values& values,
                        std::int64_t bytes, int g) const;

  std::int64_t count_wrong(RankState& state, std::vector<std::byte>& host, const Codec& codec,
                           const Values& values, std::int64_t bytes, bool in_place, int g) const;

  // The output elements of group rank `g` that differ from the exact result.
  std::int64_t wrong_in_output(const std::byte* out, const Codec& codec, const Values& values,
                               std::int64_t bytes, int g) const;

  // Out of place, the root's send is only read: an element the call changed is wrong too.
  bool checks_send(bool in_place, int g) const { return op->has_root && !in_place && g == root; }
  std::int64_t wrong_in_send(const std::byte* send, const Codec& codec, const Values& values,
                             std::int64_t bytes) const;

  std::string console_table(const std::vector<SizeResult>& results) const;

  template <class Fn>
  void run_guarded(RunContext& ctx, Fn&& fn) {
    try {
      ctx.run_on_ranks(case_ranks, fn);
    } catch (...) {
      release_states();
      throw;
    }
  }

  void release_states();
};

}  // namespace collective_kind
}  // namespace meshgate::runner
