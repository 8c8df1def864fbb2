#pragma once
// The contexts a case runs in. threads: every rank is a thread of this process, over a fresh
// threads communicator world of the case's size. mpi/nccl: this process is one rank of a
// process world; the case runs on a communicator over the first ranks of that world and every
// process agrees on each failure before going on.
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "case_kind.hpp"
#include "comm/communicator.hpp"
#include "comm/threads_world.hpp"

namespace meshgate::runner {

class ThreadsContext final : public RunContext {
 public:
  explicit ThreadsContext(int world_size, std::optional<PerfSpec> perf = std::nullopt,
                          double case_timeout_s = 0);
  ~ThreadsContext() override;

  std::string_view backend() const override { return "threads"; }
  int world_size() const override { return world_size_; }
  // Starts one thread per rank, joins them all, then rethrows the failure that happened first
  // (in time): a meshgate::Error as itself, anything else (and a comm::CollectiveFault) as
  // RankFailure. The first failure aborts the threads world, so that the other ranks, which
  // may be waiting for the failed one in a collective, throw instead of hanging. The
  // communicators come from one threads world of `ranks` ranks, made by the first call and
  // kept while later calls ask for the same number of ranks.
  void run_on_ranks(int ranks,
                    const std::function<void(int rank, comm::Communicator& comm)>& fn) override;
  int lead_rank() const override { return 0; }
  std::optional<PerfSpec> perf() const override { return perf_; }
  double case_timeout_s() const override { return case_timeout_s_; }

 private:
  int world_size_;
  std::optional<PerfSpec> perf_;
  double case_timeout_s_;
  // The last world made and one communicator per rank of it (a threads world hands each
  // rank's out once); dropped after a failure, whose collectives may have left it half way.
  std::unique_ptr<comm::ThreadsWorld> world_;
  std::vector<std::unique_ptr<comm::Communicator>> comms_;
};

// One rank of a process world running a case: `case_comm` spans the case's ranks (rank r of
// the case is rank r there) and is what kinds get; `control` spans the same ranks in host
// memory (the same object for mpi; the MPI world beside an nccl communicator) and carries the
// runner's own agreement. Every process of the case runs the same kind code, so every call of
// run_on_ranks is collective over both.
class ProcessContext final : public RunContext {
 public:
  ProcessContext(std::string backend, comm::Communicator& case_comm, comm::Communicator& control,
                 int world_size, std::optional<PerfSpec> perf = std::nullopt,
                 double case_timeout_s = 0);

  std::string_view backend() const override { return backend_; }
  int world_size() const override { return world_size_; }
  // Runs fn on this process's rank when it is below `ranks` (on a communicator over ranks
  // 0..ranks-1, split from the case's when smaller), then agrees over the case's communicator:
  // when any rank failed, every rank throws the failure of the lowest failing rank.
  void run_on_ranks(int ranks,
                    const std::function<void(int rank, comm::Communicator& comm)>& fn) override;
  int lead_rank() const override { return case_comm_.rank(); }
  std::optional<PerfSpec> perf() const override { return perf_; }
  double case_timeout_s() const override { return case_timeout_s_; }
  // The largest over the case's processes, on the runner's own host world.
  std::int64_t agree_on_calls(std::int64_t calls) override;

 private:
  std::string backend_;
  comm::Communicator& case_comm_;
  comm::Communicator& control_;
  int world_size_;
  std::optional<PerfSpec> perf_;
  double case_timeout_s_;
};

// Collective over `comm`: each rank passes what it caught (null when it succeeded). Returns
// normally when no rank failed; otherwise every rank throws the lowest failing rank's failure
// (a meshgate::Error keeps its kind and message; anything else becomes RankFailure naming
// that rank).
void agree_on_failure(comm::Communicator& comm, std::exception_ptr failure);

// Collective over `comm`: true on every rank when `ok` is true on every rank.
bool all_ranks_agree(comm::Communicator& comm, bool ok);

}  // namespace meshgate::runner
