#pragma once
// kind: command — a program in any language as a case. The runner starts `ranks` processes of
// `command` with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), waits for them with a deadline, and reads the JSON document each
// rank writes to $MESHGATE_RESULT: its status, message, metrics, timed samples and signals. The
// ranks' documents are merged as the built-in kinds merge ranks (docs/kinds.md, "Programs").
//
// Every rank's process is started by the rank itself, inside run_on_ranks: on the threads
// backend each rank thread starts one process; under mpi and nccl each runner process starts the
// process of its own rank. The ranks then exchange what they saw over the case's communicator,
// so the same code serves every backend and every process reaches the same verdict.
//
// The kind's files: parse.cpp reads the case, run.cpp runs its ranks and merges their reports,
// rendezvous.cpp is where the ranks meet (torchrun's variables, text exchanged between them),
// rank.cpp runs one rank's process (rank_process.hpp) and reads its result, judge.cpp checks a
// result document and merges the ranks' reports into the case's outcome. A command case speaks
// no implementation protocol: the program is the implementation under test.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "case_kind.hpp"
#include "comm/communicator.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_command_case(CaseNode& node, bool expect_error);
const std::vector<std::string>& command_case_keys();

namespace command_kind {

using Clock = std::chrono::steady_clock;

// Each rank is a process (and a thread of the runner on the threads backend): a typo such as
// `ranks: 40000` must not start forty thousand of them.
inline constexpr int kMaxRanks = 1024;
// A result document is a few numbers and lists; anything larger is not one.
inline constexpr std::uintmax_t kMaxResultBytes = std::uintmax_t{16} << 20;
// The runner's case timeout ends the whole run (its watchdog); the programs are stopped this much
// earlier (at most 1 s, 5% of a short timeout), so that the case gets an error row of its own.
inline constexpr double kWatchdogMargin = 0.05;
inline constexpr double kMaxWatchdogMargin = 1.0;

// ---- where the ranks meet (rendezvous.cpp) -------------------------------------------------

// Collective over `comm`: every rank's `mine`, by rank.
std::vector<std::string> all_gather_text(comm::Communicator& comm, const std::string& mine);

struct Rendezvous {
  std::string master_addr;
  int master_port = 0;  // 0 when rank 0 found none: `problem` says why
  int local_rank = 0;
  int local_world_size = 1;
  std::string problem;
};

// Collective over the case's communicator: rank 0 picks the port, every rank learns which
// ranks share its host. MASTER_ADDR is the loopback address when every rank runs on rank 0's
// host (always so on the threads backend), else rank 0's host name. Nothing here throws before
// the exchange, which every rank of a process world must reach.
Rendezvous agree_on_rendezvous(comm::Communicator& comm);

// ---- one rank (rank.cpp) -------------------------------------------------------------------

// Lets the ranks of a case that run in this process stop each other: the first rank that fails
// makes a pipe readable that every rank's wait watches, so that its peers, likely blocked on it
// in a collective, end at once instead of at the timeout. Under mpi and nccl each process holds
// one rank and its peers run until they end or time out.
class RankStopper {
 public:
  RankStopper() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
  }
  ~RankStopper() {
    for (const int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  RankStopper(const RankStopper&) = delete;
  RankStopper& operator=(const RankStopper&) = delete;

  int watch_fd() const { return fds_[0]; }
  void stop_others(int failed_rank) {
    int none = -1;
    if (first_failed_.compare_exchange_strong(none, failed_rank) && fds_[1] >= 0) {
      (void)!::write(fds_[1], "x", 1);
    }
  }
  int first_failed() const { return first_failed_.load(); }

 private:
  int fds_[2] = {-1, -1};
  std::atomic<int> first_failed_{-1};
};

// What the limit on a rank's run is and how to name it when it is reached.
struct Deadline {
  Clock::time_point at;
  bool set = false;
  std::string reached;  // "timed out after 60 s (timeout: 60)"
};

// Runs one rank's process and judges what it left: {"result": document} when it exited 0 with
// a well-formed result, else {"error": why} (without the "rank r: " the merge adds).
nlohmann::json run_rank(int rank, int ranks, const Rendezvous& meet,
                        const std::vector<std::string>& command,
                        const std::vector<std::pair<std::string, std::string>>& case_env,
                        const Deadline& deadline, RankStopper& stopper);

// ---- judging (judge.cpp) -------------------------------------------------------------------

// The problem of a result document, or nullopt when it has the contract's form.
std::optional<std::string> result_problem(const nlohmann::json& doc);

// The merged outcome of every rank's report (by rank, the rank that stopped the others first):
// the worst status wins and each message keeps its rank; metrics and signals are rank 0's, with
// the signals that another rank reports differently added under its rank; a timed iteration
// takes the max over the ranks that timed.
Outcome merge_reports(const std::vector<nlohmann::json>& reports, bool timed);

// ---- the case ------------------------------------------------------------------------------

class CommandCase final : public PreparedCase {
 public:
  std::vector<std::string> command;
  int rank_count = 1;
  std::optional<double> timeout_s;
  std::vector<std::pair<std::string, std::string>> env;

  // The programs' memory is their own, outside the runner.
  MemoryEstimate memory_estimate() const override { return {}; }
  int ranks() const override { return rank_count; }

  nlohmann::json params() const override;

  Outcome run(RunContext& ctx) override;

  // The program times its own iterations: run() hands them to the runner (measured_time_s).
  double time_calls(RunContext&, std::int64_t) override;

 private:
  // The case's own timeout, or the runner's case timeout less a margin when that comes first.
  Deadline deadline_for(double case_timeout_s) const;
};

}  // namespace command_kind
}  // namespace meshgate::runner
