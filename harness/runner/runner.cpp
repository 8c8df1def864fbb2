#include "runner.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "byte_size.hpp"
#include "comm/communicator.hpp"
#include "console.hpp"
#include "core/error.hpp"
#include "diagnostics.hpp"
#include "host_state.hpp"
#include "provenance.hpp"
#include "results_writer.hpp"
#include "timing.hpp"
#include "watchdog.hpp"
#include "world.hpp"

namespace meshgate::runner {

namespace {

Outcome error_outcome(std::string message) {
  Outcome outcome;
  outcome.status = Status::error;
  outcome.message = std::move(message);
  return outcome;
}

// A rejection by the library: what the case expects (expect_error) or a wrong answer.
Outcome judge_rejection(const PlannedCase& planned, std::string_view message) {
  Outcome outcome;
  // Recorded whatever the verdict, so that two implementations can be compared on what raised.
  outcome.metrics["rejected"] = std::string(message);
  if (!planned.expect_error) {
    outcome.status = Status::fail;
    outcome.message = "rejected: " + std::string(message);
  } else if (planned.expected_message.empty() ||
             message.find(planned.expected_message) != std::string_view::npos) {
    outcome.status = Status::pass;
  } else {
    outcome.status = Status::fail;
    outcome.message = "expected a rejection containing '" + planned.expected_message +
                      "'\n  actual: " + std::string(message);
  }
  return outcome;
}

// The last resort when the memory estimate let a case through that this machine cannot hold.
Outcome out_of_memory_outcome(const PlannedCase& planned, const std::exception& e) {
  return error_outcome("case '" + planned.spec.id + "' ran out of host memory (" + e.what() +
                       ") in the runner's thread; its estimate was " +
                       format_byte_size(planned.prepared->memory_estimate().bytes) +
                       ": lower memory_limit or --memory-limit below what this machine holds");
}

// Runs `body`, turning what escapes it into the outcome the results CONTRACT asks for.
template <class Body>
Outcome guarded(const PlannedCase& planned, Body&& body) {
  try {
    return body();
  } catch (const comm::BackendError& e) {
    // The backend could not carry out a call (mpi and nccl ranks run in this thread): the case
    // could not run, whatever it expects of the code under test.
    return error_outcome(e.what());
  } catch (const meshgate::Error& e) {
    return judge_rejection(planned, e.what());
  } catch (const RankFailure& e) {
    return error_outcome(e.what());
  } catch (const InputError& e) {
    return error_outcome(std::string("bad input found while running: ") + e.what());
  } catch (const std::bad_alloc& e) {
    return out_of_memory_outcome(planned, e);
  } catch (const std::length_error& e) {
    return out_of_memory_outcome(planned, e);
  } catch (const std::exception& e) {
    return error_outcome(std::string("the runner's thread (no rank) threw: ") + e.what());
  } catch (...) {
    return error_outcome(
        "the runner's thread (no rank) threw an exception that is not a "
        "std::exception");
  }
}

Outcome skip_outcome(int needed, int world) {
  Outcome outcome;
  outcome.status = Status::skip;
  outcome.message = "needs " + std::to_string(needed) + " ranks but the world has " +
                    std::to_string(world) + ": run with --ranks " + std::to_string(needed);
  return outcome;
}

std::string format_seconds(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", seconds);
  return buffer;
}

void print_input_errors(const std::vector<std::string>& errors, std::ostream& err) {
  for (const std::string& line : errors) err << message_text(line) << '\n';
  err << errors.size() << (errors.size() == 1 ? " input error" : " input errors")
      << "; nothing was run\n";
  err.flush();
}

// Loading, filtering and validation shared by run and list; errors already printed when empty.
std::optional<std::vector<PlannedCase>> plan_cases(const std::vector<std::string>& paths,
                                                   const CaseFilter& filter,
                                                   const ValidationOptions& validation,
                                                   const std::vector<KindEntry>& kinds,
                                                   std::ostream& err) {
  if (paths.empty()) {
    err << "no case files given: pass files or directories, e.g. cases/\n";
    return std::nullopt;
  }
  LoadedCases loaded = load_cases(paths);
  const std::size_t loaded_count = loaded.cases.size();
  // The cases that did load are validated too, so one pass shows every mistake of every file.
  PlannedCases planned =
      prepare_cases(select_cases(filter, std::move(loaded.cases)), kinds, validation);
  std::vector<std::string> errors = std::move(loaded.errors);
  errors.insert(errors.end(), planned.errors.begin(), planned.errors.end());
  if (!errors.empty()) {
    print_input_errors(errors, err);
    return std::nullopt;
  }
  if (planned.cases.empty()) {
    err << "no case selected: the filters (--suite/--tag/--case) match none of the " << loaded_count
        << " loaded cases\n";
    return std::nullopt;
  }
  return std::move(planned.cases);
}

// The skip row of a case that needs more ranks than `ranks_cap` (--ranks) allows.
std::optional<CaseRun> skip_over_cap(PlannedCase& planned, std::optional<int> ranks_cap) {
  const int needed = planned.prepared->ranks();
  if (!ranks_cap || needed <= *ranks_cap) return std::nullopt;
  CaseRun result;
  try {
    result.params = planned.prepared->params();
  } catch (const std::exception&) {
    // A skipped case's row still names it; its parameters are in the case file.
  }
  result.outcome = skip_outcome(needed, *ranks_cap);
  return result;
}

}  // namespace

#ifndef MESHGATE_HAVE_MPI
std::unique_ptr<RunBackend> make_process_backend(const RunOptions& options, std::ostream& err) {
#ifdef MESHGATE_HAVE_NCCL
  if (options.backend == "nccl") return make_single_process_nccl_backend(options, err);
#endif
  err << "backend '" << options.backend
      << "' is not available in this runner: it was built without MPI (install libopenmpi-dev "
         "with ci/bootstrap and reconfigure), so only the embedded 'threads' backend is built "
         "in; run with --backend threads\n";
  return nullptr;
}
#endif

CaseRun execute_case(PlannedCase& planned, std::optional<int> ranks_cap) {
  if (std::optional<CaseRun> skipped = skip_over_cap(planned, ranks_cap)) return *skipped;
  const int needed = planned.prepared->ranks();
  ThreadsContext ctx(ranks_cap ? *ranks_cap : std::max(needed, 1), planned.perf,
                     planned.case_timeout_s);
  return execute_in(planned, ctx);
}

CaseRun execute_in(PlannedCase& planned, RunContext& ctx,
                   const std::function<bool(bool passed)>& agree) {
  ctx.set_state_dir(planned.state_dir);
  CaseRun result;
  const double start = monotonic_seconds();
  PreparedCase& prepared = *planned.prepared;
  try {
    result.params = prepared.params();
  } catch (const std::exception& e) {
    result.outcome = error_outcome(std::string("params() threw: ") + e.what());
    if (agree) agree(false);
    result.seconds = monotonic_seconds() - start;
    return result;
  }

  result.outcome = guarded(planned, [&] {
    Outcome outcome = prepared.run(ctx);
    if (outcome.rejection) {
      Outcome judged = judge_rejection(planned, *outcome.rejection);
      outcome.metrics["rejected"] = judged.metrics["rejected"];
      judged.metrics = std::move(outcome.metrics);
      judged.plan = std::move(outcome.plan);
      judged.console_detail = std::move(outcome.console_detail);
      return judged;
    }
    // A kind's own fail (e.g. a check beside the op) keeps its message.
    if (planned.expect_error && outcome.status == Status::pass) {
      outcome.status = Status::fail;
      outcome.message = "expected the op to be rejected but it succeeded";
      if (!planned.expected_message.empty()) {
        outcome.message += " (expected an error containing '" + planned.expected_message + "')";
      }
    }
    return outcome;
  });
  bool passed = result.outcome.status == Status::pass;
  if (agree && !agree(passed) && passed) {
    // Kinds reduce their checks over the ranks, so this means a rank went its own way.
    result.outcome = error_outcome(
        "this rank passed but another rank of the case did not; the ranks disagree on the "
        "outcome");
    passed = false;
  }

  if (passed && planned.perf && !planned.expect_error) {
    TimedSamples samples;
    // How many calls a sample covers, when known (a program timing itself does not say).
    std::optional<std::int64_t> calls_per_sample;
    // A kind that timed its work inside run() hands over those samples instead.
    const Outcome timed = guarded(planned, [&] {
      if (result.outcome.measured_time_s) {
        samples.per_call_s = *result.outcome.measured_time_s;
        calls_per_sample = result.outcome.measured_calls_per_sample;
        if (samples.per_call_s.empty()) {
          throw std::logic_error("the kind measured no timed iteration");
        }
      } else {
        samples = measure(prepared, ctx, *planned.perf);
        calls_per_sample = samples.calls_per_sample;
      }
      return Outcome{};
    });
    if (timed.status != Status::pass) {
      // A rejection while timing is not the case's expectation: it is an error of the run.
      result.outcome.status = Status::error;
      result.outcome.message = "perf measurement failed: " + timed.message;
    } else {
      result.samples["time_s"] = nlohmann::json::array({samples.per_call_s});
      nlohmann::json& time_s = result.outcome.metrics["time_s"];
      time_s = summarize(samples.per_call_s);
      if (calls_per_sample) time_s["calls_per_sample"] = *calls_per_sample;
    }
  }
  try {
    prepared.release();
  } catch (const std::exception&) {
    // Freeing cannot change the outcome; a device that fails here fails the next case loudly.
  }
  result.seconds = monotonic_seconds() - start;
  return result;
}

nlohmann::ordered_json RunBackend::versions() const {
  return versions_info();
}

nlohmann::ordered_json RunBackend::impls() const {
  return {{kDefaultImpl, {{"version", versions_info().value("meshgate", nlohmann::json())}}}};
}

CaseRun execute_external(PlannedCase& planned, ExternalImpl& impl,
                         const std::filesystem::path& scratch) {
  CaseRun result;
  const double start = monotonic_seconds();
  const auto finish = [&](Outcome outcome) {
    result.outcome = std::move(outcome);
    result.seconds = monotonic_seconds() - start;
    return result;
  };
  const auto skip = [&](std::string why) {
    Outcome outcome;
    outcome.status = Status::skip;
    outcome.message = impl.name() + ": " + std::move(why);
    return finish(std::move(outcome));
  };
  PreparedCase& prepared = *planned.prepared;
  try {
    result.params = prepared.params();
  } catch (const std::exception& e) {
    return finish(error_outcome(std::string("params() threw: ") + e.what()));
  }
  try {
    impl.ensure_started();
  } catch (const ImplFailure& e) {
    return finish(error_outcome(e.what()));
  }
  if (!impl.implements(planned.spec.kind)) {
    return skip("does not implement the " + planned.spec.kind + " kind");
  }
  static int serial = 0;
  const ScratchDir dir(scratch, std::to_string(++serial));
  std::string why;
  std::optional<nlohmann::json> request;
  Outcome prepared_outcome = guarded(planned, [&] {
    try {
      request = prepared.impl_request(dir.path(), why);
    } catch (const meshgate::Error& e) {
      // Not the implementation's answer: it never saw the case.
      why = std::string("meshgate rejects the case while preparing its request, so it never "
                        "reaches the implementation: ") + e.what();
    }
    return Outcome{};
  });
  if (prepared_outcome.status != Status::pass) return finish(std::move(prepared_outcome));
  if (!request) return skip(why);

  const bool timed = planned.perf && !planned.expect_error;
  const nlohmann::json perf =
      timed ? nlohmann::json{{"warmup", planned.perf->warmup}, {"iters", planned.perf->iters}}
            : nlohmann::json();
  ImplAnswer answer;
  try {
    answer = impl.run_case(planned.spec.id, planned.spec.kind, *request, perf, dir.path());
  } catch (const ImplFailure& e) {
    return finish(error_outcome(e.what()));
  }
  switch (answer.status) {
    case ImplAnswer::Status::unsupported:
      return skip(answer.reason);
    case ImplAnswer::Status::error:
      return finish(error_outcome("implementation '" + impl.name() +
                                  "' failed on the case: " + answer.reason));
    case ImplAnswer::Status::rejected:
      return finish(judge_rejection(
          planned, answer.error.empty() ? answer.reason : answer.error + ": " + answer.reason));
    case ImplAnswer::Status::ok:
      break;
  }
  Outcome outcome = guarded(planned, [&] {
    try {
      return prepared.check_observables(answer.observables, dir.path());
    } catch (const ImplFailure& e) {
      return error_outcome("implementation '" + impl.name() + "' " + e.what());
    }
  });
  // Every row of the case declined one by one (docs/impl-protocol.md, "Rows an implementation
  // does not run"): a skip, named like a case the implementation declines as a whole.
  if (outcome.status == Status::skip) outcome.message = impl.name() + ": " + outcome.message;
  if (planned.expect_error && outcome.status == Status::pass) {
    outcome.status = Status::fail;
    outcome.message = "expected the op to be rejected but " + impl.name() + " computed it";
    if (!planned.expected_message.empty()) {
      outcome.message += " (expected an error containing '" + planned.expected_message + "')";
    }
  }
  if (outcome.status == Status::pass && timed) {
    result.samples["time_s"] = nlohmann::json::array({answer.time_s});
    outcome.metrics["time_s"] = summarize(answer.time_s);
  }
  try {
    prepared.release();
  } catch (const std::exception&) {
    // Nothing of the case's verdict depends on freeing.
  }
  return finish(std::move(outcome));
}

CaseRun ExternalImplBackend::run_case(PlannedCase& planned) {
  if (std::optional<CaseRun> skipped = skip_over_cap(planned, ranks_cap_)) return *skipped;
  return execute_external(planned, impl_, scratch_);
}

void ExternalImplBackend::abort_run(int code) {
  impl_.stop();
  _exit(code);
}

nlohmann::ordered_json ExternalImplBackend::impls() const {
  return {{impl_.name(), nlohmann::ordered_json(impl_.header_entry())}};
}

void ThreadsBackend::abort_run(int code) {
  // Rank threads may be blocked forever: nothing may wait for them, not even destructors.
  _exit(code);
}

ProcessBackend::ProcessBackend(std::string name, comm::Communicator& world,
                               comm::Communicator& control, std::function<void(int code)> abort,
                               nlohmann::ordered_json versions,
                               std::optional<std::string> skip_reason)
    : name_(std::move(name)),
      world_(world),
      control_(control),
      abort_(std::move(abort)),
      versions_(std::move(versions)),
      skip_reason_(std::move(skip_reason)) {}

CaseRun ProcessBackend::run_case(PlannedCase& planned) {
  const int needed = std::max(planned.prepared->ranks(), 1);
  if (skip_reason_ || needed > world_.size()) {
    CaseRun result;
    try {
      result.params = planned.prepared->params();
    } catch (const std::exception&) {
      // A skipped case's row still names it; its parameters are in the case file.
    }
    if (skip_reason_) {
      result.outcome.status = Status::skip;
      result.outcome.message = *skip_reason_;
    } else {
      result.outcome = skip_outcome(needed, world_.size());
    }
    return result;
  }
  std::vector<int> group;
  for (int r = 0; r < needed; ++r) group.push_back(r);
  CaseRun result;
  {
    const std::unique_ptr<comm::Communicator> case_comm = world_.split({group});
    // With a separate host world (nccl), the runner's agreement runs on its split.
    std::unique_ptr<comm::Communicator> case_control;
    if (&control_ != &world_) case_control = control_.split({group});
    if (case_comm) {
      comm::Communicator& control = case_control ? *case_control : *case_comm;
      ProcessContext ctx(name_, *case_comm, control, world_.size(), planned.perf,
                         planned.case_timeout_s);
      result =
          execute_in(planned, ctx, [&](bool passed) { return all_ranks_agree(control, passed); });
    }
  }
  // The ranks outside the case wait here, so that every process starts the next case together.
  control_.barrier();
  return result;
}

void ProcessBackend::share_from_leader(std::vector<std::uint8_t>& flags) {
  if (!flags.empty()) {
    control_.broadcast(flags.data(), flags.data(), flags.size(), comm::DType::u8, 0);
  }
}

void ProcessBackend::abort_run(int code) {
  if (abort_) abort_(code);
  _exit(code);
}

std::unique_ptr<RunBackend> make_backend(const RunOptions& options, std::ostream& err) {
  if (options.backend == "threads") return std::make_unique<ThreadsBackend>(options.ranks);
  if (options.backend == "mpi" || options.backend == "nccl") {
    return make_process_backend(options, err);
  }
  err << "unknown backend '" << options.backend << "': use threads, mpi or nccl\n";
  return nullptr;
}

int run_command(const RunOptions& options, const std::vector<KindEntry>& kinds, std::ostream& out,
                std::ostream& err) {
  if (options.ranks && *options.ranks < 1) {
    err << "--ranks must be at least 1, got " << *options.ranks << '\n';
    Console(out, options.progress).done(2, count_statuses({}), 0);
    return 2;
  }
  if (options.impl && *options.impl != kDefaultImpl) return run_external(options, kinds, out, err);
  std::unique_ptr<RunBackend> backend = make_backend(options, err);
  if (!backend) {
    Console(out, options.progress).done(2, count_statuses({}), 0);
    return 2;
  }
  return run_command(options, *backend, kinds, out, err);
}

int run_external(const RunOptions& given, const std::vector<KindEntry>& kinds, std::ostream& out,
                 std::ostream& err) {
  const auto usage = [&](const std::string& message) {
    err << message << '\n';
    Console(out, given.progress).done(2, count_statuses({}), 0);
    return 2;
  };
  if (given.backend != "threads") {
    return usage("--impl " + *given.impl + " runs on --backend threads: the implementation starts "
                 "the ranks it needs itself");
  }
  if (given.impl_command.empty()) {
    return usage("--impl " + *given.impl + " needs --impl-command: the command that starts it "
                 "(the meshgate driver knows the command of --impl torch)");
  }
  RunOptions options = given;
  options.run_id = given.run_id.value_or(new_run_id());
  options.out_dir = given.out_dir.value_or("reports/" + *options.run_id);
  std::string scratch_template =
      (std::filesystem::temp_directory_path() / "meshgate-impl-XXXXXX").string();
  if (::mkdtemp(scratch_template.data()) == nullptr) {
    return usage("cannot create a scratch folder under " +
                 std::filesystem::temp_directory_path().string());
  }
  const std::filesystem::path scratch = scratch_template;
  int code = 2;
  {
    ExternalImpl impl(*options.impl, options.impl_command,
                      std::filesystem::path(*options.out_dir) / ("impl-" + *options.impl + ".stderr"),
                      options.case_timeout_s);
    ExternalImplBackend backend(impl, scratch, options.ranks);
    code = run_command(options, backend, kinds, out, err);
    impl.stop();
  }
  std::error_code ignored;
  std::filesystem::remove_all(scratch, ignored);
  return code;
}

int run_command(const RunOptions& options, RunBackend& backend, const std::vector<KindEntry>& kinds,
                std::ostream& leader_out, std::ostream& leader_err) {
  const double run_start = monotonic_seconds();
  // Only the leader prints and writes; the other ranks of a process world run silently.
  std::ostream silent(nullptr);
  const bool leader = backend.leader();
  std::ostream& out = leader ? leader_out : silent;
  std::ostream& err = leader ? leader_err : silent;
  Console console(out, options.progress);
  const auto unusable = [&] {
    console.done(2, count_statuses({}), monotonic_seconds() - run_start);
    return 2;
  };
  std::optional<std::vector<PlannedCase>> valid =
      plan_cases(options.paths, options.filter, options.validation, kinds, err);
  if (!valid) return unusable();
  std::vector<PlannedCase>& cases = *valid;
  for (PlannedCase& planned : cases) {
    planned.case_timeout_s = options.case_timeout_s;
    if (planned.perf && !planned.perf->min_sample_time_s) {
      planned.perf->min_sample_time_s = options.min_sample_time_s;
    }
  }
  // Before any rank thread, isolated case or implementation starts: they inherit it.
  std::optional<CpuPinning> pinning;
  if (options.cpus) {
    try {
      pinning.emplace(*options.cpus);
    } catch (const std::runtime_error& e) {
      if (leader) {
        err << e.what() << '\n';
        return unusable();
      }
      // The leader would wait for this process in the first collective: end the whole world.
      leader_err << e.what() << '\n';
      backend.abort_run(2);
    }
  }
  // Read before the first case loads the machine: the load of everything else on it.
  const nlohmann::ordered_json host = host_state(pinning.has_value());

  const std::string run_id = options.run_id.value_or(new_run_id());
  const std::string out_dir = options.out_dir.value_or("reports/" + run_id);
  for (PlannedCase& planned : cases)
    planned.state_dir = (std::filesystem::path(out_dir) / "case-state").string();
  std::unique_ptr<ResultsWriter> writer;
  // 1 = run the case, 0 = kept from a previous run; the leader decides (it owns the files).
  std::vector<std::uint8_t> run_flags(cases.size() + 1, 1);
  if (leader) {
    try {
      writer = std::make_unique<ResultsWriter>(out_dir, options.resume);
    } catch (const std::exception& e) {
      err << e.what() << '\n';
      run_flags.back() = 0;
    }
    if (writer && writer->dropped_lines() > 0) {
      err << "resume: dropped " << writer->dropped_lines() << " unreadable line(s) of " << out_dir
          << "/results.jsonl\n";
    }
    for (std::size_t i = 0; writer && i < cases.size(); ++i) {
      run_flags[i] = writer->has_row(cases[i].spec.id) ? 0 : 1;
    }
  }
  backend.share_from_leader(run_flags);
  if (run_flags.back() == 0) return unusable();

  int largest = 1;
  for (const PlannedCase& c : cases) largest = std::max(largest, c.prepared->ranks());
  nlohmann::ordered_json run =
      run_info(run_id, utc_timestamp_now(), std::string(backend.name()),
               backend.world_size(largest), backend.versions());
  for (const auto& [key, value] : host.items()) run[key] = value;
  // The implementation starts here, before any case, so that the header holds its version.
  if (backend.self_timed()) {
    try {
      backend.prepare();
    } catch (const std::exception& e) {
      err << e.what() << '\n';
    }
  }
  run["impls"] = backend.impls();
  // The kinds this runner knows: a reader of the results checks every row's kind against them,
  // so a kind registered by another project is as checkable as a built-in one.
  run["kinds"] = nlohmann::ordered_json::array();
  for (const KindEntry& kind : kinds) run["kinds"].push_back(kind.name);

  std::vector<std::string> order;
  std::vector<std::size_t> to_run;  // indexes into `cases` not kept from a previous run
  for (std::size_t i = 0; i < cases.size(); ++i) {
    order.push_back(cases[i].spec.id);
    if (run_flags[i]) to_run.push_back(i);
  }
  std::vector<std::string> to_run_ids;
  for (std::size_t i : to_run) to_run_ids.push_back(cases[i].spec.id);

  // Everything below that writes results or the console is done under this lock, so that the
  // watchdog's last word and a case finishing at the same moment cannot interleave.
  std::mutex state;
  std::optional<std::size_t> running;  // position in to_run of the case that has not ended
  const auto finish = [&]() {
    if (!writer) return 0;
    const std::vector<Row> rows = writer->ordered_rows(order);
    const nlohmann::json counts = count_statuses(rows);
    const int code = exit_code_for(counts);
    writer->write_final(run, order);
    console.done(code, counts, monotonic_seconds() - run_start);
    return code;
  };

  // The leader's watchdog speaks for the world: it writes the error row, then ends every
  // process (a rank stuck in a collective cannot be cancelled).
  std::optional<Watchdog> watchdog;
  if (options.case_timeout_s > 0 && leader && !backend.self_timed()) {
    watchdog.emplace(options.case_timeout_s, [&](std::size_t position) {
      const std::lock_guard<std::mutex> lock(state);
      if (running != position) return;  // it finished while the deadline passed
      PlannedCase& timed_out = cases[to_run[position]];
      Outcome outcome = error_outcome("timed out after " + format_seconds(options.case_timeout_s) +
                                      " s (--case-timeout); the runner stopped here");
      nlohmann::json params = nlohmann::json::object();
      try {
        params = timed_out.prepared->params();
      } catch (const std::exception&) {
        // The row is still written; its parameters are in the case file.
      }
      const Row row = make_row(timed_out.spec, outcome, params, nlohmann::json::object(),
                               options.case_timeout_s);
      writer->append(row);
      console.end(row, position + 1, to_run.size());
      finish();
      out.flush();
      err.flush();
      std::fflush(nullptr);
      backend.abort_run(2);
    });
  }

  {
    const std::lock_guard<std::mutex> lock(state);
    console.plan(to_run_ids);
  }
  for (std::size_t position = 0; position < to_run.size(); ++position) {
    PlannedCase& planned = cases[to_run[position]];
    {
      const std::lock_guard<std::mutex> lock(state);
      nlohmann::json params = nlohmann::json::object();
      try {
        params = planned.prepared->params();
      } catch (const std::exception&) {
        // execute_in reports it as the case's error.
      }
      console.start(planned.spec.id, planned.spec.kind, position + 1, to_run.size(), params);
      running = position;
    }
    if (watchdog) watchdog->arm(position);
    CaseRun result = backend.run_case(planned);
    if (watchdog) watchdog->disarm();
    const std::lock_guard<std::mutex> lock(state);
    running.reset();
    if (!leader) continue;
    const Row row =
        make_row(planned.spec, result.outcome, result.params, result.samples, result.seconds,
                 backend.impl_name());
    writer->append(row);
    console.end(row, position + 1, to_run.size(), result.outcome.console_detail);
  }
  watchdog.reset();
  const std::lock_guard<std::mutex> lock(state);
  return finish();
}

nlohmann::ordered_json describe_kinds(const std::vector<KindEntry>& kinds) {
  nlohmann::ordered_json described = nlohmann::ordered_json::array();
  for (const KindEntry& kind : kinds) {
    described.push_back({{"name", kind.name},
                         {"built_in", kind.built_in},
                         {"impl_protocol", kind.impl_protocol},
                         {"signals", kind.signals},
                         {"keys", kind.keys}});
  }
  return {{"common_keys", common_case_keys()}, {"kinds", std::move(described)}};
}

namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text.empty() ? "-" : text;
}

// One line per kind: its name, where it comes from, whether --impl can run it, its signals.
void print_kinds(const std::vector<KindEntry>& kinds, std::ostream& out) {
  std::size_t width = 4;
  for (const KindEntry& kind : kinds) width = std::max(width, kind.name.size());
  const auto pad = [width](std::string_view text) {
    return std::string(text) + std::string(width - text.size() + 2, ' ');
  };
  out << pad("kind") << "origin      --impl  signals\n";
  for (const KindEntry& kind : kinds) {
    out << pad(kind.name) << (kind.built_in ? "built-in    " : "registered  ")
        << (kind.impl_protocol ? "yes     " : "no      ") << joined(kind.signals) << '\n';
  }
}

}  // namespace

int list_command(const ListOptions& options, const std::vector<KindEntry>& kinds, std::ostream& out,
                 std::ostream& err) {
  if (options.kinds) {
    if (options.json) {
      out << describe_kinds(kinds).dump(2) << '\n';
    } else {
      print_kinds(kinds, out);
    }
    return 0;
  }
  std::optional<std::vector<PlannedCase>> valid =
      plan_cases(options.paths, options.filter, options.validation, kinds, err);
  if (!valid) return 2;
  if (options.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const PlannedCase& c : *valid) {
      nlohmann::json perf = nullptr;
      if (c.perf) {
        perf = {{"warmup", c.perf->warmup}, {"iters", c.perf->iters}, {"runs", c.perf->runs}};
      }
      list.push_back({{"id", c.spec.id},
                      {"suite", c.spec.suite},
                      {"name", c.spec.name},
                      {"kind", c.spec.kind},
                      {"tags", c.spec.tags},
                      {"file", c.spec.file},
                      {"line", c.spec.mark.line + 1},
                      {"perf", perf}});
    }
    out << list.dump(2) << '\n';
    return 0;
  }
  std::size_t id_width = 0, kind_width = 0;
  for (const PlannedCase& c : *valid) {
    id_width = std::max(id_width, c.spec.id.size());
    kind_width = std::max(kind_width, c.spec.kind.size());
  }
  for (const PlannedCase& c : *valid) {
    std::string tags;
    for (const std::string& tag : c.spec.tags) tags += (tags.empty() ? "" : ",") + tag;
    std::string line = c.spec.id + std::string(id_width - c.spec.id.size() + 2, ' ') + c.spec.kind;
    if (!tags.empty()) line += std::string(kind_width - c.spec.kind.size() + 2, ' ') + tags;
    out << line << '\n';
  }
  return 0;
}

}  // namespace meshgate::runner
