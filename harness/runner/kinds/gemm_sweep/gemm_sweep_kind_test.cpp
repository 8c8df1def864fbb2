// The gemm_sweep kind on the CPU with implementations made wrong on purpose, one per failure
// class: each must be caught in its class, with the smallest failing shape the sweep drew and a
// reproduction that fails alike. Also: the same seed gives the same sweep, an interrupted sweep
// resumes from its checkpoint to the same answer, and CUDA implementations skip without a GPU.
#include "kinds/gemm_sweep/gemm_sweep_kind.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "gemm/cpu_gemm.hpp"
#include "gemm/sweep.hpp"
#include "kinds/gemm_sweep/sweep_spec.hpp"
#include "kinds/kind_test_support.hpp"
#include "runner.hpp"

namespace meshgate::runner {
namespace {

namespace g = meshgate::gemm;
namespace fs = std::filesystem;

SweepHooks& hooks() {
  static SweepHooks h;
  return h;
}

std::unique_ptr<PreparedCase> parse_with_hooks(CaseNode& node, bool expect_error) {
  return parse_gemm_sweep_case_with(node, expect_error, hooks());
}

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {
      {"gemm_sweep", &parse_with_hooks, gemm_sweep_case_keys()}};
  return k;
}

CaseRun run_case(const std::string& yaml) {
  PlannedCase planned = plan_one_case(yaml, kinds());
  return execute_case(planned, std::nullopt);
}

// Every CPU configuration the kind can draw, on small shapes.
const std::string kSweep =
    "{name: s, kind: gemm_sweep, seed: 11, count: 120, m: [1, 40], n: [1, 40], k: [1, 400], "
    "dtypes: [float32, float16, bfloat16], epilogues: [bias, relu_bias, gelu_bias], "
    "bias: [true, false], layouts: [nt, nn, tn, tt], x_offsets: [0, 1, 3], "
    "w_offsets: [0, 5], bias_offsets: [0, 1], split_k: [auto, 1, 3], "
    "impls: [cpu_epilogue, cpu_unfused]";

// The correct CPU GEMM on a copy of the problem with only the first `k` terms.
void run_first_terms(g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in,
                     std::int64_t k, g::HostTensor& y) {
  g::GemmProblem q = p;
  q.k = k;
  q.ldx = g::x_ld(p), q.ldw = g::w_ld(p);  // the same element positions as p's
  g::GemmInputs cut{g::HostTensor(p.dtype, g::x_elements(q)),
                    g::HostTensor(p.dtype, g::w_elements(q)), in.bias};
  for (std::int64_t i = 0; i < cut.x.size(); ++i) cut.x.set(i, in.x.get(i));
  for (std::int64_t i = 0; i < cut.w.size(); ++i) cut.w.set(i, in.w.get(i));
  g::run_cpu(impl, q, cut, y);
}

// The wrong implementations, each on the shapes where `wrong_on` holds.
bool drops_tail_on(const g::GemmProblem& p) { return p.k % 5 == 0 && p.k > 10; }
void drops_tail(g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in, g::HostTensor& y) {
  if (drops_tail_on(p)) return run_first_terms(impl, p, in, p.k - 3, y);
  g::run_cpu(impl, p, in, y);
}
bool forgets_bias_on(const g::GemmProblem& p) { return g::has_bias(p.epilogue) && p.n > 20; }
void forgets_bias(g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in,
                  g::HostTensor& y) {
  g::GemmProblem q = p;
  if (forgets_bias_on(p)) q.epilogue = g::Epilogue::none;
  g::run_cpu(impl, q, in, y);
}
bool skips_tile_on(const g::GemmProblem& p) { return p.m > 30; }
void skips_tile(g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in, g::HostTensor& y) {
  g::run_cpu(impl, p, in, y);
  if (!skips_tile_on(p)) return;
  for (std::int64_t r = 24; r < p.m; ++r)  // the last row tile, as if its block never stored
    for (std::int64_t j = 0; j < p.n; ++j) y.set(g::y_index(p, r, j), std::nanf(""));
}
// The last tile of 16 rows is stored one tile up (as with a wrong row offset of a block), so
// rows 16 .. 31 hold rows 0 .. 15's results.
bool misplaces_tile_on(const g::GemmProblem& p) { return p.m >= 32 && p.n > 3; }
void misplaces_tile(g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in,
                    g::HostTensor& y) {
  g::run_cpu(impl, p, in, y);
  if (!misplaces_tile_on(p)) return;
  for (std::int64_t r = 16; r < 32; ++r)
    for (std::int64_t j = 0; j < p.n; ++j)
      y.set(g::y_index(p, r, j), y.get(g::y_index(p, r - 16, j)));
}
// Column 0 keeps its value: with one column there is nothing to drift.
bool drifts_on(const g::GemmProblem& p) { return p.k % 2 == 1 && p.k > 10 && p.n > 1; }
void drifts(g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in, g::HostTensor& y) {
  g::run_cpu(impl, p, in, y);
  if (!drifts_on(p)) return;
  for (std::int64_t r = 0; r < p.m; ++r)
    for (std::int64_t j = 0; j < p.n; ++j) {
      const std::int64_t at = g::y_index(p, r, j);
      y.set(at, y.get(at) * (1.0f + 0.1f * static_cast<float>(j % 3)));
    }
}

class GemmSweepKind : public ::testing::Test {
 protected:
  void TearDown() override { hooks() = SweepHooks{}; }
};

TEST_F(GemmSweepKind, CorrectImplementationsPassEveryConfiguration) {
  const CaseRun r = run_case(kSweep + "}");
  ASSERT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  const nlohmann::json& m = r.outcome.metrics;
  EXPECT_EQ(m["shapes"], 120);
  EXPECT_EQ(m["impl_runs"], 240);
  for (const auto& [name, count] : m["failure_counts"].items()) EXPECT_EQ(count, 0) << name;
  EXPECT_TRUE(m["failing_shapes"].empty());
  EXPECT_EQ(m["tolerated_inexact"], 0);  // exact inputs: every output is bitwise the answer
  EXPECT_GT(m["shapes_per_s"].get<double>(), 0);
}

// The smallest drawn point (by M*N*K, earliest on a tie) where `wrong_on` holds.
SweepPoint smallest_where(const std::string& yaml, bool (*wrong_on)(const g::GemmProblem&)) {
  CaseNode node(YAML::Load(yaml), "t.yaml", "s/s");
  const SweepSpec spec = read_sweep_spec(node);
  std::optional<SweepPoint> best;
  for (std::int64_t i = 0; i < spec.count; ++i) {
    const SweepPoint pt = sweep_point(spec, i);
    if (wrong_on(pt.problem) && (!best || pt.shape.volume() < best->shape.volume())) best = pt;
  }
  EXPECT_TRUE(best.has_value());
  return *best;
}

struct WrongCase {
  const char* failure;
  SweepCpuFunction run;
  bool (*wrong_on)(const g::GemmProblem&);
};

class GemmSweepCatches : public GemmSweepKind, public ::testing::WithParamInterface<WrongCase> {};

TEST_P(GemmSweepCatches, EachWrongImplementationInItsClassWithItsSmallestShape) {
  const WrongCase& w = GetParam();
  hooks().run_cpu = w.run;
  const CaseRun r = run_case(kSweep + "}");
  ASSERT_EQ(r.outcome.status, Status::fail) << r.outcome.message;
  EXPECT_NE(r.outcome.message.find(w.failure), std::string::npos) << r.outcome.message;
  const nlohmann::json& m = r.outcome.metrics;
  for (const auto& [name, count] : m["failure_counts"].items())
    EXPECT_EQ(count.get<std::int64_t>() > 0, name == w.failure) << name << ": " << m.dump();
  const nlohmann::json& smallest = m["failures"][w.failure]["smallest"];
  const SweepPoint expected = smallest_where(kSweep + "}", w.wrong_on);
  EXPECT_EQ(smallest["m"], expected.shape.m);
  EXPECT_EQ(smallest["n"], expected.shape.n);
  EXPECT_EQ(smallest["k"], expected.shape.k);
  EXPECT_NE(smallest["repro"].get<std::string>().find("meshgate-runner run"), std::string::npos);

  // The reproduction alone: one shape, the same class.
  const std::string impl = smallest["impl"].get<std::string>();
  const CaseRun again = run_case(repro_case(expected, g::parse_impl(impl)));
  ASSERT_EQ(again.outcome.status, Status::fail) << again.outcome.message;
  EXPECT_EQ(again.outcome.metrics["shapes"], 1);
  EXPECT_GT(again.outcome.metrics["failure_counts"][w.failure].get<int>(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Classes, GemmSweepCatches,
    ::testing::Values(WrongCase{"k_tail", &drops_tail, &drops_tail_on},
                      WrongCase{"bias_missing", &forgets_bias, &forgets_bias_on},
                      WrongCase{"unwritten", &skips_tile, &skips_tile_on},
                      WrongCase{"misplaced", &misplaces_tile, &misplaces_tile_on},
                      WrongCase{"drift", &drifts, &drifts_on}),
    [](const auto& test) { return std::string(test.param.failure); });

TEST_F(GemmSweepKind, TheSameSeedFindsTheSameAndAnotherSeedDrawsOtherShapes) {
  hooks().run_cpu = &drops_tail;
  const CaseRun a = run_case(kSweep + "}");
  const CaseRun b = run_case(kSweep + "}");
  EXPECT_EQ(a.outcome.metrics["failing_shapes"], b.outcome.metrics["failing_shapes"]);
  EXPECT_EQ(a.outcome.metrics["failure_counts"], b.outcome.metrics["failure_counts"]);
  std::string other = kSweep + "}";
  other.replace(other.find("seed: 11"), 8, "seed: 12");
  const CaseRun c = run_case(other);
  EXPECT_NE(a.outcome.metrics["failing_shapes"], c.outcome.metrics["failing_shapes"]);
}

TEST_F(GemmSweepKind, AnInterruptedSweepResumesFromItsCheckpointToTheSameAnswer) {
  const fs::path dir = fs::temp_directory_path() / ("gemm-sweep-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  hooks().run_cpu = &drops_tail;
  const CaseRun whole = run_case(kSweep + "}");
  const std::string with_checkpoint = kSweep + ", checkpoint: '" + dir.string() + "'}";
  hooks().interrupt_after = 50;
  const CaseRun cut = run_case(with_checkpoint);
  EXPECT_EQ(cut.outcome.status, Status::error) << cut.outcome.message;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  hooks().interrupt_after.reset();
  const CaseRun resumed = run_case(with_checkpoint);
  ASSERT_EQ(resumed.outcome.status, Status::fail) << resumed.outcome.message;
  EXPECT_EQ(resumed.outcome.metrics["resumed_at"], 50);
  EXPECT_EQ(resumed.outcome.metrics["shapes"], 120);
  EXPECT_EQ(resumed.outcome.metrics["failing_shapes"], whole.outcome.metrics["failing_shapes"]);
  EXPECT_EQ(resumed.outcome.metrics["failures"], whole.outcome.metrics["failures"]);
  EXPECT_TRUE(fs::is_empty(dir));  // a finished sweep leaves no checkpoint behind
  fs::remove_all(dir);
}

TEST_F(GemmSweepKind, WithoutACheckpointKeyTheRunsOwnStateFolderKeepsTheProgress) {
  const fs::path state =
      fs::temp_directory_path() / ("gemm-sweep-state-" + std::to_string(::getpid()));
  fs::remove_all(state);
  hooks().run_cpu = &drops_tail;
  const CaseRun whole = run_case(kSweep + "}");
  const auto run_in_state = [&] {
    PlannedCase planned = plan_one_case(kSweep + "}", kinds());
    planned.state_dir = state.string();  // what the runner gives a case: <out>/case-state
    return execute_case(planned, std::nullopt);
  };
  hooks().interrupt_after = 40;
  EXPECT_EQ(run_in_state().outcome.status, Status::error);
  EXPECT_EQ(std::distance(fs::directory_iterator(state), fs::directory_iterator()), 1);
  hooks().interrupt_after.reset();
  const CaseRun resumed = run_in_state();
  ASSERT_EQ(resumed.outcome.status, Status::fail) << resumed.outcome.message;
  EXPECT_EQ(resumed.outcome.metrics["resumed_at"], 40);
  EXPECT_EQ(resumed.outcome.metrics["failing_shapes"], whole.outcome.metrics["failing_shapes"]);
  EXPECT_FALSE(fs::exists(state));  // nothing is left in the run's folder once the case is done
}

TEST_F(GemmSweepKind, CublasLtImplementationsSkipWithoutAGpu) {
  if (g::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  const CaseRun r =
      run_case("{name: s, kind: gemm_sweep, count: 3, impls: [cpu_epilogue, lt_epilogue]}");
  EXPECT_EQ(r.outcome.status, Status::skip);
  EXPECT_FALSE(r.outcome.message.empty());
}

TEST_F(GemmSweepKind, BadKeysAreNamed) {
  EXPECT_NE(case_input_error("{name: s, kind: gemm_sweep, mode: uniform}", kinds()).find("count"),
            std::string::npos);
  EXPECT_NE(case_input_error("{name: s, kind: gemm_sweep, count: 2, m: [5, 2]}", kinds())
                .find("'m'"),
            std::string::npos);
  EXPECT_NE(case_input_error("{name: s, kind: gemm_sweep, count: 2, mode: skinny}", kinds())
                .find("mode"),
            std::string::npos);
  EXPECT_NE(case_input_error("{name: s, kind: gemm_sweep, shapes: [[2, 3, 4]], "
                             "dtypes: [float32, float16]}",
                             kinds())
                .find("shapes"),
            std::string::npos);
  EXPECT_NE(case_input_error("{name: s, kind: gemm_sweep, count: 2, impls: [cpu_gemm]}", kinds())
                .find("impls"),
            std::string::npos);
}

}  // namespace
}  // namespace meshgate::runner
