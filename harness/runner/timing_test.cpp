#include "timing.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace meshgate::runner {
namespace {

// A timed op whose every call takes `per_call_s` on a simulated clock, recording the batches.
struct SimulatedOp {
  double per_call_s;
  std::vector<std::int64_t> batches;

  double operator()(std::int64_t calls) {
    batches.push_back(calls);
    return per_call_s * static_cast<double>(calls);
  }
};

TEST(CallsPerSample, AFastOpGrowsItsBatchUntilOneTakesTheMinimum) {
  SimulatedOp op{2e-9, {}};
  const std::int64_t calls = choose_calls_per_sample(std::ref(op), 1e-3);
  EXPECT_GE(static_cast<double>(calls) * op.per_call_s, 1e-3);
  // Google Benchmark's growth: tenfold while a batch says little, then the estimate plus 40 %.
  EXPECT_EQ(op.batches.front(), 1);
  for (std::size_t i = 1; i < op.batches.size(); ++i) {
    EXPECT_GT(op.batches[i], op.batches[i - 1]);
    EXPECT_LE(op.batches[i], 14 * op.batches[i - 1]);
  }
  EXPECT_EQ(op.batches.back(), calls);
  EXPECT_LT(static_cast<double>(calls) * op.per_call_s, 1.4e-3 * 1.01);
}

TEST(CallsPerSample, AnOpLongerThanTheMinimumRunsOneCallPerSample) {
  SimulatedOp op{5e-3, {}};
  EXPECT_EQ(choose_calls_per_sample(std::ref(op), 1e-3), 1);
  EXPECT_EQ(op.batches, std::vector<std::int64_t>{1});
}

TEST(CallsPerSample, AMinimumOfZeroIsOneCallWithoutRunningAnything) {
  SimulatedOp op{1e-9, {}};
  EXPECT_EQ(choose_calls_per_sample(std::ref(op), 0), 1);
  EXPECT_TRUE(op.batches.empty());
}

TEST(CallsPerSample, AClockThatNeverAdvancesStopsAtTheCap) {
  SimulatedOp op{0, {}};
  EXPECT_EQ(choose_calls_per_sample(std::ref(op), 1e-3), kMaxCallsPerSample);
  EXPECT_LE(op.batches.size(), 12u);
}

TEST(CallsPerSample, TheLargestProposalOfTheAgreementWins) {
  // This process would stop at 1 call; another one asks for batches of 50, then stops.
  SimulatedOp op{5e-3, {}};
  std::vector<std::int64_t> proposals;
  const std::int64_t calls = choose_calls_per_sample(std::ref(op), 1e-3, [&](std::int64_t mine) {
    proposals.push_back(mine);
    return proposals.size() == 1 ? std::max<std::int64_t>(mine, 50) : mine;
  });
  EXPECT_EQ(calls, 50);
  EXPECT_EQ(op.batches, (std::vector<std::int64_t>{1, 50}));
  EXPECT_EQ(proposals, (std::vector<std::int64_t>{0, 0}));
}

TEST(MeasureCalls, SamplesReportTheTimePerCallOfBatchesOfTheChosenSize) {
  SimulatedOp op{3e-9, {}};
  PerfSpec perf;
  perf.warmup = 2;
  perf.iters = 4;
  perf.min_sample_time_s = 1e-4;
  const TimedSamples samples = measure_calls(std::ref(op), perf);
  ASSERT_EQ(samples.per_call_s.size(), 4u);
  for (const double t : samples.per_call_s) EXPECT_NEAR(t, 3e-9, 1e-18);
  EXPECT_GT(samples.calls_per_sample, 1);
  // The batches of the choice, then warm-up and timed samples of the chosen size.
  ASSERT_GE(op.batches.size(), 6u);
  for (std::size_t i = op.batches.size() - 6; i < op.batches.size(); ++i) {
    EXPECT_EQ(op.batches[i], samples.calls_per_sample);
  }
}

TEST(MeasureCalls, WithoutAMinimumEveryWarmupAndSampleIsOneCall) {
  SimulatedOp op{3e-9, {}};
  const TimedSamples samples = measure_calls(std::ref(op), PerfSpec{2, 3, 1, 0.0});
  EXPECT_EQ(samples.calls_per_sample, 1);
  EXPECT_EQ(op.batches, std::vector<std::int64_t>(5, 1));
}

TEST(Duration, UnitsAndBareSeconds) {
  EXPECT_DOUBLE_EQ(*parse_duration("1ms"), 1e-3);
  EXPECT_DOUBLE_EQ(*parse_duration("0.5ms"), 5e-4);
  EXPECT_DOUBLE_EQ(*parse_duration("200us"), 2e-4);
  EXPECT_DOUBLE_EQ(*parse_duration("1500ns"), 1.5e-6);
  EXPECT_DOUBLE_EQ(*parse_duration("2s"), 2.0);
  EXPECT_DOUBLE_EQ(*parse_duration("0.001"), 1e-3);
  EXPECT_DOUBLE_EQ(*parse_duration("1e-3"), 1e-3);
  EXPECT_DOUBLE_EQ(*parse_duration("0"), 0.0);
  for (const char* bad : {"", "ms", "fast", "-1ms", "1 ms", "1min", "inf", "nan", "1e999", "1h"}) {
    EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace meshgate::runner
