#pragma once
// Test-only case kinds for the framework tests: small, deterministic and observable.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "case_kind.hpp"
#include "core/error.hpp"
#include "host_state.hpp"

namespace meshgate::runner::testing {

// kind: probe
//   value: int (required)          the "result" of the op
//   expect: int                    pass when value == expect
//   fail_with: string              run() fails the case with that message (the kind's own failure)
//   ranks: int (default 1)         runs on that many rank threads
//   throw_on_rank: int             that rank throws std::runtime_error("boom on rank N")
//   reject: string                 the op throws meshgate::Error(KeyError, reject)
//   report_reject: string          run() returns Outcome::rejection = report_reject, with a metric
//   backend_error: string          run() throws comm::BackendError (as an mpi rank's call would)
//   integer_avg: bool              every rank calls all_reduce(avg) on int32, which no backend runs
//   sleep_ms: int                  run() sleeps that long
//   iter_s: number                 the seconds of one timed call (time_calls reports calls x iter_s)
//   rank_iter_s: [number]          per rank of a process world (its lead_rank): the seconds of one
//                                  call there, instead of iter_s
//   record_affinity: bool          run() reports the CPUs each rank thread may run on
//   record_state_dir: bool         run() reports its context's state_dir()
//   options: {verbose: bool}       a nested mapping, to test child() validation
//   memory: int                    the memory estimate in bytes (key 'memory'; default 0)
//   invalid: string                parse() rejects the value (ValueRejection on key 'invalid')
//   bad_alloc: bool                run() throws std::bad_alloc on the runner's thread
//   bad_alloc_on_rank: int         that rank throws std::bad_alloc
struct ProbeCounters {
  std::atomic<int> runs{0};
  std::atomic<int> iterations{0};  // time_calls() calls
  std::atomic<std::int64_t> calls{0};  // the calls they timed, all together
  // The batch sizes time_calls() was asked for, in order, per rank (lead_rank) of the context.
  std::mutex mutex;
  std::map<int, std::vector<std::int64_t>> batches;
};

inline ProbeCounters& probe_counters() {
  static ProbeCounters counters;
  return counters;
}

class ProbeCase final : public PreparedCase {
 public:
  int value = 0;
  std::optional<int> expect;
  std::optional<std::string> fail_with;
  int rank_count = 1;
  std::optional<int> throw_on_rank;
  std::optional<std::string> reject;
  std::optional<std::string> report_reject;
  std::optional<std::string> backend_error;
  bool integer_avg = false;
  int sleep_ms = 0;
  double iter_s = 1e-3;
  std::vector<double> rank_iter_s;
  bool record_affinity = false;
  bool record_state_dir = false;
  std::int64_t memory = 0;
  bool bad_alloc = false;
  std::optional<int> bad_alloc_on_rank;

  MemoryEstimate memory_estimate() const override {
    return {static_cast<double>(memory), "memory", "as the probe says"};
  }
  int ranks() const override { return rank_count; }
  nlohmann::json params() const override { return {{"value", value}, {"ranks", rank_count}}; }
  Outcome run(RunContext& ctx) override {
    ++probe_counters().runs;
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    if (reject) throw meshgate::Error(meshgate::ErrorKind::key, *reject);
    if (bad_alloc) throw std::bad_alloc();
    if (backend_error) throw comm::BackendError(ErrorKind::runtime, *backend_error);
    if (report_reject) {
      Outcome rejected;
      rejected.rejection = *report_reject;
      rejected.metrics["kept"] = true;
      return rejected;
    }
    std::atomic<int> ran{0};
    std::atomic<int> sizes_seen{0};
    ctx.run_on_ranks(rank_count, [&](int rank, comm::Communicator& comm) {
      if (throw_on_rank && rank == *throw_on_rank) {
        throw std::runtime_error("boom on rank " + std::to_string(rank));
      }
      if (bad_alloc_on_rank && rank == *bad_alloc_on_rank) throw std::bad_alloc();
      if (integer_avg) {
        std::int32_t one = 1;
        comm.all_reduce(&one, &one, 1, comm::DType::i32, comm::ReduceOp::avg);
      }
      if (comm.rank() == rank && comm.size() == rank_count) ++sizes_seen;
      if (record_affinity) {
        const std::lock_guard<std::mutex> lock(affinity_mutex);
        affinities[std::to_string(rank)] = allowed_cpus();
      }
      ++ran;
    });
    Outcome outcome;
    if (record_affinity) outcome.metrics["affinity"] = affinities;
    if (record_state_dir) outcome.metrics["state_dir"] = ctx.state_dir();
    outcome.metrics["ranks_ran"] = ran.load();
    // Ranks that got a communicator whose rank and size match their place in the case.
    outcome.metrics["comms_matched"] = sizes_seen.load();
    if (fail_with) {
      outcome.status = Status::fail;
      outcome.message = *fail_with;
    } else if (expect && *expect != value) {
      outcome.status = Status::fail;
      outcome.message =
          "expected " + std::to_string(*expect) + "\n  actual: " + std::to_string(value);
    }
    return outcome;
  }
  double time_calls(RunContext& ctx, std::int64_t calls) override {
    ProbeCounters& counters = probe_counters();
    ++counters.iterations;
    counters.calls += calls;
    const int rank = ctx.lead_rank();
    {
      const std::lock_guard<std::mutex> lock(counters.mutex);
      counters.batches[rank].push_back(calls);
    }
    const auto index = static_cast<std::size_t>(rank);
    const double per_call = index < rank_iter_s.size() ? rank_iter_s[index] : iter_s;
    return per_call * static_cast<double>(calls);
  }

 private:
  std::mutex affinity_mutex;
  std::map<std::string, std::vector<int>> affinities;  // by rank
};

inline std::unique_ptr<PreparedCase> parse_probe(CaseNode& node, bool /*expect_error*/) {
  auto probe = std::make_unique<ProbeCase>();
  probe->value = node.required<int>("value");
  probe->expect = node.optional<int>("expect");
  probe->fail_with = node.optional<std::string>("fail_with");
  probe->rank_count = node.optional<int>("ranks").value_or(1);
  if (probe->rank_count < 1) node.fail("ranks", "must be at least 1");
  probe->throw_on_rank = node.optional<int>("throw_on_rank");
  probe->reject = node.optional<std::string>("reject");
  probe->report_reject = node.optional<std::string>("report_reject");
  probe->backend_error = node.optional<std::string>("backend_error");
  probe->integer_avg = node.optional<bool>("integer_avg").value_or(false);
  probe->sleep_ms = node.optional<int>("sleep_ms").value_or(0);
  probe->iter_s = node.optional<double>("iter_s").value_or(1e-3);
  probe->rank_iter_s = node.optional<std::vector<double>>("rank_iter_s").value_or(std::vector<double>{});
  probe->record_affinity = node.optional<bool>("record_affinity").value_or(false);
  probe->record_state_dir = node.optional<bool>("record_state_dir").value_or(false);
  probe->memory = node.optional<std::int64_t>("memory").value_or(0);
  if (const auto invalid = node.optional<std::string>("invalid"))
    reject_value(node, "invalid", *invalid);
  probe->bad_alloc = node.optional<bool>("bad_alloc").value_or(false);
  probe->bad_alloc_on_rank = node.optional<int>("bad_alloc_on_rank");
  if (node.has("options")) {
    CaseNode options = node.child("options");
    options.optional<bool>("verbose");
  }
  return probe;
}

// kind: echo — no keys of its own; passes.
class EchoCase final : public PreparedCase {
 public:
  MemoryEstimate memory_estimate() const override { return {}; }
  nlohmann::json params() const override { return nlohmann::json::object(); }
  Outcome run(RunContext&) override { return {}; }
  double time_calls(RunContext&, std::int64_t) override { return 0; }
};

inline std::unique_ptr<PreparedCase> parse_echo(CaseNode&, bool) {
  return std::make_unique<EchoCase>();
}

inline const std::vector<KindEntry>& test_kinds() {
  static const std::vector<KindEntry> kinds = {
      {"probe",
       &parse_probe,
       {"value", "expect", "fail_with", "ranks", "throw_on_rank", "reject", "report_reject",
        "backend_error", "integer_avg", "sleep_ms", "iter_s", "rank_iter_s", "record_affinity",
        "record_state_dir", "memory", "invalid", "bad_alloc", "bad_alloc_on_rank", "options",
        "options.verbose"}},
      {"echo", &parse_echo}};
  return kinds;
}

}  // namespace meshgate::runner::testing
