#include "timing.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace meshgate::runner {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

// The next batch size after `calls` calls took `seconds`, as Google Benchmark grows its
// iteration count: aim 40 % past the minimum from the last batch's rate when that batch took
// long enough to say something (a tenth of the minimum), otherwise ten times as many calls.
std::int64_t next_batch(std::int64_t calls, double seconds, double min_sample_time_s) {
  double multiplier = 10.0;
  if (seconds / min_sample_time_s > 0.1) {
    multiplier = min_sample_time_s * 1.4 / std::max(seconds, 1e-9);
    // Below the minimum the estimate can come out under 1 when the last batch was slowed down
    // (a preemption); growing anyway keeps the loop going forward.
    if (multiplier <= 1.0) multiplier = 2.0;
  }
  const double next = std::ceil(static_cast<double>(calls) * multiplier);
  const double capped = std::min(next, static_cast<double>(kMaxCallsPerSample));
  return std::max(static_cast<std::int64_t>(capped), calls + 1);
}

}  // namespace

std::int64_t choose_calls_per_sample(const TimeCalls& time_calls, double min_sample_time_s,
                                     const AgreeOnCalls& agree) {
  if (!(min_sample_time_s > 0)) return 1;
  std::int64_t calls = 1;
  while (true) {
    const double seconds = time_calls(calls);
    // 0 proposes to stop at `calls`; a larger batch from any process outvotes it.
    std::int64_t proposal = 0;
    if (seconds < min_sample_time_s && calls < kMaxCallsPerSample) {
      proposal = next_batch(calls, seconds, min_sample_time_s);
    }
    if (agree) proposal = agree(proposal);
    if (proposal <= calls) return calls;
    calls = proposal;
  }
}

TimedSamples measure_calls(const TimeCalls& time_calls, const PerfSpec& perf,
                           const AgreeOnCalls& agree) {
  TimedSamples out;
  out.calls_per_sample = choose_calls_per_sample(time_calls, perf.min_sample_time(), agree);
  const auto calls = static_cast<double>(out.calls_per_sample);
  for (int i = 0; i < perf.warmup; ++i) time_calls(out.calls_per_sample);
  out.per_call_s.reserve(static_cast<std::size_t>(perf.iters));
  for (int i = 0; i < perf.iters; ++i) {
    out.per_call_s.push_back(time_calls(out.calls_per_sample) / calls);
  }
  return out;
}

TimedSamples measure(PreparedCase& prepared, RunContext& ctx, const PerfSpec& perf) {
  return measure_calls([&](std::int64_t calls) { return prepared.time_calls(ctx, calls); }, perf,
                       [&](std::int64_t calls) { return ctx.agree_on_calls(calls); });
}

nlohmann::json summarize(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("summarize: no samples");
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  const double median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  return {{"median", median}, {"min", samples.front()}, {"max", samples.back()}};
}

std::optional<double> parse_duration(std::string_view text) {
  struct Unit {
    std::string_view suffix;
    double seconds;
  };
  // Longest suffixes first: "ms" must not be read as "s".
  static constexpr Unit kUnits[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
  double scale = 1.0;
  for (const Unit& unit : kUnits) {
    if (text.size() > unit.suffix.size() && text.ends_with(unit.suffix)) {
      text.remove_suffix(unit.suffix.size());
      scale = unit.seconds;
      break;
    }
  }
  const std::string number(text);
  if (number.empty() || number.find_first_not_of("0123456789.eE+-") != std::string::npos) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value) || value < 0) {
    return std::nullopt;
  }
  return value * scale;
}

}  // namespace meshgate::runner
