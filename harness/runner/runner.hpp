#pragma once
// The two commands of meshgate-runner, with the case kinds passed in so that tests can run
// the whole pipeline on kinds of their own.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_kind.hpp"
#include "external_impl.hpp"
#include "results_writer.hpp"
#include "filter.hpp"
#include "validate.hpp"

namespace meshgate::runner {

struct RunOptions {
  std::vector<std::string> paths;
  CaseFilter filter;
  std::string backend = "threads";
  std::optional<int> ranks;            // caps the world; none = each case gets what it needs
  std::optional<std::string> out_dir;  // default reports/<run id>
  std::optional<std::string> run_id;   // default a fresh one
  bool resume = false;
  double case_timeout_s = 300;  // 0 = no watchdog
  bool progress = false;
  ValidationOptions validation;
  // The implementation under test (docs/impl-protocol.md): none = meshgate's own library;
  // otherwise its name and the command that starts it.
  std::optional<std::string> impl;
  std::vector<std::string> impl_command;
  // --cpus: the CPUs the runner and everything it starts are pinned to while the run lasts;
  // none = not pinned.
  std::optional<std::vector<int>> cpus;
  // --min-sample-time: the shortest timed sample of a perf case without perf.min_sample_time.
  double min_sample_time_s = kDefaultMinSampleTimeS;
};

struct ListOptions {
  std::vector<std::string> paths;
  CaseFilter filter;
  bool json = false;
  ValidationOptions validation;
  bool kinds = false;  // --kinds: the kinds this runner knows, not cases (no paths then)
};

// What running one case produced, before it becomes a result row.
struct CaseRun {
  Outcome outcome;
  nlohmann::json params = nlohmann::json::object();
  nlohmann::json samples = nlohmann::json::object();
  double seconds = 0;
};

// Runs one validated case on the threads backend: the skip check against `ranks_cap`, then
// execute_in() on a fresh threads world of the case's size (or of `ranks_cap`).
CaseRun execute_case(PlannedCase& planned, std::optional<int> ranks_cap);

// Runs one validated case in `ctx`: run(), the expect_error rules, then the perf measurement of
// a passing perf case. With `agree` (process backends), every rank of the case first learns
// whether all ranks passed, so that either all of them time the case or none does.
CaseRun execute_in(PlannedCase& planned, RunContext& ctx,
                   const std::function<bool(bool passed)>& agree = nullptr);

// Runs one validated case on another implementation: its request, the implementation's answer,
// and the case's own checks of the observables. Input and output tensors live in a folder under
// `scratch` that is removed afterwards.
CaseRun execute_external(PlannedCase& planned, ExternalImpl& impl,
                         const std::filesystem::path& scratch);

// Where the cases of one run execute: the threads of this process, or one rank of a process
// world (mpi, nccl) whose processes all run the same loop over the same cases.
class RunBackend {
 public:
  virtual ~RunBackend() = default;
  virtual std::string_view name() const = 0;
  // The process that prints, streams progress and writes results (rank 0).
  virtual bool leader() const = 0;
  // run.world_size: the ranks this run offers, given the largest case's need.
  virtual int world_size(int largest_case) const = 0;
  // Runs one case; collective over the processes of the world. The outcome that counts is the
  // leader's; the others may return anything.
  virtual CaseRun run_case(PlannedCase& planned) = 0;
  // Every process gets the leader's `flags` (the others pass a vector of the same size).
  virtual void share_from_leader(std::vector<std::uint8_t>& flags) = 0;
  // Ends the whole run now (all processes) with `code`: the watchdog's last step after the
  // leader wrote what it could.
  [[noreturn]] virtual void abort_run(int code) = 0;
  // run.versions: {"meshgate", "cuda", "nccl", "mpi"}.
  virtual nlohmann::ordered_json versions() const;
  // Whether run_case stops a case at the case timeout by itself (no watchdog needed).
  virtual bool self_timed() const { return false; }
  // The implementation that computes the observables (each row's "impl"), and run.impls:
  // {NAME: {"version": ..., ...}}.
  virtual std::string impl_name() const { return kDefaultImpl; }
  virtual nlohmann::ordered_json impls() const;
  // Starts what the backend needs before the first case (an external implementation).
  virtual void prepare() {}
};

class ThreadsBackend final : public RunBackend {
 public:
  explicit ThreadsBackend(std::optional<int> ranks_cap) : ranks_cap_(ranks_cap) {}
  std::string_view name() const override { return "threads"; }
  bool leader() const override { return true; }
  int world_size(int largest_case) const override { return ranks_cap_.value_or(largest_case); }
  CaseRun run_case(PlannedCase& planned) override { return execute_case(planned, ranks_cap_); }
  void share_from_leader(std::vector<std::uint8_t>&) override {}
  [[noreturn]] void abort_run(int code) override;

 private:
  std::optional<int> ranks_cap_;
};

// Every case goes to an implementation other than meshgate's library, which starts whatever
// ranks it needs itself; the runner checks what it answers.
class ExternalImplBackend final : public RunBackend {
 public:
  ExternalImplBackend(ExternalImpl& impl, std::filesystem::path scratch,
                      std::optional<int> ranks_cap)
      : impl_(impl), scratch_(std::move(scratch)), ranks_cap_(ranks_cap) {}
  std::string_view name() const override { return "threads"; }
  bool leader() const override { return true; }
  int world_size(int largest_case) const override { return ranks_cap_.value_or(largest_case); }
  CaseRun run_case(PlannedCase& planned) override;
  void share_from_leader(std::vector<std::uint8_t>&) override {}
  [[noreturn]] void abort_run(int code) override;
  // The watchdog is not needed: the client stops an implementation at the case timeout itself.
  bool self_timed() const override { return true; }
  std::string impl_name() const override { return impl_.name(); }
  nlohmann::ordered_json impls() const override;
  void prepare() override { impl_.ensure_started(); }

 private:
  ExternalImpl& impl_;
  std::filesystem::path scratch_;
  std::optional<int> ranks_cap_;
};

// One rank of a process world (mpi, nccl: one process per rank). A case needing n ranks runs on
// a communicator split from `world` over ranks 0..n-1 while the others wait at a barrier; a
// case needing more ranks than the world is a skip. `control` is the same world in host memory
// (the same object for mpi, the MPI world for nccl): the runner's own agreement, barrier and
// broadcasts go there. `skip_reason`, when set, makes every case a skip with that reason (e.g.
// nccl without a GPU).
class ProcessBackend final : public RunBackend {
 public:
  ProcessBackend(std::string name, comm::Communicator& world, comm::Communicator& control,
                 std::function<void(int code)> abort, nlohmann::ordered_json versions,
                 std::optional<std::string> skip_reason = std::nullopt);
  std::string_view name() const override { return name_; }
  bool leader() const override { return world_.rank() == 0; }
  int world_size(int) const override { return world_.size(); }
  CaseRun run_case(PlannedCase& planned) override;
  void share_from_leader(std::vector<std::uint8_t>& flags) override;
  [[noreturn]] void abort_run(int code) override;
  nlohmann::ordered_json versions() const override { return versions_; }

 private:
  std::string name_;
  comm::Communicator& world_;
  comm::Communicator& control_;
  std::function<void(int code)> abort_;
  nlohmann::ordered_json versions_;
  std::optional<std::string> skip_reason_;
};

// A backend that owns the world a ProcessBackend runs on (an MPI session, an NCCL
// communicator) and hands every call to it. A subclass sets `inner_` once its world is up and
// resets it first in its destructor: the ProcessBackend goes before the world it refers to.
class OwningProcessBackend : public RunBackend {
 public:
  std::string_view name() const override { return inner_->name(); }
  bool leader() const override { return inner_->leader(); }
  int world_size(int largest_case) const override { return inner_->world_size(largest_case); }
  CaseRun run_case(PlannedCase& planned) override { return inner_->run_case(planned); }
  void share_from_leader(std::vector<std::uint8_t>& flags) override {
    inner_->share_from_leader(flags);
  }
  [[noreturn]] void abort_run(int code) override { inner_->abort_run(code); }
  nlohmann::ordered_json versions() const override { return inner_->versions(); }

 protected:
  std::unique_ptr<ProcessBackend> inner_;
};

// Why every case of an nccl run on a process without a GPU is a skip.
inline constexpr std::string_view kNcclWithoutDevice =
    "no CUDA device visible to this process: the nccl backend needs one GPU per rank";

// The mpi or nccl backend (process_backend.cpp, built with MPI). Without MPI, nccl runs as one
// rank in this process (make_single_process_nccl_backend) when NCCL was found; otherwise it
// prints why the backend is missing and returns nullptr.
std::unique_ptr<RunBackend> make_process_backend(const RunOptions& options, std::ostream& err);

#ifdef MESHGATE_HAVE_NCCL
// The nccl backend as one rank in this process, with no MPI: a one-rank threads world
// bootstraps NCCL and carries the runner's own agreement and broadcasts, on the GPU of
// LOCAL_RANK-style variables or device 0. Cases skip without a GPU. nullptr, after saying why,
// when --ranks asks for another number of ranks or NCCL cannot start.
std::unique_ptr<RunBackend> make_single_process_nccl_backend(const RunOptions& options,
                                                             std::ostream& err);
#endif

// The backend --backend asks for (threads, or mpi/nccl when this runner was built with them),
// or nullptr after printing why it cannot be used. Process backends initialise MPI here.
std::unique_ptr<RunBackend> make_backend(const RunOptions& options, std::ostream& err);

// meshgate-runner run: returns the exit code (0 all pass/skip, 1 any fail, 2 any error or
// unusable input). On a case timeout the process exits 2 from the watchdog thread.
int run_command(const RunOptions& options, const std::vector<KindEntry>& kinds, std::ostream& out,
                std::ostream& err);
// The same on a backend of the caller's (tests run the process path over a threads world).
int run_command(const RunOptions& options, RunBackend& backend, const std::vector<KindEntry>& kinds,
                std::ostream& out, std::ostream& err);

// meshgate-runner run --impl NAME --impl-command CMD: every case on that implementation.
int run_external(const RunOptions& options, const std::vector<KindEntry>& kinds,
                 std::ostream& out, std::ostream& err);

// What `list --kinds --json` prints: the keys the runner reads on every case, and each kind as
// its KindEntry describes it (name, built_in, impl_protocol, signals, keys), in registry order.
nlohmann::ordered_json describe_kinds(const std::vector<KindEntry>& kinds);

// meshgate-runner list: the selected cases, validated; 0, or 2 on input errors. With --kinds,
// the kinds instead: a table, or describe_kinds() with --json.
int list_command(const ListOptions& options, const std::vector<KindEntry>& kinds, std::ostream& out,
                 std::ostream& err);

}  // namespace meshgate::runner
