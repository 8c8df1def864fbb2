#include "timing.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace meshgate::runner {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<double> measure(PreparedCase& prepared, RunContext& ctx, const PerfSpec& perf) {
  for (int i = 0; i < perf.warmup; ++i) prepared.time_iteration(ctx);
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(perf.iters));
  for (int i = 0; i < perf.iters; ++i) samples.push_back(prepared.time_iteration(ctx));
  return samples;
}

nlohmann::json summarize(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("summarize: no samples");
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  const double median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  return {{"median", median}, {"min", samples.front()}, {"max", samples.back()}};
}

}  // namespace meshgate::runner
