#pragma once
// Perf measurement: how many calls one timed sample covers, warm-up, timed samples, and the
// summary of one run's samples.
//
// An op of a few nanoseconds cannot be timed one call at a time: the clock read and the noise
// between calls swamp it. As Google Benchmark and nvbench do, a sample times a batch of calls
// made back to back, and the batch grows until it takes at least the minimum sample time; the
// sample then reports the time per call. Work that already takes longer than the minimum runs
// one call per sample.
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_kind.hpp"

namespace meshgate::runner {

// A batch stops growing here whatever the clock says (Google Benchmark's own limit): an op that
// the compiler removed, or a clock that does not advance, must not loop forever.
inline constexpr std::int64_t kMaxCallsPerSample = 1'000'000'000;

// Seconds that `calls` back-to-back calls of the timed work took; for work on several ranks,
// the maximum over the ranks.
using TimeCalls = std::function<double(std::int64_t calls)>;
// Agreement on a batch size between the processes that run one case: every process passes its
// proposal and gets the largest (a no-op within one process).
using AgreeOnCalls = std::function<std::int64_t(std::int64_t calls)>;

// The calls per sample for `time_calls`: batches of 1, then of more calls (Google Benchmark's
// rule: when the last batch took over a tenth of the minimum, the calls its rate says the
// minimum needs plus 40 % (twice the last when that is no more than the last); otherwise ten
// times the last; always at least one more call, never past kMaxCallsPerSample) until a batch
// takes `min_sample_time_s`. The batches run here are untimed warm-up.
// Every step is agreed with `agree` (the largest proposal wins), so that the processes of one
// case make the same calls in the same order and stop together, each with a batch at least as
// long as the minimum. A minimum of 0 is one call per sample, decided without running anything.
std::int64_t choose_calls_per_sample(const TimeCalls& time_calls, double min_sample_time_s,
                                     const AgreeOnCalls& agree = nullptr);

// One run's timed samples: seconds per call, each the mean over `calls_per_sample` calls.
struct TimedSamples {
  std::vector<double> per_call_s;
  std::int64_t calls_per_sample = 1;
};

// choose_calls_per_sample, then perf.warmup untimed samples and perf.iters timed samples of
// that many calls each.
TimedSamples measure_calls(const TimeCalls& time_calls, const PerfSpec& perf,
                           const AgreeOnCalls& agree = nullptr);

// measure_calls on the case's time_calls, agreed over the case's processes.
TimedSamples measure(PreparedCase& prepared, RunContext& ctx, const PerfSpec& perf);

// {"median": ..., "min": ..., "max": ...} of non-empty samples (median of an even count is
// the mean of the middle two).
nlohmann::json summarize(std::vector<double> samples);

// Seconds on a monotonic clock since an arbitrary origin.
double monotonic_seconds();

// Keeps the compiler from dropping the computation of `value` in a timed loop whose results
// nothing reads.
template <class T>
inline void keep_result(const T& value) {
  asm volatile("" : : "r"(&value) : "memory");
}

// A duration such as "1ms", "0.5ms", "200us", "1500ns", "2s", or a bare number of seconds;
// nullopt when `text` is not one, or is negative or not finite.
std::optional<double> parse_duration(std::string_view text);

}  // namespace meshgate::runner
