// Judging a command case: the form of each rank's result document, and the case's outcome
// merged from every rank's report.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "diagnostics.hpp"
#include "kinds/command/command_case.hpp"

namespace meshgate::runner::command_kind {
namespace {

// The keys of a result document.
const std::vector<std::string>& result_keys() {
  static const std::vector<std::string> keys = {"status", "message", "metrics", "samples",
                                                "signals"};
  return keys;
}

// The problem of a result's metrics, or nullopt when they are numbers the runner does not
// write itself.
std::optional<std::string> metrics_problem(const nlohmann::json& metrics) {
  if (!metrics.is_object()) return "key 'metrics': expected {name: number}";
  for (const auto& [name, value] : metrics.items()) {
    if (!value.is_number()) {
      return "key 'metrics." + name + "': expected a number, got " + value.dump();
    }
    if (name == "time_s") {
      return "key 'metrics.time_s': the runner writes it from samples.time_s; report the "
             "seconds of each timed iteration there";
    }
  }
  return std::nullopt;
}

// The problem of a result's samples, or nullopt when they are time_s alone, seconds each.
std::optional<std::string> samples_problem(const nlohmann::json& samples) {
  if (!samples.is_object()) return "key 'samples': expected {\"time_s\": [seconds, ...]}";
  for (const auto& [name, value] : samples.items()) {
    if (name != "time_s") {
      return "key 'samples." + name +
             "': the only samples are time_s (seconds per timed "
             "iteration)";
    }
    if (!value.is_array()) return "key 'samples.time_s': expected a list of seconds";
    for (const nlohmann::json& t : value) {
      if (!t.is_number() || !std::isfinite(t.get<double>()) || t.get<double>() < 0) {
        return "key 'samples.time_s': expected seconds (numbers >= 0), got " + t.dump();
      }
    }
  }
  return std::nullopt;
}

std::string signal_line(const std::string& name, const nlohmann::json& value) {
  return name + " = " + value.dump();
}

// The rank whose failure stopped the others, as their reports name it ("stopped when rank N
// failed"); -1 when no rank was stopped.
int rank_that_stopped_the_others(const std::vector<nlohmann::json>& reports) {
  static constexpr std::string_view stopped = "stopped when rank ";
  for (const nlohmann::json& report : reports) {
    if (!report.contains("error")) continue;
    const std::string text = report["error"].get<std::string>();
    if (text.rfind(stopped, 0) != 0) continue;
    const int named = std::atoi(text.c_str() + stopped.size());
    if (named >= 0 && static_cast<std::size_t>(named) < reports.size()) return named;
  }
  return -1;
}


std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += (text.empty() ? "" : "\n") + line;
  return text;
}

// What the ranks said, by rank: the errors (the cause first: the message's first line says why
// the case broke, not that rank 0 was stopped because another rank failed), the failures, and
// the result of each rank that has one (null for a rank that has an error).
struct RankMessages {
  std::vector<std::string> errors, failures;
  std::vector<const nlohmann::json*> results;
};

RankMessages collect_messages(const std::vector<nlohmann::json>& reports) {
  RankMessages out;
  out.results.assign(reports.size(), nullptr);
  const int cause = rank_that_stopped_the_others(reports);
  if (cause >= 0 && reports[static_cast<std::size_t>(cause)].contains("error")) {
    out.errors.push_back("rank " + std::to_string(cause) + ": " +
                         reports[static_cast<std::size_t>(cause)]["error"].get<std::string>());
  }
  for (std::size_t r = 0; r < reports.size(); ++r) {
    const std::string prefix = "rank " + std::to_string(r) + ": ";
    if (reports[r].contains("error")) {
      if (static_cast<int>(r) != cause) {
        out.errors.push_back(prefix + reports[r]["error"].get<std::string>());
      }
      continue;
    }
    out.results[r] = &reports[r]["result"];
    const nlohmann::json& result = *out.results[r];
    if (result["status"] == "fail") {
      const std::string message = result.value("message", "");
      out.failures.push_back(prefix + (message.empty() ? "reported fail" : message));
    }
  }
  return out;
}

// Rank 0's metrics and signals, with each signal another rank reports differently added under
// its rank; nothing when rank 0 has no result.
void merge_metrics_and_signals(const std::vector<const nlohmann::json*>& results, Outcome& out) {
  if (results[0] == nullptr) return;
  const nlohmann::json& lead = *results[0];
  out.metrics = lead.value("metrics", nlohmann::json::object());
  const nlohmann::json lead_signals = lead.value("signals", nlohmann::json::object());
  for (const auto& [name, value] : lead_signals.items())
    out.plan.push_back(signal_line(name, value));
  for (std::size_t r = 1; r < results.size(); ++r) {
    if (results[r] == nullptr || !results[r]->contains("signals")) continue;
    for (const auto& [name, value] : (*results[r])["signals"].items()) {
      if (!lead_signals.contains(name) || lead_signals[name] != value) {
        out.plan.push_back("rank " + std::to_string(r) + ": " + signal_line(name, value));
      }
    }
  }
}

// The seconds of each timed iteration, the slowest rank's (a timed iteration ends when its
// slowest rank does), over the ranks that timed; every rank has a result. An error in `out`
// when the ranks timed different numbers of iterations or none timed any.
void merge_samples(const std::vector<const nlohmann::json*>& results, Outcome& out) {
  std::vector<double> slowest;
  std::optional<std::size_t> first_timed;
  for (std::size_t r = 0; r < results.size(); ++r) {
    const nlohmann::json samples =
        results[r]->value("samples", nlohmann::json::object()).value("time_s", nlohmann::json());
    if (!samples.is_array() || samples.empty()) continue;
    if (!first_timed) {
      first_timed = r;
      slowest = samples.get<std::vector<double>>();
      continue;
    }
    if (samples.size() != slowest.size()) {
      out.status = Status::error;
      out.message = "the ranks timed different numbers of iterations: rank " +
                    std::to_string(*first_timed) + " " + std::to_string(slowest.size()) +
                    ", rank " + std::to_string(r) + " " + std::to_string(samples.size());
      return;
    }
    for (std::size_t i = 0; i < slowest.size(); ++i) {
      slowest[i] = std::max(slowest[i], samples[i].get<double>());
    }
  }
  if (!first_timed) {
    out.status = Status::error;
    out.message =
        "a performance case, but no rank reported samples.time_s (the seconds of each "
        "of its timed iterations)";
    return;
  }
  out.measured_time_s = std::move(slowest);
}

}  // namespace

std::optional<std::string> result_problem(const nlohmann::json& doc) {
  if (!doc.is_object()) return "is not a JSON object";
  for (const auto& [key, value] : doc.items()) {
    if (std::find(result_keys().begin(), result_keys().end(), key) == result_keys().end()) {
      return "has the unknown key " + quote_value(key) + did_you_mean(key, result_keys()) +
             " (a result holds status, message, metrics, samples and signals)";
    }
  }
  if (!doc.contains("status")) return "has no status (\"pass\" or \"fail\")";
  const nlohmann::json& status = doc["status"];
  if (!status.is_string() || (status != "pass" && status != "fail")) {
    return "key 'status': expected \"pass\" or \"fail\", got " + status.dump();
  }
  if (doc.contains("message") && !doc["message"].is_string()) {
    return "key 'message': expected a string, got " + doc["message"].dump();
  }
  if (doc.contains("metrics")) {
    if (std::optional<std::string> problem = metrics_problem(doc["metrics"])) return problem;
  }
  if (doc.contains("samples")) {
    if (std::optional<std::string> problem = samples_problem(doc["samples"])) return problem;
  }
  if (doc.contains("signals") && !doc["signals"].is_object()) {
    return "key 'signals': expected {name: value}";
  }
  return std::nullopt;
}

Outcome merge_reports(const std::vector<nlohmann::json>& reports, bool timed) {
  Outcome out;
  RankMessages messages = collect_messages(reports);
  merge_metrics_and_signals(messages.results, out);
  if (!messages.errors.empty()) {
    messages.errors.insert(messages.errors.end(), messages.failures.begin(),
                           messages.failures.end());
    out.status = Status::error;
    out.message = join_lines(messages.errors);
    return out;
  }
  if (!messages.failures.empty()) {
    out.status = Status::fail;
    out.message = join_lines(messages.failures);
    return out;
  }
  if (timed) merge_samples(messages.results, out);
  return out;
}

}  // namespace meshgate::runner::command_kind
