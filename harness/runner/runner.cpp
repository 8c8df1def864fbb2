#include "runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>

#include "console.hpp"
#include "core/error.hpp"
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

// Runs `body`, turning what escapes it into the outcome the results CONTRACT asks for.
template <class Body>
Outcome guarded(const PlannedCase& planned, Body&& body) {
  try {
    return body();
  } catch (const meshgate::Error& e) {
    return judge_rejection(planned, e.what());
  } catch (const RankFailure& e) {
    return error_outcome(e.what());
  } catch (const InputError& e) {
    return error_outcome(std::string("bad input found while running: ") + e.what());
  } catch (const std::exception& e) {
    return error_outcome(std::string("the runner's thread (no rank) threw: ") + e.what());
  } catch (...) {
    return error_outcome(
        "the runner's thread (no rank) threw an exception that is not a "
        "std::exception");
  }
}

std::string format_seconds(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", seconds);
  return buffer;
}

void print_input_errors(const std::vector<std::string>& errors, std::ostream& err) {
  for (const std::string& line : errors) err << line << '\n';
  err << errors.size() << (errors.size() == 1 ? " input error" : " input errors")
      << "; nothing was run\n";
  err.flush();
}

// Loading, filtering and validation shared by run and list; errors already printed when empty.
std::optional<std::vector<PlannedCase>> plan_cases(const std::vector<std::string>& paths,
                                                   const CaseFilter& filter,
                                                   const std::vector<KindEntry>& kinds,
                                                   std::ostream& err) {
  if (paths.empty()) {
    err << "no case files given: pass files or directories, e.g. cases/\n";
    return std::nullopt;
  }
  LoadedCases loaded = load_cases(paths);
  const std::size_t loaded_count = loaded.cases.size();
  // The cases that did load are validated too, so one pass shows every mistake of every file.
  PlannedCases planned = prepare_cases(select_cases(filter, std::move(loaded.cases)), kinds);
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

}  // namespace

CaseRun execute_case(PlannedCase& planned, std::optional<int> ranks_cap) {
  CaseRun result;
  const double start = monotonic_seconds();
  PreparedCase& prepared = *planned.prepared;
  try {
    result.params = prepared.params();
  } catch (const std::exception& e) {
    result.outcome = error_outcome(std::string("params() threw: ") + e.what());
    result.seconds = monotonic_seconds() - start;
    return result;
  }
  const int needed = prepared.ranks();
  if (ranks_cap && needed > *ranks_cap) {
    result.outcome.status = Status::skip;
    result.outcome.message = "needs " + std::to_string(needed) + " ranks but the world has " +
                             std::to_string(*ranks_cap) + ": run with --ranks " +
                             std::to_string(needed);
    result.seconds = monotonic_seconds() - start;
    return result;
  }
  ThreadsWorld world(ranks_cap ? *ranks_cap : std::max(needed, 1));

  result.outcome = guarded(planned, [&] {
    Outcome outcome = prepared.run(world);
    if (outcome.rejection) {
      Outcome judged = judge_rejection(planned, *outcome.rejection);
      judged.metrics = std::move(outcome.metrics);
      judged.plan = std::move(outcome.plan);
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

  if (result.outcome.status == Status::pass && planned.perf && !planned.expect_error) {
    std::vector<double> samples;
    const Outcome timed = guarded(planned, [&] {
      samples = measure(prepared, world, *planned.perf);
      return Outcome{};
    });
    if (timed.status != Status::pass) {
      // A rejection while timing is not the case's expectation: it is an error of the run.
      result.outcome.status = Status::error;
      result.outcome.message = "perf measurement failed: " + timed.message;
    } else {
      result.samples["time_s"] = nlohmann::json::array({samples});
      result.outcome.metrics["time_s"] = summarize(samples);
    }
  }
  result.seconds = monotonic_seconds() - start;
  return result;
}

int run_command(const RunOptions& options, const std::vector<KindEntry>& kinds, std::ostream& out,
                std::ostream& err) {
  const double run_start = monotonic_seconds();
  Console console(out, options.progress);
  const auto unusable = [&] {
    console.done(2, count_statuses({}), monotonic_seconds() - run_start);
    return 2;
  };
  if (options.backend != "threads") {
    err << "backend '" << options.backend
        << "' is not available in this runner: only the embedded 'threads' backend is built "
           "in; run with --backend threads\n";
    return unusable();
  }
  if (options.ranks && *options.ranks < 1) {
    err << "--ranks must be at least 1, got " << *options.ranks << '\n';
    return unusable();
  }
  std::optional<std::vector<PlannedCase>> valid =
      plan_cases(options.paths, options.filter, kinds, err);
  if (!valid) return unusable();
  std::vector<PlannedCase>& cases = *valid;

  const std::string run_id = options.run_id.value_or(new_run_id());
  const std::string out_dir = options.out_dir.value_or("reports/" + run_id);
  std::unique_ptr<ResultsWriter> writer;
  try {
    writer = std::make_unique<ResultsWriter>(out_dir, options.resume);
  } catch (const std::exception& e) {
    err << e.what() << '\n';
    return unusable();
  }
  if (writer->dropped_lines() > 0) {
    err << "resume: dropped " << writer->dropped_lines() << " unreadable line(s) of " << out_dir
        << "/results.jsonl\n";
  }

  int world_size = 1;
  for (const PlannedCase& c : cases) world_size = std::max(world_size, c.prepared->ranks());
  if (options.ranks) world_size = *options.ranks;
  const nlohmann::ordered_json run =
      run_info(run_id, utc_timestamp_now(), options.backend, world_size);

  std::vector<std::string> order;
  std::vector<std::size_t> to_run;  // indexes into `cases` not kept from a previous run
  for (std::size_t i = 0; i < cases.size(); ++i) {
    order.push_back(cases[i].spec.id);
    if (!writer->has_row(cases[i].spec.id)) to_run.push_back(i);
  }
  std::vector<std::string> to_run_ids;
  for (std::size_t i : to_run) to_run_ids.push_back(cases[i].spec.id);

  // Everything below that writes results or the console is done under this lock, so that the
  // watchdog's last word and a case finishing at the same moment cannot interleave.
  std::mutex state;
  std::optional<std::size_t> running;  // position in to_run of the case that has not ended
  const auto finish = [&]() {
    const std::vector<Row> rows = writer->ordered_rows(order);
    const nlohmann::json counts = count_statuses(rows);
    const int code = exit_code_for(counts);
    writer->write_final(run, order);
    console.done(code, counts, monotonic_seconds() - run_start);
    return code;
  };

  std::optional<Watchdog> watchdog;
  if (options.case_timeout_s > 0) {
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
      // Rank threads may be blocked forever: nothing may wait for them, not even destructors.
      _exit(2);
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
        // execute_case reports it as the case's error.
      }
      console.start(planned.spec.id, planned.spec.kind, position + 1, to_run.size(), params);
      running = position;
    }
    if (watchdog) watchdog->arm(position);
    CaseRun result = execute_case(planned, options.ranks);
    if (watchdog) watchdog->disarm();
    const std::lock_guard<std::mutex> lock(state);
    running.reset();
    const Row row =
        make_row(planned.spec, result.outcome, result.params, result.samples, result.seconds);
    writer->append(row);
    console.end(row, position + 1, to_run.size());
  }
  watchdog.reset();
  const std::lock_guard<std::mutex> lock(state);
  return finish();
}

int list_command(const ListOptions& options, const std::vector<KindEntry>& kinds, std::ostream& out,
                 std::ostream& err) {
  std::optional<std::vector<PlannedCase>> valid =
      plan_cases(options.paths, options.filter, kinds, err);
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
