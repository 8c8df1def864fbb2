#pragma once
// kind: gemm_sweep — what a sweep found so far: per failure class its count and its smallest
// failing shape (by M*N*K) with the configuration and a reproduction, and the sorted keys of
// every failing shape. It round-trips through JSON, the sweep's checkpoint.
#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "gemm/sweep.hpp"
#include "kinds/gemm_sweep/sweep_spec.hpp"

namespace meshgate::runner {

// At most this many failing shape keys are kept (the smallest in sort order, so that the list
// does not depend on the order the shapes ran in); the counts stay exact.
inline constexpr std::size_t kFailingKeysKept = 1000;

struct SweepFailure {
  gemm::FailureClass failure = gemm::FailureClass::drift;
  gemm::Impl impl = gemm::Impl::cpu_epilogue;
  std::string detail;       // what the output held, or why the fallback happened
  nlohmann::json run_info;  // the implementation's own account (cuBLASLt: algorithm, split-K)
};

class SweepTally {
 public:
  // One failure of the implementation that ran `point`.
  void add(const SweepPoint& point, const SweepFailure& f);
  void count_shape() { ++shapes_tried_; }
  void count_run() { ++impl_runs_; }
  void count_tolerated() { ++tolerated_inexact_; }
  void count_planned_fallback() { ++planned_fallbacks_; }
  void count_split_k_unapplied() { ++split_k_unapplied_; }

  std::int64_t shapes_tried() const { return shapes_tried_; }
  std::int64_t failures() const;
  // "k_tail 3 (smallest 56x70x38424 ...); unwritten 1 (...)": the classes that failed.
  std::string summary() const;
  // The row's metrics: counts per class, the failing keys, each class's smallest example.
  void write_metrics(nlohmann::json& metrics) const;

  nlohmann::json to_json() const;
  static SweepTally from_json(const nlohmann::json& j);

 private:
  struct Example {
    double volume = 0;
    std::int64_t index = 0;
    nlohmann::json record;
  };
  std::array<std::int64_t, gemm::kFailureClassCount> counts_{};
  std::array<std::optional<Example>, gemm::kFailureClassCount> smallest_{};
  std::set<std::string> failing_keys_;
  bool keys_truncated_ = false;
  std::int64_t shapes_tried_ = 0;
  std::int64_t impl_runs_ = 0;
  std::int64_t tolerated_inexact_ = 0;
  std::int64_t planned_fallbacks_ = 0;
  std::int64_t split_k_unapplied_ = 0;
};

}  // namespace meshgate::runner
