#include "kinds/gemm_sweep/sweep_tally.hpp"

#include <iterator>
#include <numeric>
#include <sstream>

namespace meshgate::runner {
namespace {

namespace g = meshgate::gemm;

std::string shape_text(const g::SweepShape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

// One line that reruns the failing shape alone, in a fresh case file.
std::string repro_command(const SweepPoint& pt, g::Impl impl) {
  return "printf 'suite: repro\\ncases:\\n  - %s\\n' '" + repro_case(pt, impl) +
         "' > repro.yaml && meshgate-runner run repro.yaml";
}

nlohmann::json config_json(const g::GemmProblem& p) {
  return {{"dtype", g::to_string(p.dtype)},       {"epilogue", g::to_string(p.epilogue)},
          {"layout", g::to_string(p.layout)},     {"x_offset", p.x_offset},
          {"w_offset", p.w_offset},               {"bias_offset", p.bias_offset},
          {"workspace", p.workspace},             {"split_k", p.split_k}};
}

}  // namespace

void SweepTally::add(const SweepPoint& pt, const SweepFailure& f) {
  const auto c = static_cast<std::size_t>(f.failure);
  ++counts_[c];
  // Shape, class and implementation: the same shape failing in two classes is two keys.
  failing_keys_.insert(shape_text(pt.shape) + " " + std::string(g::to_string(pt.problem.dtype)) +
                       " " + std::string(g::to_string(f.impl)) + " " +
                       std::string(g::to_string(f.failure)));
  if (failing_keys_.size() > kFailingKeysKept) {
    failing_keys_.erase(std::prev(failing_keys_.end()));
    keys_truncated_ = true;
  }
  const double volume = pt.shape.volume();
  std::optional<Example>& best = smallest_[c];
  // The smallest by M*N*K, the earliest drawn on a tie: the same answer in any order.
  if (best && (best->volume < volume || (best->volume == volume && best->index <= pt.index)))
    return;
  nlohmann::json record = {{"shape", shape_text(pt.shape)},
                           {"m", pt.shape.m},
                           {"n", pt.shape.n},
                           {"k", pt.shape.k},
                           {"index", pt.index},
                           {"impl", g::to_string(f.impl)},
                           {"config", config_json(pt.problem)},
                           {"detail", f.detail},
                           {"repro", repro_command(pt, f.impl)}};
  if (!f.run_info.is_null()) record["run_info"] = f.run_info;
  best = Example{volume, pt.index, std::move(record)};
}

std::int64_t SweepTally::failures() const {
  return std::accumulate(counts_.begin(), counts_.end(), std::int64_t{0});
}

std::string SweepTally::summary() const {
  std::ostringstream s;
  for (int c = 0; c < g::kFailureClassCount; ++c) {
    if (counts_[c] == 0) continue;
    const nlohmann::json& r = smallest_[c]->record;
    if (s.tellp() > 0) s << "; ";
    s << g::to_string(static_cast<g::FailureClass>(c)) << " " << counts_[c] << " (smallest "
      << r["shape"].get<std::string>() << " " << r["config"]["dtype"].get<std::string>() << " "
      << r["impl"].get<std::string>() << ": " << r["detail"].get<std::string>() << ")";
  }
  return s.str();
}

void SweepTally::write_metrics(nlohmann::json& m) const {
  nlohmann::json counts = nlohmann::json::object();
  nlohmann::json classes = nlohmann::json::object();
  for (int c = 0; c < g::kFailureClassCount; ++c) {
    const std::string name(g::to_string(static_cast<g::FailureClass>(c)));
    counts[name] = counts_[c];
    if (smallest_[c]) classes[name] = {{"count", counts_[c]}, {"smallest", smallest_[c]->record}};
  }
  m["shapes"] = shapes_tried_;
  m["impl_runs"] = impl_runs_;
  m["failure_counts"] = counts;
  m["failing_shapes"] = std::vector<std::string>(failing_keys_.begin(), failing_keys_.end());
  m["failing_shapes_truncated"] = keys_truncated_;
  m["failures"] = classes;
  m["tolerated_inexact"] = tolerated_inexact_;
  m["planned_fallbacks"] = planned_fallbacks_;
  m["split_k_unapplied"] = split_k_unapplied_;
}

nlohmann::json SweepTally::to_json() const {
  nlohmann::json smallest = nlohmann::json::array();
  for (const auto& e : smallest_)
    smallest.push_back(e ? nlohmann::json{{"volume", e->volume}, {"index", e->index},
                                          {"record", e->record}}
                         : nlohmann::json());
  return {{"counts", counts_},
          {"smallest", smallest},
          {"failing_keys", failing_keys_},
          {"failing_keys_truncated", keys_truncated_},
          {"shapes_tried", shapes_tried_},
          {"impl_runs", impl_runs_},
          {"tolerated_inexact", tolerated_inexact_},
          {"planned_fallbacks", planned_fallbacks_},
          {"split_k_unapplied", split_k_unapplied_}};
}

SweepTally SweepTally::from_json(const nlohmann::json& j) {
  SweepTally t;
  t.counts_ = j.at("counts").get<std::array<std::int64_t, g::kFailureClassCount>>();
  const nlohmann::json& smallest = j.at("smallest");
  for (std::size_t c = 0; c < t.smallest_.size() && c < smallest.size(); ++c)
    if (!smallest[c].is_null())
      t.smallest_[c] = Example{smallest[c].at("volume").get<double>(),
                               smallest[c].at("index").get<std::int64_t>(),
                               smallest[c].at("record")};
  t.failing_keys_ = j.at("failing_keys").get<std::set<std::string>>();
  t.keys_truncated_ = j.at("failing_keys_truncated").get<bool>();
  t.shapes_tried_ = j.at("shapes_tried").get<std::int64_t>();
  t.impl_runs_ = j.at("impl_runs").get<std::int64_t>();
  t.tolerated_inexact_ = j.at("tolerated_inexact").get<std::int64_t>();
  t.planned_fallbacks_ = j.at("planned_fallbacks").get<std::int64_t>();
  t.split_k_unapplied_ = j.at("split_k_unapplied").get<std::int64_t>();
  return t;
}

}  // namespace meshgate::runner
