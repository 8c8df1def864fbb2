#pragma once
// Perf measurement: warm-up, timed iterations, and the summary of one run's samples.
#include <vector>

#include <nlohmann/json.hpp>

#include "case_kind.hpp"
#include "validate.hpp"

namespace meshgate::runner {

// Runs warmup untimed and iters timed iterations; returns the iters samples in seconds.
std::vector<double> measure(PreparedCase& prepared, RunContext& ctx, const PerfSpec& perf);

// {"median": ..., "min": ..., "max": ...} of non-empty samples (median of an even count is
// the mean of the middle two).
nlohmann::json summarize(std::vector<double> samples);

// Seconds on a monotonic clock since an arbitrary origin.
double monotonic_seconds();

}  // namespace meshgate::runner
