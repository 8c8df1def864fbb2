// Judging a gemm case's outputs, meshgate's implementations' or another implementation's: the
// OutputJudge, and the numbers it reports.

#include "kinds/gemm/gemm_case.hpp"

namespace meshgate::runner::gemm_kind {

void OutputJudge::add(std::size_t c, const std::string& name, nlohmann::json entry,
         const std::string& plan_line, g::HostTensor y) {
  const Config& config = r_.configs[c];
  g::GemmProblem q = r_.problem;
  q.workspace = config.workspace;
  q.split_k = config.split_k;
  const g::Comparison cmp = g::compare_to_reference(q, rows_, ref_, y, tol_);
  entry["fingerprint"] = g::fingerprint(q, y);
  entry["ulp_vs_reference"] = ulp_json(ulp_to_reference(q, rows_, ref_, y));
  entry.update(comparison_json(cmp));
  if (config.split_k > 1 && entry.contains("algo"))
    split_k_requests_.push_back(
        {name, config.label, config.split_k, entry["algo"].value("split_k_forced", false)});
  const std::string where = r_.configs.size() > 1 ? " [" + config.label + "]" : "";
  if (!cmp.ok) failures_.push_back(name + where + " vs fp64 reference: " + cmp.describe());
  outcome_.plan.push_back(c == 0 ? plan_line : "[" + config.label + "] " + plan_line);
  if (c == 0) {
    impls_[name] = std::move(entry);
    names_.push_back(name);
    pinned_.push_back(std::move(y));
    return;
  }
  const auto at = std::find(names_.begin(), names_.end(), name);
  if (at == names_.end())
    throw std::logic_error("gemm: " + name + " has no output in the pinned configuration");
  const g::UlpSummary vs_pinned = g::ulp_summary(q, pinned_[at - names_.begin()], y);
  entry["ulp_vs_pinned"] = ulp_json(vs_pinned);
  if (vs_pinned.differing > 0) {
    nlohmann::json& d = drift_[name];
    d["configs"].push_back(config.label);
    d["max_ulp_vs_pinned"] =
        std::max<std::uint64_t>(d.value("max_ulp_vs_pinned", std::uint64_t{0}), vs_pinned.max);
  }
  config_impls_[name] = std::move(entry);
}

void OutputJudge::end_config(std::size_t c) {
  if (c == 0) return;
  const Config& config = r_.configs[c];
  configs_.push_back({{"label", config.label},
                      {"workspace", config.workspace},
                      {"split_k", config.split_k},
                      {"impls", config_impls_}});
  config_impls_ = nlohmann::json::object();
}

std::vector<std::string> OutputJudge::summarize(const std::vector<std::string>& environments) {
  const g::GemmProblem& p = r_.problem;
  // Every implementation within tolerance of every other: drift between paths is a failure
  // even when each one alone is close enough to the reference.
  nlohmann::json pairs = nlohmann::json::object();
  for (std::size_t a = 0; a < names_.size(); ++a)
    for (std::size_t b = a + 1; b < names_.size(); ++b) {
      const g::Comparison c = g::compare_outputs(p, pinned_[a], pinned_[b], tol_);
      const std::string name = names_[a] + "/" + names_[b];
      pairs[name] = {
          {"max_abs_err", c.max_abs_err},
          {"min_row_cosine", c.min_row_cosine},
          {"bitwise_equal", g::fingerprint(p, pinned_[a]) == g::fingerprint(p, pinned_[b])},
          {"ok", c.ok}};
      if (!c.ok) failures_.push_back(name + " drift: " + c.describe());
    }
  nlohmann::json& metrics = outcome_.metrics;
  metrics["impls"] = impls_;
  metrics["pairs"] = pairs;
  metrics["pinned_config"] = r_.configs.front().label;
  if (r_.configs.size() > 1) {
    metrics["configs"] = configs_;
    metrics["drift"] = drift_;
  }
  std::string joined_env;
  for (const std::string& e : environments) joined_env += (joined_env.empty() ? "" : " + ") + e;
  metrics["numerics_env"] = joined_env;
  metrics["tolerance"] = {{"atol", tol_.atol},
                          {"rtol", tol_.rtol},
                          {"max_mean_rel", tol_.max_mean_rel},
                          {"min_cosine", tol_.min_cosine}};
  metrics["flops"] = g::flops(p);

  std::vector<std::string> flags;
  if (!failures_.empty()) flags.push_back("numerics: " + failures_.front());
  for (const auto& [name, d] : drift_.items()) {
    std::ostringstream s;
    s << "drift: " << name << " is not bitwise equal to its output at "
      << r_.configs.front().label << " under " << d["configs"].size()
      << " other configuration(s) (max " << d["max_ulp_vs_pinned"].get<std::uint64_t>()
      << " ulp)";
    flags.push_back(s.str());
  }
  if (std::string flag = split_k_flag(split_k_requests_); !flag.empty())
    flags.push_back(flag);
  return flags;
}

Outcome OutputJudge::conclude(std::vector<std::string> flags) {
  outcome_.metrics["flags"] = flags;
  if (!failures_.empty()) {
    outcome_.status = Status::fail;
    std::ostringstream message;
    for (std::size_t i = 0; i < failures_.size(); ++i)
      message << (i ? "; " : "") << failures_[i];
    outcome_.message = message.str();
  } else if (!flags.empty()) {
    outcome_.message = "flagged: " + flags.front();
  }
  return std::move(outcome_);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

nlohmann::json comparison_json(const g::Comparison& c) {
  return {{"max_abs_err", c.max_abs_err},
          {"max_rel_err", c.max_rel_err},
          {"mean_rel_err", c.mean_rel_err},
          {"min_row_cosine", c.min_row_cosine},
          {"rows_checked", c.rows_checked},
          {"mismatches", c.mismatches},
          {"nonfinite_mismatches", c.nonfinite_mismatches},
          {"equal_infinities", c.equal_infinities},
          {"ok", c.ok}};
}

nlohmann::json ulp_json(const g::UlpSummary& u) {
  return {{"max", u.max}, {"mean", u.mean}, {"differing", u.differing}, {"compared", u.compared}};
}

// Ulp distances of y to the reference rounded once to the dtype, over the checked rows: the
// pinned reference configuration every implementation and configuration is measured against.
g::UlpSummary ulp_to_reference(const g::GemmProblem& p, const std::vector<std::int64_t>& rows,
                               const std::vector<double>& ref, const g::HostTensor& y) {
  g::UlpSummary s;
  long double sum = 0;
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::int64_t j = 0; j < p.n; ++j) {
      const float expected = static_cast<float>(g::round_to(p.dtype, ref[r * p.n + j]));
      const std::uint64_t d = g::ulp_distance(p.dtype, expected, y.get(g::y_index(p, rows[r], j)));
      s.max = std::max(s.max, d);
      sum += static_cast<long double>(d);
      s.differing += d != 0;
      ++s.compared;
    }
  s.mean = s.compared ? static_cast<double>(sum / s.compared) : 0.0;
  return s;
}

Status parse_status(const std::string& s) {
  if (s == "pass") return Status::pass;
  if (s == "fail") return Status::fail;
  if (s == "skip") return Status::skip;
  return Status::error;
}

}  // namespace meshgate::runner::gemm_kind
