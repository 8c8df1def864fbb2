#include "runner.hpp"

#include <gtest/gtest.h>

#include <sched.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "cli.hpp"
#include "comm/threads_world.hpp"
#ifdef MESHGATE_HAVE_NCCL
#include "comm/nccl_world.hpp"
#endif
#include "host_state.hpp"
#include "provenance.hpp"
#include "results_writer.hpp"
#include "test_kinds.hpp"

namespace meshgate::runner {
namespace {

namespace fs = std::filesystem;
using testing::probe_counters;
using testing::test_kinds;

PlannedCases plan(const std::string& text) {
  LoadedCases loaded;
  load_case_text(text, "t.yaml", loaded);
  EXPECT_TRUE(loaded.errors.empty()) << loaded.errors.front();
  return prepare_cases(std::move(loaded.cases), test_kinds());
}

CaseRun run_one(const std::string& case_yaml, std::optional<int> ranks_cap = std::nullopt) {
  PlannedCases planned = plan("suite: s\ncases:\n  - " + case_yaml + "\n");
  EXPECT_TRUE(planned.errors.empty()) << planned.errors.front();
  EXPECT_EQ(planned.cases.size(), 1u);
  return execute_case(planned.cases.at(0), ranks_cap);
}

TEST(ExecuteCase, PassAndFailComeFromTheKind) {
  const CaseRun pass = run_one("{name: a, kind: probe, value: 3, expect: 3}");
  EXPECT_EQ(pass.outcome.status, Status::pass);
  EXPECT_EQ(pass.params, (nlohmann::json{{"value", 3}, {"ranks", 1}}));
  const CaseRun fail = run_one("{name: a, kind: probe, value: 3, expect: 4}");
  EXPECT_EQ(fail.outcome.status, Status::fail);
  EXPECT_EQ(fail.outcome.message, "expected 4\n  actual: 3");
}

TEST(ExecuteCase, ExpectErrorSemantics) {
  const CaseRun any =
      run_one("{name: a, kind: probe, value: 1, reject: 'no dim tp', expect_error: true}");
  EXPECT_EQ(any.outcome.status, Status::pass);
  EXPECT_EQ(any.outcome.message, "");

  const CaseRun matching = run_one(
      "{name: a, kind: probe, value: 1, reject: 'no dim tp', expect_error: 'KeyError: no dim'}");
  EXPECT_EQ(matching.outcome.status, Status::pass);

  const CaseRun other =
      run_one("{name: a, kind: probe, value: 1, reject: 'no dim tp', expect_error: ValueError}");
  EXPECT_EQ(other.outcome.status, Status::fail);
  EXPECT_EQ(other.outcome.message,
            "expected a rejection containing 'ValueError'\n  actual: KeyError: no dim tp");

  const CaseRun unexpected = run_one("{name: a, kind: probe, value: 1, reject: 'no dim tp'}");
  EXPECT_EQ(unexpected.outcome.status, Status::fail);
  EXPECT_EQ(unexpected.outcome.message, "rejected: KeyError: no dim tp");

  const CaseRun accepted = run_one("{name: a, kind: probe, value: 1, expect_error: true}");
  EXPECT_EQ(accepted.outcome.status, Status::fail);
  EXPECT_EQ(accepted.outcome.message, "expected the op to be rejected but it succeeded");

  const CaseRun flag_off = run_one("{name: a, kind: probe, value: 1, expect_error: false}");
  EXPECT_EQ(flag_off.outcome.status, Status::pass);
}

TEST(Validate, AnUnquotedNumberIsNoExpectErrorButAQuotedOneIsASubstring) {
  const PlannedCases number =
      plan("suite: s\ncases:\n  - {name: a, kind: probe, value: 1, expect_error: 5}\n");
  ASSERT_EQ(number.errors.size(), 1u);
  EXPECT_NE(number.errors[0].find("key 'expect_error': expected true, false or a substring of the "
                                  "error message, got the number 5; quote it (\"5\")"),
            std::string::npos)
      << number.errors[0];
  const PlannedCases quoted =
      plan("suite: s\ncases:\n  - {name: a, kind: probe, value: 1, expect_error: \"5\"}\n");
  ASSERT_TRUE(quoted.errors.empty()) << quoted.errors.front();
  EXPECT_EQ(quoted.cases.at(0).expected_message, "5");
}

TEST(ExecuteCase, AReportedRejectionIsJudgedLikeAThrownOneAndKeepsMetrics) {
  const CaseRun expected = run_one(
      "{name: a, kind: probe, value: 1, report_reject: 'KeyError: no dim tp', expect_error: 'no "
      "dim'}");
  EXPECT_EQ(expected.outcome.status, Status::pass);
  // The kind's metrics stay, and the row records what raised, whatever the verdict.
  EXPECT_EQ(expected.outcome.metrics,
            (nlohmann::json{{"kept", true}, {"rejected", "KeyError: no dim tp"}}));

  const CaseRun unexpected =
      run_one("{name: a, kind: probe, value: 1, report_reject: 'KeyError: no dim tp'}");
  EXPECT_EQ(unexpected.outcome.status, Status::fail);
  EXPECT_EQ(unexpected.outcome.message, "rejected: KeyError: no dim tp");
  EXPECT_EQ(unexpected.outcome.metrics,
            (nlohmann::json{{"kept", true}, {"rejected", "KeyError: no dim tp"}}));
}

TEST(ExecuteCase, AKindsOwnFailureKeepsItsMessageUnderExpectError) {
  const CaseRun failed = run_one(
      "{name: a, kind: probe, value: 3, fail_with: 'wrong element at (3, 1)', expect_error: true}");
  EXPECT_EQ(failed.outcome.status, Status::fail);
  EXPECT_EQ(failed.outcome.message, "wrong element at (3, 1)");
}

TEST(ExecuteCase, ARankThatThrowsBecomesAnErrorNamingTheRank) {
  const CaseRun run = run_one("{name: a, kind: probe, value: 1, ranks: 4, throw_on_rank: 2}");
  EXPECT_EQ(run.outcome.status, Status::error);
  EXPECT_EQ(run.outcome.message, "rank 2: boom on rank 2");
}

// A call the backend cannot carry out means the case could not run: an error naming the rank,
// never a fail (a wrong answer), and no expect_error turns it into the kernel's rejection.
TEST(ExecuteCase, ABackendThatCannotRunACallGivesAnErrorNotAFail) {
  for (const char* expect_error : {"", ", expect_error: true"}) {
    const CaseRun on_ranks =
        run_one(std::string("{name: a, kind: probe, value: 1, ranks: 2, integer_avg: true") +
                expect_error + "}");
    EXPECT_EQ(on_ranks.outcome.status, Status::error) << on_ranks.outcome.message;
    EXPECT_NE(on_ranks.outcome.message.find(
                  "RuntimeError: backend 'threads' does not support all_reduce(avg) for int32"),
              std::string::npos)
        << on_ranks.outcome.message;
    const CaseRun in_thread = run_one(
        std::string("{name: a, kind: probe, value: 1, backend_error: 'MPI_Allreduce failed'") +
        expect_error + "}");
    EXPECT_EQ(in_thread.outcome.status, Status::error);
    EXPECT_EQ(in_thread.outcome.message, "RuntimeError: MPI_Allreduce failed");
  }
}

TEST(ExecuteCase, SkipWhenTheWorldIsTooSmall) {
  const int runs_before = probe_counters().runs;
  const CaseRun run = run_one("{name: a, kind: probe, value: 1, ranks: 8}", 4);
  EXPECT_EQ(run.outcome.status, Status::skip);
  EXPECT_EQ(run.outcome.message, "needs 8 ranks but the world has 4: run with --ranks 8");
  EXPECT_EQ(probe_counters().runs, runs_before);
  const CaseRun fits = run_one("{name: a, kind: probe, value: 1, ranks: 4}", 4);
  EXPECT_EQ(fits.outcome.status, Status::pass);
  EXPECT_EQ(fits.outcome.metrics["ranks_ran"], 4);
  EXPECT_EQ(fits.outcome.metrics["comms_matched"], 4);
}

TEST(ExecuteCase, PerfCaseTimesWarmupPlusItersAndKeepsIters) {
  const int before = probe_counters().iterations;
  const CaseRun run =
      run_one("{name: a, kind: probe, value: 1, iter_s: 0.5, perf: {warmup: 2, iters: 3}}");
  ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  // One batch that shows a call is longer than the minimum sample, then warm-up and iters.
  EXPECT_EQ(probe_counters().iterations - before, 1 + 5);
  EXPECT_EQ(run.samples, (nlohmann::json{{"time_s", {{0.5, 0.5, 0.5}}}}));
  EXPECT_EQ(run.outcome.metrics["time_s"],
            (nlohmann::json{{"median", 0.5}, {"min", 0.5}, {"max", 0.5}, {"calls_per_sample", 1}}));
  // A failing case is not timed.
  const int before_fail = probe_counters().iterations;
  const CaseRun failing = run_one("{name: a, kind: probe, value: 1, expect: 2, perf: {iters: 3}}");
  EXPECT_EQ(failing.outcome.status, Status::fail);
  EXPECT_EQ(probe_counters().iterations, before_fail);
  EXPECT_TRUE(failing.samples.empty());
}

TEST(ExecuteCase, ANanosecondOpIsTimedInBatchesAndItsSamplesAreTimePerCall) {
  const std::int64_t calls_before = probe_counters().calls;
  const CaseRun run =
      run_one("{name: a, kind: probe, value: 1, iter_s: 2e-9, perf: {warmup: 1, iters: 3}}");
  ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  const nlohmann::json& time_s = run.outcome.metrics["time_s"];
  const std::int64_t calls = time_s["calls_per_sample"].get<std::int64_t>();
  // Batches of at least the default minimum sample time.
  EXPECT_GE(static_cast<double>(calls) * 2e-9, kDefaultMinSampleTimeS);
  EXPECT_GT(calls, 1);
  ASSERT_EQ(run.samples["time_s"][0].size(), 3u);
  for (const auto& t : run.samples["time_s"][0]) EXPECT_NEAR(t.get<double>(), 2e-9, 1e-18);
  EXPECT_NEAR(time_s["median"].get<double>(), 2e-9, 1e-18);
  // Warm-up and timed samples are batches of that size too.
  EXPECT_GE(probe_counters().calls - calls_before, 4 * calls);
}

TEST(ExecuteCase, AnOpLongerThanTheMinimumSampleIsOneCallPerSample) {
  const CaseRun run =
      run_one("{name: a, kind: probe, value: 1, iter_s: 2e-3, perf: {warmup: 1, iters: 3}}");
  ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  EXPECT_EQ(run.outcome.metrics["time_s"]["calls_per_sample"], 1);
  EXPECT_EQ(run.samples["time_s"], nlohmann::json::parse("[[2e-3, 2e-3, 2e-3]]"));
}

TEST(ExecuteCase, TheCasesMinSampleTimeSizesItsBatches) {
  // 10 ms from 2 ms calls: the first batch took a fifth of it, so the estimate is 7 calls.
  const CaseRun longer = run_one(
      "{name: a, kind: probe, value: 1, iter_s: 2e-3, perf: {iters: 2, min_sample_time: 10ms}}");
  ASSERT_EQ(longer.outcome.status, Status::pass) << longer.outcome.message;
  EXPECT_EQ(longer.outcome.metrics["time_s"]["calls_per_sample"], 7);
  EXPECT_NEAR(longer.samples["time_s"][0][0].get<double>(), 2e-3, 1e-15);
  // 0: one call per sample and nothing run to choose it.
  const int before = probe_counters().iterations;
  const CaseRun single = run_one(
      "{name: a, kind: probe, value: 1, iter_s: 1e-9, perf: {warmup: 2, iters: 3, "
      "min_sample_time: 0}}");
  ASSERT_EQ(single.outcome.status, Status::pass) << single.outcome.message;
  EXPECT_EQ(single.outcome.metrics["time_s"]["calls_per_sample"], 1);
  EXPECT_EQ(probe_counters().iterations - before, 2 + 3);
}

TEST(Validate, MinSampleTimeIsADuration) {
  PlannedCases planned =
      plan("suite: s\ncases:\n  - {name: a, kind: probe, value: 1, perf: {min_sample_time: 0.5ms}}"
           "\n  - {name: b, kind: probe, value: 1, perf: {min_sample_time: 0.002}}"
           "\n  - {name: c, kind: probe, value: 1, perf: {iters: 3}}\n");
  ASSERT_TRUE(planned.errors.empty()) << planned.errors.front();
  EXPECT_DOUBLE_EQ(*planned.cases.at(0).perf->min_sample_time_s, 5e-4);
  EXPECT_DOUBLE_EQ(*planned.cases.at(1).perf->min_sample_time_s, 2e-3);
  EXPECT_FALSE(planned.cases.at(2).perf->min_sample_time_s.has_value());
  for (const char* bad : {"-1ms", "soon", "[1]", "1 ms"}) {
    const PlannedCases rejected = plan("suite: s\ncases:\n  - {name: a, kind: probe, value: 1, "
                                       "perf: {min_sample_time: " + std::string(bad) + "}}\n");
    ASSERT_EQ(rejected.errors.size(), 1u) << bad;
    EXPECT_NE(rejected.errors[0].find("key 'perf.min_sample_time': expected a duration >= 0"),
              std::string::npos)
        << rejected.errors[0];
  }
}

TEST(Validation, ReportsEveryErrorWithPositionCaseAndKey) {
  const PlannedCases planned = plan(
      "suite: s\n"
      "cases:\n"
      "  - name: a\n"
      "    kind: probe\n"
      "    value: 1\n"
      "    expcet: 2\n"
      "  - name: b\n"
      "    kind: probe\n"
      "    value: [1]\n"
      "  - name: c\n"
      "    kind: prob\n"
      "  - name: d\n"
      "    kind: probe\n"
      "    value: 1\n"
      "    perf: {iters: 0, runz: 3}\n"
      "    options: {verbos: true}\n");
  EXPECT_TRUE(planned.cases.empty());
  ASSERT_EQ(planned.errors.size(), 5u) << ::testing::PrintToString(planned.errors);
  EXPECT_EQ(planned.errors[0],
            "t.yaml:6:5: case 's/a': key 'expcet': unknown key (did you mean 'expect'?)");
  EXPECT_EQ(planned.errors[1],
            "t.yaml:9:12: case 's/b': key 'value': expected an integer, got a list; to run the "
            "case once per value, list them under matrix: {value: [...]} and write value: "
            "\"${value}\"");
  EXPECT_EQ(planned.errors[2],
            "t.yaml:11:11: case 's/c': key 'kind': unknown kind 'prob' (did you mean 'probe'?); "
            "known kinds: probe, echo");
  EXPECT_EQ(planned.errors[3],
            "t.yaml:15:19: case 's/d': key 'perf.iters': must be at least 1, got 0");
  EXPECT_EQ(planned.errors[4],
            "t.yaml:15:22: case 's/d': key 'perf.runz': unknown key (did you mean 'runs'?)");
}

TEST(Validation, NestedUnknownKeysAndExpectErrorForms) {
  const PlannedCases planned = plan(
      "cases:\n"
      "  - {name: a, kind: probe, value: 1, options: {verbos: true}}\n"
      "  - {name: b, kind: probe, value: 1, expect_error: [x]}\n"
      "  - {name: c, kind: probe, value: 1, expect_error: \"true\"}\n");
  ASSERT_EQ(planned.errors.size(), 2u);
  EXPECT_EQ(planned.errors[0],
            "t.yaml:2:48: case 't/a': key 'options.verbos': unknown key (did you mean 'verbose'?)");
  EXPECT_EQ(planned.errors[1],
            "t.yaml:3:52: case 't/b': key 'expect_error': expected true, false or a substring of "
            "the error message, got a list");
  ASSERT_EQ(planned.cases.size(), 1u);
  EXPECT_TRUE(planned.cases[0].expect_error);
  EXPECT_EQ(planned.cases[0].expected_message, "true");
}

PlannedCases plan_with_limit(const std::string& text, std::int64_t limit) {
  LoadedCases loaded;
  load_case_text(text, "t.yaml", loaded);
  EXPECT_TRUE(loaded.errors.empty()) << loaded.errors.front();
  ValidationOptions options;
  options.memory_limit = limit;
  return prepare_cases(std::move(loaded.cases), test_kinds(), options);
}

TEST(MemoryLimit, AnEstimateAboveTheLimitIsAnInputErrorNamingKeyEstimateAndLimit) {
  const PlannedCases planned = plan_with_limit(
      "cases:\n"
      "  - {name: big, kind: probe, value: 1, memory: 3072}\n"
      "  - {name: fits, kind: probe, value: 1, memory: 2048}\n",
      2048);
  ASSERT_EQ(planned.errors.size(), 1u);
  EXPECT_EQ(planned.errors[0],
            "t.yaml:2:48: case 't/big': key 'memory': needs an estimated 3 KiB of host memory (as "
            "the probe says), above the memory limit of 2 KiB (set by --memory-limit): make the "
            "case smaller, or raise the limit with memory_limit: in the case or --memory-limit on "
            "the runner");
  ASSERT_EQ(planned.cases.size(), 1u);
  EXPECT_EQ(planned.cases[0].spec.id, "t/fits");
}

TEST(MemoryLimit, TheDefaultIsSixteenGiBAndTheCaseKeyOverridesEveryOtherLimit) {
  const PlannedCases by_default = plan(
      "cases:\n"
      "  - {name: over, kind: probe, value: 1, memory: 17179869185}\n"
      "  - {name: at, kind: probe, value: 1, memory: 17179869184}\n"
      "  - {name: raised, kind: probe, value: 1, memory: 17179869185, memory_limit: 32GiB}\n");
  ASSERT_EQ(by_default.errors.size(), 1u);
  EXPECT_NE(by_default.errors[0].find("case 't/over': key 'memory': needs an estimated 16 GiB"),
            std::string::npos)
      << by_default.errors[0];
  EXPECT_NE(by_default.errors[0].find("the memory limit of 16 GiB (the default)"),
            std::string::npos);
  EXPECT_EQ(by_default.cases.size(), 2u);

  const PlannedCases lowered = plan_with_limit(
      "cases:\n  - {name: a, kind: probe, value: 1, memory: 4096, memory_limit: \"1 KiB\"}\n",
      1 << 20);
  ASSERT_EQ(lowered.errors.size(), 1u);
  EXPECT_NE(lowered.errors[0].find("limit of 1 KiB (set by the case's memory_limit)"),
            std::string::npos)
      << lowered.errors[0];
}

TEST(MemoryLimit, AMalformedMemoryLimitIsAnInputErrorEvenWithExpectError) {
  const PlannedCases planned = plan(
      "cases:\n  - {name: a, kind: probe, value: 1, memory_limit: 8 GB, expect_error: true}\n");
  ASSERT_EQ(planned.errors.size(), 1u);
  EXPECT_EQ(planned.errors[0],
            "t.yaml:2:52: case 't/a': key 'memory_limit': expected a size such as 32GiB or a "
            "number of bytes, got '8 GB'");
  EXPECT_TRUE(planned.cases.empty());
}

TEST(MemoryLimit, AnExpectedRejectionByTheLimitPasses) {
  PlannedCases planned = plan_with_limit(
      "cases:\n  - {name: a, kind: probe, value: 1, memory: 4096, expect_error: memory limit}\n",
      1024);
  ASSERT_TRUE(planned.errors.empty()) << planned.errors.front();
  ASSERT_EQ(planned.cases.size(), 1u);
  const int runs_before = probe_counters().runs;
  const CaseRun run = execute_case(planned.cases[0], std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  EXPECT_EQ(probe_counters().runs, runs_before);
}

TEST(ValidationRejection, WithExpectErrorTheCaseRunsAndPassesOnAMatchingMessage) {
  PlannedCases planned = plan(
      "cases:\n"
      "  - {name: any, kind: probe, value: 1, invalid: 'no dim cp', expect_error: true}\n"
      "  - {name: match, kind: probe, value: 1, invalid: 'no dim cp', expect_error: 'dim cp'}\n"
      "  - {name: other, kind: probe, value: 1, invalid: 'no dim cp', expect_error: divide}\n");
  ASSERT_TRUE(planned.errors.empty()) << planned.errors.front();
  ASSERT_EQ(planned.cases.size(), 3u);
  const int runs_before = probe_counters().runs;
  const CaseRun any = execute_case(planned.cases[0], std::nullopt);
  EXPECT_EQ(any.outcome.status, Status::pass) << any.outcome.message;
  EXPECT_EQ(any.params, (nlohmann::json{{"rejected_at", "validation"}}));
  EXPECT_EQ(execute_case(planned.cases[1], std::nullopt).outcome.status, Status::pass);
  const CaseRun other = execute_case(planned.cases[2], std::nullopt);
  EXPECT_EQ(other.outcome.status, Status::fail);
  EXPECT_EQ(other.outcome.message,
            "expected a rejection containing 'divide'\n  actual: t.yaml:4:51: case 't/other': key "
            "'invalid': no dim cp");
  // Nothing of the kind ran: validation had rejected the cases.
  EXPECT_EQ(probe_counters().runs, runs_before);
}

TEST(ValidationRejection, WithoutExpectErrorItIsAnInputError) {
  const PlannedCases planned =
      plan("cases:\n  - {name: a, kind: probe, value: 1, invalid: 'no dim cp'}\n");
  ASSERT_EQ(planned.errors.size(), 1u);
  EXPECT_EQ(planned.errors[0], "t.yaml:2:47: case 't/a': key 'invalid': no dim cp");
  EXPECT_TRUE(planned.cases.empty());
}

TEST(ValidationRejection, SchemaErrorsStayInputErrorsWithExpectError) {
  const PlannedCases planned = plan(
      "cases:\n"
      "  - {name: type, kind: probe, value: [1], expect_error: true}\n"
      "  - {name: missing, kind: probe, expect_error: true}\n"
      "  - {name: unknown, kind: probe, value: 1, vaule: 2, expect_error: true}\n"
      "  - {name: typo, kind: probe, value: 1, iter_z: 1, invalid: x, expect_error: true}\n");
  ASSERT_EQ(planned.errors.size(), 4u) << ::testing::PrintToString(planned.errors);
  EXPECT_NE(planned.errors[0].find("key 'value': expected an integer, got a list"),
            std::string::npos);
  EXPECT_NE(planned.errors[1].find("key 'value': is required (an integer)"), std::string::npos);
  EXPECT_NE(planned.errors[2].find("key 'vaule': unknown key (did you mean 'value'?)"),
            std::string::npos);
  // The rejection stopped the kind early, yet a typo of a key it knows is still reported.
  EXPECT_NE(planned.errors[3].find("key 'iter_z': unknown key (did you mean 'iter_s'?)"),
            std::string::npos);
  EXPECT_TRUE(planned.cases.empty());
}

TEST(ExecuteCase, BadAllocOnTheRunnersThreadIsAnErrorNamingTheCase) {
  const CaseRun run = run_one("{name: a, kind: probe, value: 1, memory: 2048, bad_alloc: true}");
  EXPECT_EQ(run.outcome.status, Status::error);
  EXPECT_EQ(run.outcome.message,
            "case 's/a' ran out of host memory (std::bad_alloc) in the runner's thread; its "
            "estimate was 2 KiB: lower memory_limit or --memory-limit below what this machine "
            "holds");
}

TEST(ExecuteCase, BadAllocOnARankIsAnErrorNamingTheRank) {
  const CaseRun run = run_one("{name: a, kind: probe, value: 1, ranks: 3, bad_alloc_on_rank: 1}");
  EXPECT_EQ(run.outcome.status, Status::error);
  EXPECT_EQ(run.outcome.message, "rank 1: ran out of host memory (std::bad_alloc)");
}

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("meshgate_runner_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  RunOptions options(std::vector<std::string> paths) {
    RunOptions o;
    o.paths = std::move(paths);
    o.out_dir = (dir_ / "out").string();
    o.run_id = "test-run";
    return o;
  }
  nlohmann::json results() {
    std::ifstream in(dir_ / "out" / "results.json");
    return nlohmann::json::parse(in);
  }
  std::vector<nlohmann::json> jsonl() {
    std::ifstream in(dir_ / "out" / "results.jsonl");
    std::vector<nlohmann::json> rows;
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
    return rows;
  }
  fs::path dir_;
};

const char* kFourCases =
    "suite: s\n"
    "defaults: {tags: [smoke]}\n"
    "cases:\n"
    "  - {name: ok, kind: probe, value: 1, expect: 1, perf: {warmup: 1, iters: 4}}\n"
    "  - {name: crash, kind: probe, value: 1, ranks: 4, throw_on_rank: 2}\n"
    "  - {name: after, kind: probe, value: 1, expect: 2, tags: [nightly]}\n"
    "  - {name: big, kind: probe, value: 1, ranks: 16}\n";

TEST_F(RunCommandTest, RankFailureIsARowAndTheSuiteGoesOn) {
  std::ostringstream out, err;
  RunOptions o = options({write("s.yaml", kFourCases)});
  o.ranks = 8;
  EXPECT_EQ(run_command(o, test_kinds(), out, err), 2);
  const std::vector<nlohmann::json> rows = jsonl();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["status"], "pass");
  EXPECT_EQ(rows[1]["status"], "error");
  EXPECT_EQ(rows[1]["message"], "rank 2: boom on rank 2");
  EXPECT_EQ(rows[2]["status"], "fail");
  EXPECT_EQ(rows[3]["status"], "skip");
  EXPECT_EQ(rows[3]["message"], "needs 16 ranks but the world has 8: run with --ranks 16");
  const std::string text = out.str();
  EXPECT_NE(text.find("[1/4] pass   s/ok  ("), std::string::npos) << text;
  EXPECT_NE(text.find("[2/4] error  s/crash  ("), std::string::npos) << text;
  EXPECT_NE(text.find("      rank 2: boom on rank 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("4 cases: 1 pass, 1 fail, 1 error, 1 skip"), std::string::npos) << text;
}

// The process path (mpi/nccl) without MPI: three "processes" are threads, each with its own
// ProcessBackend over its rank of a threads world, all running the same command.
TEST_F(RunCommandTest, ProcessWorldRunsCasesOnSubgroupsAndOnlyRankZeroWrites) {
  const std::string file =
      write("p.yaml",
            "suite: p\n"
            "cases:\n"
            "  - {name: two, kind: probe, value: 1, ranks: 2, expect: 1}\n"
            "  - {name: all, kind: probe, value: 1, ranks: 3, perf: {iters: 2}}\n"
            "  - {name: boom, kind: probe, value: 1, ranks: 3, throw_on_rank: 2}\n"
            "  - {name: big, kind: probe, value: 1, ranks: 4}\n"
            "  - {name: wrong, kind: probe, value: 1, expect: 2}\n");
  constexpr int kProcesses = 3;
  comm::ThreadsWorld world(kProcesses);
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  for (int r = 0; r < kProcesses; ++r) comms.push_back(world.communicator(r));
  std::vector<std::ostringstream> outs(kProcesses), errs(kProcesses);
  std::vector<int> codes(kProcesses, -1);
  std::vector<std::thread> processes;
  for (int r = 0; r < kProcesses; ++r) {
    processes.emplace_back([&, r] {
      comm::Communicator& c = *comms[static_cast<std::size_t>(r)];
      ProcessBackend backend("mpi", c, c, nullptr, versions_info("Test MPI 1.0"));
      codes[static_cast<std::size_t>(r)] =
          run_command(options({file}), backend, test_kinds(), outs[static_cast<std::size_t>(r)],
                      errs[static_cast<std::size_t>(r)]);
    });
  }
  for (std::thread& p : processes) p.join();
  EXPECT_EQ(codes[0], 2);
  for (int r = 1; r < kProcesses; ++r) {
    EXPECT_EQ(outs[static_cast<std::size_t>(r)].str(), "") << "rank " << r;
    EXPECT_EQ(errs[static_cast<std::size_t>(r)].str(), "") << "rank " << r;
  }
  EXPECT_NE(outs[0].str().find("5 cases: 2 pass, 1 fail, 1 error, 1 skip"), std::string::npos)
      << outs[0].str();
  const nlohmann::json r = results();
  EXPECT_EQ(r["run"]["backend"], "mpi");
  EXPECT_EQ(r["run"]["world_size"], 3);
  EXPECT_EQ(r["run"]["versions"]["mpi"], "Test MPI 1.0");
  ASSERT_EQ(r["cases"].size(), 5u);
  EXPECT_EQ(jsonl().size(), 5u);
  // Rank 0 reports what its own rank saw: one rank here, on a communicator of the case's size.
  EXPECT_EQ(r["cases"][0]["status"], "pass");
  EXPECT_EQ(r["cases"][0]["metrics"]["ranks_ran"], 1);
  EXPECT_EQ(r["cases"][0]["metrics"]["comms_matched"], 1);
  EXPECT_EQ(r["cases"][1]["status"], "pass");
  EXPECT_EQ(r["cases"][1]["samples"]["time_s"][0].size(), 2u);
  // Rank 2 threw; rank 0 raises the same failure after the agreement.
  EXPECT_EQ(r["cases"][2]["status"], "error");
  EXPECT_EQ(r["cases"][2]["message"], "rank 2: boom on rank 2");
  EXPECT_EQ(r["cases"][3]["status"], "skip");
  EXPECT_EQ(r["cases"][3]["message"], "needs 4 ranks but the world has 3: run with --ranks 4");
  EXPECT_EQ(r["cases"][4]["status"], "fail");
}

// Processes that time the same case at different speeds still time batches of the same size,
// each at least the minimum sample: the largest any rank needs.
TEST_F(RunCommandTest, EveryProcessOfACaseTimesBatchesOfTheSameSize) {
  const std::string file =
      write("p.yaml",
            "suite: p\n"
            "cases:\n"
            "  - {name: uneven, kind: probe, value: 1, ranks: 3, rank_iter_s: [1e-4, 1e-6, 1e-5],"
            " perf: {warmup: 1, iters: 2, min_sample_time: 1ms}}\n");
  {
    const std::lock_guard<std::mutex> lock(probe_counters().mutex);
    probe_counters().batches.clear();
  }
  constexpr int kProcesses = 3;
  comm::ThreadsWorld world(kProcesses);
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  for (int r = 0; r < kProcesses; ++r) comms.push_back(world.communicator(r));
  std::vector<std::ostringstream> outs(kProcesses), errs(kProcesses);
  std::vector<int> codes(kProcesses, -1);
  std::vector<std::thread> processes;
  for (int r = 0; r < kProcesses; ++r) {
    processes.emplace_back([&, r] {
      comm::Communicator& c = *comms[static_cast<std::size_t>(r)];
      ProcessBackend backend("mpi", c, c, nullptr, versions_info("Test MPI 1.0"));
      codes[static_cast<std::size_t>(r)] =
          run_command(options({file}), backend, test_kinds(), outs[static_cast<std::size_t>(r)],
                      errs[static_cast<std::size_t>(r)]);
    });
  }
  for (std::thread& p : processes) p.join();
  ASSERT_EQ(codes[0], 0) << errs[0].str();
  std::map<int, std::vector<std::int64_t>> batches;
  {
    const std::lock_guard<std::mutex> lock(probe_counters().mutex);
    batches = probe_counters().batches;
  }
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1], batches[0]);
  EXPECT_EQ(batches[2], batches[0]);
  const nlohmann::json row = results()["cases"][0];
  const std::int64_t calls = row["metrics"]["time_s"]["calls_per_sample"].get<std::int64_t>();
  EXPECT_EQ(batches[0].back(), calls);
  // Rank 0 alone would have stopped at about 10 calls; rank 1 needs 1000 to reach 1 ms.
  EXPECT_GE(calls, 1000);
  // Each process reports its own per-call time; the leader's is rank 0's.
  EXPECT_NEAR(row["metrics"]["time_s"]["median"].get<double>(), 1e-4, 1e-15);
}

#ifdef MESHGATE_HAVE_NCCL
// The nccl backend of a runner without MPI: one rank in this process. Without a GPU every case
// skips with the reason; a request for more ranks is refused before anything runs.
TEST_F(RunCommandTest, SingleProcessNcclRunsOneRankAndSkipsWithoutAGpu) {
  RunOptions o = options({write("n.yaml",
                                "suite: n\n"
                                "cases:\n"
                                "  - {name: one, kind: probe, value: 1, expect: 1}\n")});
  o.backend = "nccl";
  o.ranks = 2;
  std::ostringstream refused;
  EXPECT_EQ(make_single_process_nccl_backend(o, refused), nullptr);
  EXPECT_NE(refused.str().find("--ranks 2: this runner was built without MPI"), std::string::npos)
      << refused.str();

  o.ranks = std::nullopt;
  std::ostringstream out, err;
  const std::unique_ptr<RunBackend> backend = make_single_process_nccl_backend(o, err);
  if (comm::cuda_device_count() > 0) {
    ASSERT_NE(backend, nullptr) << err.str();
    EXPECT_EQ(run_command(o, *backend, test_kinds(), out, err), 0) << err.str();
    EXPECT_EQ(results()["run"]["world_size"], 1);
    EXPECT_TRUE(results()["run"]["versions"]["nccl"].is_string());
    EXPECT_EQ(results()["cases"][0]["status"], "pass");
    return;
  }
  ASSERT_NE(backend, nullptr) << err.str();
  EXPECT_EQ(backend->name(), "nccl");
  EXPECT_EQ(run_command(o, *backend, test_kinds(), out, err), 0) << err.str();
  const nlohmann::json r = results();
  EXPECT_EQ(r["run"]["backend"], "nccl");
  EXPECT_EQ(r["run"]["world_size"], 1);
  EXPECT_EQ(r["run"]["versions"]["nccl"], comm::nccl_library_version());  // what would have run
  ASSERT_EQ(r["cases"].size(), 1u);
  EXPECT_EQ(r["cases"][0]["status"], "skip");
  EXPECT_EQ(r["cases"][0]["message"], std::string(kNcclWithoutDevice));
}
#endif

TEST_F(RunCommandTest, ResultsJsonFollowsTheContract) {
  std::ostringstream out, err;
  RunOptions o = options({write("s.yaml", kFourCases)});
  o.filter.case_patterns = {"s/ok", "s/aft*"};
  EXPECT_EQ(run_command(o, test_kinds(), out, err), 1);
  const nlohmann::json r = results();
  EXPECT_EQ(r["schema"], "meshgate.results/1");
  const nlohmann::json& run = r["run"];
  EXPECT_EQ(run["id"], "test-run");
  EXPECT_EQ(run["backend"], "threads");
  EXPECT_EQ(run["world_size"], 1);
  EXPECT_TRUE(run["started"].get<std::string>().ends_with("Z"));
  EXPECT_EQ(run["started"].get<std::string>().size(), 20u);
  EXPECT_TRUE(run["commit"].is_string());
  EXPECT_TRUE(run["dirty"].is_boolean());
  for (const char* key : {"host", "cpu", "cores", "gpus", "driver", "fingerprint"}) {
    EXPECT_TRUE(run["machine"].contains(key)) << key;
  }
  EXPECT_TRUE(run["machine"]["gpus"].is_array());
  for (const auto& gpu : run["machine"]["gpus"]) EXPECT_TRUE(gpu.is_string());
  EXPECT_EQ(run["machine"]["fingerprint"].get<std::string>().size(), 16u);
  // `version --json` describes the same machine, so the driver can name its class up front.
  EXPECT_EQ(nlohmann::json::parse(build_info()["machine"].dump()), run["machine"]);
  EXPECT_TRUE(run["versions"]["meshgate"].is_string());
#ifdef MESHGATE_HAVE_NCCL
  // A CUDA build records its CUDA runtime (e.g. "13.0") even on the threads backend.
  EXPECT_TRUE(run["versions"]["cuda"].is_string());
#else
  EXPECT_EQ(run["machine"]["gpus"], nlohmann::json::array());
  EXPECT_TRUE(run["machine"]["driver"].is_null());
  EXPECT_TRUE(run["versions"]["cuda"].is_null());
#endif
  EXPECT_TRUE(run["versions"]["nccl"].is_null());
  EXPECT_TRUE(run["versions"]["mpi"].is_null());
#ifdef MESHGATE_GEMM_CUDA
  // The cuBLASLt the loader picked, "13.1.0" and its file: known without a GPU.
  EXPECT_TRUE(std::regex_match(run["versions"]["cublaslt"].get<std::string>(),
                               std::regex(R"(\d+\.\d+\.\d+)")));
  EXPECT_NE(run["versions"]["cublaslt_library"].get<std::string>().find("libcublasLt"),
            std::string::npos);
#else
  EXPECT_TRUE(run["versions"]["cublaslt"].is_null());
  EXPECT_TRUE(run["versions"]["cublaslt_library"].is_null());
#endif
  // What the host did to the timings: not pinned, the governor where cpufreq says, the load.
  EXPECT_TRUE(run.contains("cpus"));
  EXPECT_TRUE(run["cpus"].is_null());
  EXPECT_TRUE(run.contains("cpu_governor"));
  EXPECT_TRUE(run["cpu_governor"].is_null() || run["cpu_governor"].is_string());
  ASSERT_TRUE(run["load_average"].is_array());
  EXPECT_EQ(run["load_average"].size(), 3u);

  ASSERT_EQ(r["cases"].size(), 2u);
  const nlohmann::json& ok = r["cases"][0];
  for (const char* key : {"id", "suite", "name", "kind", "tags", "status", "message", "params",
                          "plan", "metrics", "samples", "seconds"}) {
    EXPECT_TRUE(ok.contains(key)) << key;
  }
  EXPECT_EQ(ok["id"], "s/ok");
  EXPECT_EQ(ok["suite"], "s");
  EXPECT_EQ(ok["name"], "ok");
  EXPECT_EQ(ok["kind"], "probe");
  EXPECT_EQ(ok["tags"], nlohmann::json::array({"smoke"}));
  EXPECT_EQ(ok["samples"]["time_s"].size(), 1u);
  EXPECT_EQ(ok["samples"]["time_s"][0].size(), 4u);
  EXPECT_EQ(ok["metrics"]["time_s"]["median"], 1e-3);
  EXPECT_EQ(ok["metrics"]["time_s"]["calls_per_sample"], 1);
  EXPECT_EQ(r["cases"][1]["id"], "s/after");
  EXPECT_EQ(r["cases"][1]["tags"], nlohmann::json::array({"nightly", "smoke"}));
}

TEST_F(RunCommandTest, ACaseKeepsItsStateInTheRunsOwnFolder) {
  RunOptions o = options({write("s.yaml", "suite: s\ncases:\n"
                                          "  - {name: a, kind: probe, value: 1, record_state_dir: true}\n")});
  std::ostringstream out, err;
  ASSERT_EQ(run_command(o, test_kinds(), out, err), 0) << err.str();
  // Under --out, so that --resume of the same folder finds it; made only by a kind that writes.
  EXPECT_EQ(results()["cases"][0]["metrics"]["state_dir"],
            (std::filesystem::path(*o.out_dir) / "case-state").string());
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(*o.out_dir) / "case-state"));
}

TEST_F(RunCommandTest, CpusPinsTheRunnerAndItsRankThreadsAndTheHeaderSaysSo) {
  const std::vector<int> before = allowed_cpus();
  ASSERT_FALSE(before.empty());
  const int cpu = before.front();  // CPU 0 where this process may use it
  RunOptions o = options({write("s.yaml",
                                "suite: s\n"
                                "cases:\n"
                                "  - {name: pinned, kind: probe, value: 1, ranks: 2, "
                                "record_affinity: true}\n")});
  o.cpus = std::vector<int>{cpu};
  std::ostringstream out, err;
  ASSERT_EQ(run_command(o, test_kinds(), out, err), 0) << err.str();
  const nlohmann::json r = results();
  EXPECT_EQ(r["run"]["cpus"], nlohmann::json::array({cpu}));
  EXPECT_EQ(r["cases"][0]["metrics"]["affinity"],
            (nlohmann::json{{"0", {cpu}}, {"1", {cpu}}}));
  // The caller gets its CPUs back when the run is over.
  EXPECT_EQ(allowed_cpus(), before);
}

TEST_F(RunCommandTest, ACpuListThisProcessCannotUseIsUnusableInputNamingTheOption) {
  RunOptions o = options({write("s.yaml", kFourCases)});
  o.cpus = std::vector<int>{CPU_SETSIZE - 1};
  std::ostringstream out, err;
  EXPECT_EQ(run_command(o, test_kinds(), out, err), 2);
  EXPECT_EQ(err.str().rfind("--cpus " + std::to_string(CPU_SETSIZE - 1) +
                                ": not available to this process",
                            0),
            0u)
      << err.str();
  EXPECT_FALSE(fs::exists(dir_ / "out" / "results.json"));
}

TEST_F(RunCommandTest, ResumeKeepsRowsAndRunsTheRest) {
  const std::string file = write("s.yaml", kFourCases);
  fs::create_directories(dir_ / "out");
  std::ofstream(dir_ / "out" / "results.jsonl")
      << nlohmann::json{{"id", "s/crash"}, {"status", "error"}, {"message", "runner crashed"}}
             .dump()
      << "\n";
  std::ostringstream out, err;
  RunOptions o = options({file});
  o.resume = true;
  o.ranks = 16;
  o.progress = true;
  const int runs_before = probe_counters().runs;
  EXPECT_EQ(run_command(o, test_kinds(), out, err), 2);
  EXPECT_EQ(probe_counters().runs - runs_before, 3);
  const nlohmann::json r = results();
  ASSERT_EQ(r["cases"].size(), 4u);
  EXPECT_EQ(r["cases"][1]["id"], "s/crash");
  EXPECT_EQ(r["cases"][1]["message"], "runner crashed");
  EXPECT_EQ(r["cases"][3]["status"], "pass");
  EXPECT_EQ(jsonl().size(), 4u);

  std::vector<nlohmann::json> events;
  std::istringstream lines(out.str());
  for (std::string line; std::getline(lines, line);) events.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(events.size(), 8u);
  EXPECT_EQ(
      events[0],
      (nlohmann::json{{"event", "plan"}, {"total", 3}, {"ids", {"s/ok", "s/after", "s/big"}}}));
  EXPECT_EQ(events[1]["event"], "start");
  EXPECT_EQ(events[1]["id"], "s/ok");
  EXPECT_EQ(events[1]["kind"], "probe");
  EXPECT_EQ(events[1]["index"], 1);
  EXPECT_EQ(events[1]["total"], 3);
  EXPECT_EQ(events[1]["params"], (nlohmann::json{{"value", 1}, {"ranks", 1}}));
  EXPECT_EQ(events[2]["event"], "end");
  EXPECT_EQ(events[2]["status"], "pass");
  EXPECT_TRUE(events[2]["seconds"].is_number());
  EXPECT_EQ(events[4]["status"], "fail");
  EXPECT_EQ(events[7],
            (nlohmann::json{{"event", "done"},
                            {"exit_code", 2},
                            {"counts", {{"pass", 2}, {"fail", 1}, {"error", 1}, {"skip", 0}}}}));
}

TEST_F(RunCommandTest, InputErrorsOfAllFilesStopTheRunWithExitTwo) {
  const std::string a = write("a.yaml", "cases:\n  - {name: x, kind: probe, valeu: 1}\n");
  const std::string b = write("b.yaml", "cases:\n  - {name: y, kind: probe, value: one}\n");
  const std::string c = write("c.yaml", "cases:\n  - {name: z, kind: probe, value: 1");
  std::ostringstream out, err;
  const int runs_before = probe_counters().runs;
  EXPECT_EQ(run_command(options({a, b, c}), test_kinds(), out, err), 2);
  EXPECT_EQ(probe_counters().runs, runs_before);
  const std::string text = err.str();
  EXPECT_NE(text.find("a.yaml:2:28: case 'a/x': key 'valeu': unknown key (did you mean 'value'?)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("b.yaml:2:35: case 'b/y': key 'value': expected an integer, got 'one'"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("c.yaml:2:1: invalid YAML: end of map flow not found"), std::string::npos)
      << text;
  EXPECT_NE(text.find("4 input errors; nothing was run"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "results.json"));
}

TEST_F(RunCommandTest, ExpectedRejectionsOfValidationAreRowsOfTheRun) {
  const std::string file =
      write("r.yaml",
            "suite: r\n"
            "cases:\n"
            "  - {name: rejected, kind: probe, value: 1, invalid: 'no dim cp', expect_error: cp}\n"
            "  - {name: too-big, kind: probe, value: 1, memory: 4096, expect_error: memory}\n"
            "  - {name: ok, kind: probe, value: 1, memory: 512}\n");
  std::ostringstream out, err;
  RunOptions o = options({file});
  o.validation.memory_limit = 1024;
  EXPECT_EQ(run_command(o, test_kinds(), out, err), 0) << err.str();
  const nlohmann::json r = results();
  ASSERT_EQ(r["cases"].size(), 3u);
  for (const auto& row : r["cases"]) EXPECT_EQ(row["status"], "pass") << row.dump();
  EXPECT_EQ(r["cases"][0]["params"], (nlohmann::json{{"rejected_at", "validation"}}));

  // Without the option the second case fits, so its expected rejection never comes.
  std::ostringstream out2, err2;
  o.validation.memory_limit.reset();
  EXPECT_EQ(run_command(o, test_kinds(), out2, err2), 1);
  EXPECT_EQ(results()["cases"][1]["status"], "fail");
}

TEST(CommandLine, MemoryLimitTakesASizeForRunAndList) {
  const Command run = parse_command_line({"run", "c.yaml", "--memory-limit", "64GiB"});
  EXPECT_EQ(std::get<RunOptions>(run).validation.memory_limit, std::int64_t{64} << 30);
  const Command list = parse_command_line({"list", "c.yaml", "--memory-limit=1 MiB"});
  EXPECT_EQ(std::get<ListOptions>(list).validation.memory_limit, std::int64_t{1} << 20);
  EXPECT_THROW(parse_command_line({"run", "c.yaml", "--memory-limit", "8 GB"}), UsageError);
  EXPECT_THROW(parse_command_line({"run", "c.yaml", "--memory-limit", "0"}), UsageError);
}

TEST_F(RunCommandTest, ListPrintsIdsKindsAndTags) {
  const std::string file = write("s.yaml", kFourCases);
  std::ostringstream out, err;
  ListOptions o;
  o.paths = {file};
  o.filter.tags = {"nightly"};
  EXPECT_EQ(list_command(o, test_kinds(), out, err), 0);
  EXPECT_EQ(out.str(), "s/after  probe  nightly,smoke\n");
  std::ostringstream json;
  o.json = true;
  o.filter = {};
  EXPECT_EQ(list_command(o, test_kinds(), json, err), 0);
  const nlohmann::json list = nlohmann::json::parse(json.str());
  ASSERT_EQ(list.size(), 4u);
  EXPECT_EQ(list[0], (nlohmann::json{{"id", "s/ok"},
                                     {"suite", "s"},
                                     {"name", "ok"},
                                     {"kind", "probe"},
                                     {"tags", {"smoke"}},
                                     {"file", file},
                                     {"line", 4},
                                     {"perf", {{"warmup", 1}, {"iters", 4}, {"runs", 9}}}}));
  EXPECT_TRUE(list[1]["perf"].is_null());
}

TEST_F(RunCommandTest, CommitComesFromTheEnvironmentWhenSet) {
  ::setenv("MESHGATE_COMMIT", "0123456789abcdef", 1);
  ::setenv("MESHGATE_DIRTY", "1", 1);
  std::ostringstream out, err;
  RunOptions o = options({write("s.yaml", "cases:\n  - {name: e, kind: echo}\n")});
  EXPECT_EQ(run_command(o, test_kinds(), out, err), 0);
  ::unsetenv("MESHGATE_COMMIT");
  ::unsetenv("MESHGATE_DIRTY");
  const nlohmann::json r = results();
  EXPECT_EQ(r["run"]["commit"], "0123456789abcdef");
  EXPECT_EQ(r["run"]["dirty"], true);
}

TEST_F(RunCommandTest, CaseTimeoutWritesAnErrorRowAndExitsTwo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string file = write("s.yaml",
                                 "cases:\n  - {name: fast, kind: echo}\n  - {name: slow, kind: "
                                 "probe, value: 1, sleep_ms: 5000}\n");
  RunOptions o = options({file});
  o.case_timeout_s = 0.2;
  const auto run_and_time_out = [&] {
    std::ostringstream out, err;
    run_command(o, test_kinds(), out, err);
  };
  EXPECT_EXIT(run_and_time_out(), ::testing::ExitedWithCode(2), "");
  const nlohmann::json r = results();
  ASSERT_EQ(r["cases"].size(), 2u);
  EXPECT_EQ(r["cases"][0]["status"], "pass");
  EXPECT_EQ(r["cases"][1]["status"], "error");
  EXPECT_EQ(r["cases"][1]["message"],
            "timed out after 0.2 s (--case-timeout); the runner stopped here");
  EXPECT_EQ(jsonl().size(), 2u);
}

}  // namespace
}  // namespace meshgate::runner
