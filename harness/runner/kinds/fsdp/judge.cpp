// Judging another implementation's fsdp answer: its parameters against the single-process
// reference, and the collectives of each step against `expect`.

#include "kinds/fsdp/fsdp_case.hpp"

namespace meshgate::runner::fsdp_kind {

Outcome FsdpCase::check_observables(const nlohmann::json& observables,
                                    const std::filesystem::path& dir) {
  if (!observables.is_object()) throw ImplFailure("answered observables that are not an object");
  for (const char* key : {"params", "reference", "steps"}) {
    if (!observables.contains(key) || !observables[key].is_object()) {
      throw ImplFailure(std::string("answered no '") + key + "' object");
    }
  }
  std::vector<std::string> problems;
  std::vector<std::vector<StepComms>> rank_steps;
  const ParameterCheck p = check_parameters(observables, dir, rank_steps, problems);

  Outcome o;
  // Every rank of an SPMD program issues the same collectives; a rank that issues others
  // would hang a real job.
  std::int64_t ranks_other_comms = 0;
  for (std::size_t r = 1; r < rank_steps.size(); ++r) {
    if (rank_steps[r] != rank_steps[0]) ++ranks_other_comms;
  }
  judge_steps(rank_steps, o, problems);
  if (ranks_other_comms) {
    problems.push_back(std::to_string(ranks_other_comms) +
                       " rank(s) issued other collectives than rank 0");
  }
  if (p.wrong) {
    char text[256];  // the longest message (two 19-digit counts) needs 166
    std::snprintf(text, sizeof text,
                  "%lld of %lld parameter elements differ from the single-process reference "
                  "by more than %g (largest relative error %.3g)",
                  static_cast<long long>(p.wrong), static_cast<long long>(p.elements), tolerance,
                  p.max_error);
    problems.push_back(text);
  }
  if (p.ranks_differing) {
    problems.push_back(std::to_string(p.ranks_differing) +
                       " rank(s) gathered other parameters than rank 0 (full_tensor)");
  }
  std::int64_t collectives = 0, moved = 0;
  for (const auto& step : rank_steps[0]) {
    for (const auto& [op, n] : total(step, false)) collectives += n;
    for (const auto& [op, n] : total(step, true)) moved += n;
  }
  o.metrics["collectives"] = collectives;
  o.metrics["bytes_per_rank"] = moved;
  o.metrics["parameter_elements"] = p.elements;
  o.metrics["wrong_elements"] = p.wrong;
  o.metrics["max_relative_error"] = std::isfinite(p.max_error) ? nlohmann::json(p.max_error)
                                                               : nlohmann::json("inf");
  o.metrics["tolerance"] = tolerance;
  if (!problems.empty()) {
    o.status = Status::fail;
    for (std::size_t i = 0; i < problems.size(); ++i) o.message += (i ? "; " : "") + problems[i];
  }
  return o;
}

// Every rank's parameters against the reference: rank 0's element by element within the
// tolerance, the others' bitwise against rank 0's; every rank's steps read on the way.
ParameterCheck FsdpCase::check_parameters(const nlohmann::json& observables,
                                          const std::filesystem::path& dir,
                                          std::vector<std::vector<StepComms>>& rank_steps,
                                          std::vector<std::string>& problems) const {
  const Parameters reference = read_parameters(observables["reference"], dir, "reference");
  ParameterCheck p;
  std::int64_t& wrong = p.wrong;
  std::int64_t& elements = p.elements;
  std::int64_t& ranks_differing = p.ranks_differing;
  double& max_error = p.max_error;
  std::optional<Parameters> lowest;
  std::set<std::string> reference_names;
  for (const auto& [name, shape] : reference.shapes) reference_names.insert(name);
  for (int rank = 0; rank < ranks(); ++rank) {
    const std::string key = std::to_string(rank);
    if (!observables["params"].contains(key)) {
      throw ImplFailure("answered no parameters for rank " + key + " (params." + key + ")");
    }
    if (!observables["steps"].contains(key)) {
      throw ImplFailure("answered no steps for rank " + key + " (steps." + key + ")");
    }
    rank_steps.push_back(read_steps(observables["steps"][key], key, steps));
    Parameters got = read_parameters(observables["params"][key], dir, "params." + key);
    std::set<std::string> names;
    for (const auto& [name, shape] : got.shapes) names.insert(name);
    if (names != reference_names) {
      problems.push_back("rank " + key + " holds the parameters [" + names_text(names) +
                         "], the reference [" + names_text(reference_names) + "]");
      continue;
    }
    if (got.dtype != reference.dtype) {
      problems.push_back("rank " + key + "'s parameters are " + got.dtype + ", the reference's " +
                         reference.dtype);
      continue;
    }
    if (rank == 0) {
      for (const auto& [name, want] : reference.values) {
        if (got.shapes[name] != reference.shapes.at(name)) {
          problems.push_back("parameter " + name + " has the shape " +
                             shape_text(got.shapes[name]) + ", the reference's is " +
                             shape_text(reference.shapes.at(name)));
          continue;
        }
        const std::vector<double>& have = got.values[name];
        for (std::size_t i = 0; i < want.size(); ++i) {
          ++elements;
          const double error = std::abs(have[i] - want[i]) / std::max(1.0, std::abs(want[i]));
          if (std::isnan(have[i]) || std::isnan(want[i]) || !(error <= tolerance)) {
            ++wrong;
            if (!std::isnan(error)) max_error = std::max(max_error, error);
            else max_error = std::numeric_limits<double>::infinity();
          } else {
            max_error = std::max(max_error, error);
          }
        }
      }
      lowest = std::move(got);
    } else if (lowest && got.bits != lowest->bits) {
      // full_tensor() gathers the same shards on every rank: any difference is a wrong gather.
      ++ranks_differing;
    }
  }

  return p;
}

// Rank 0's collectives of every step against expect.comms_per_step and the phases' expect:
// the plan lines, the per-step metrics and the problems.
void FsdpCase::judge_steps(const std::vector<std::vector<StepComms>>& rank_steps, Outcome& o,
                           std::vector<std::string>& problems) const {
  nlohmann::json comms_per_step = nlohmann::json::array();
  nlohmann::json bytes_per_step = nlohmann::json::array();
  nlohmann::json phase_table = nlohmann::json::array();
  for (std::size_t s = 0; s < rank_steps[0].size(); ++s) {
    const StepComms& step = rank_steps[0][s];
    const auto counts = total(step, false);
    const auto bytes = total(step, true);
    comms_per_step.push_back(counts);
    bytes_per_step.push_back(bytes);
    nlohmann::json phases_json = nlohmann::json::object();
    for (const auto& [phase, pc] : step) phases_json[phase] = pc.count;
    phase_table.push_back(phases_json);
    std::string line = "step " + std::to_string(s + 1) + ":";
    for (const std::string& phase : phases()) {
      line += " " + phase + " [" + counts_text(step.at(phase).count) + "]";
    }
    o.plan.push_back(line);
    const std::string at = "step " + std::to_string(s + 1);
    for (const auto& [op, want] : per_step.ops) {
      const std::int64_t got = count_of(counts, op);
      if (got != want) {
        problems.push_back(at + ": expect.comms_per_step." + op + " " + std::to_string(want) +
                           " but rank 0 issued " + std::to_string(got));
      }
    }
    for (const auto& [phase, expected] : per_phase) {
      for (const auto& [op, want] : expected.ops) {
        const std::int64_t got = count_of(step.at(phase).count, op);
        if (got != want) {
          problems.push_back(at + ": expect." + phase + "." + op + " " + std::to_string(want) +
                             " but rank 0 issued " + std::to_string(got) + " in the " + phase);
        }
      }
    }
  }
  o.metrics["comms_per_step"] = comms_per_step;
  o.metrics["bytes_per_step"] = bytes_per_step;
  o.metrics["phases"] = phase_table;
}

std::string counts_text(const std::map<std::string, std::int64_t>& counts) {
  std::string text;
  for (const auto& [op, n] : counts) {
    if (n == 0) continue;
    text += (text.empty() ? "" : ", ") + op + " x" + std::to_string(n);
  }
  return text.empty() ? "none" : text;
}

std::map<std::string, std::int64_t> total(const StepComms& step, bool bytes) {
  std::map<std::string, std::int64_t> sum;
  for (const auto& [phase, pc] : step) {
    for (const auto& [op, n] : bytes ? pc.bytes : pc.count) sum[op] += n;
  }
  return sum;
}

// The count of `op` in `counts` (0 when the implementation issued none).
std::int64_t count_of(const std::map<std::string, std::int64_t>& counts, const std::string& op) {
  const auto it = counts.find(op);
  return it == counts.end() ? 0 : it->second;
}

std::string names_text(const std::set<std::string>& names) {
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}

}  // namespace meshgate::runner::fsdp_kind
