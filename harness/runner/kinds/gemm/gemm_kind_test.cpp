// The gemm kind on the CPU with implementations made wrong, slow or drifting on purpose: a
// wrong answer is a `fail`, a slower fused path raises its flag, and numerics that drift within
// the tolerance change the output's fingerprint and are reported as drift.
#include "kinds/gemm/gemm_kind.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "case_file.hpp"
#include "external_impl.hpp"
#include "gemm/cpu_gemm.hpp"
#include "gemm/reference.hpp"
#include "isolation.hpp"
#include "runner.hpp"
#include "validate.hpp"
#include "kinds/kind_test_support.hpp"

namespace meshgate::runner {
namespace {

namespace g = meshgate::gemm;

// What the kind under test runs for its CPU implementations.
CpuGemmFunction& cpu_function() {
  static CpuGemmFunction f = &g::run_cpu;
  return f;
}

std::unique_ptr<PreparedCase> parse_with_test_function(CaseNode& node, bool expect_error) {
  return parse_gemm_case_with(node, expect_error, cpu_function());
}

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {{"gemm", &parse_with_test_function, gemm_case_keys()}};
  return k;
}

PlannedCases plan(const std::string& case_yaml) { return plan_case(case_yaml, kinds()); }

CaseRun run_case(const std::string& case_yaml) {
  PlannedCases planned = plan(case_yaml);
  EXPECT_TRUE(planned.errors.empty()) << planned.errors.front();
  EXPECT_EQ(planned.cases.size(), 1u);
  return execute_case(planned.cases.at(0), std::nullopt);
}

class GemmKind : public ::testing::Test {
 protected:
  void TearDown() override { cpu_function() = &g::run_cpu; }
};

constexpr const char* kSmall =
    "{name: c, kind: gemm, m: 24, n: 16, k: 32, dtype: float32, epilogue: relu_bias";

TEST_F(GemmKind, CorrectImplementationsPassWithFingerprints) {
  const CaseRun r = run_case(std::string(kSmall) + "}");
  EXPECT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  const nlohmann::json& impls = r.outcome.metrics["impls"];
  ASSERT_EQ(impls.size(), 4u);
  for (const auto& [name, entry] : impls.items()) {
    EXPECT_EQ(entry["fingerprint"].get<std::string>().size(), 16u) << name;
    EXPECT_TRUE(entry.contains("ulp_vs_reference")) << name;
  }
  EXPECT_EQ(impls["cpu_reference"]["ulp_vs_reference"]["max"], 0);
  EXPECT_NE(r.outcome.metrics["numerics_env"].get<std::string>().find("cpu: "), std::string::npos);
}

TEST_F(GemmKind, AWrongImplementationFails) {
  cpu_function() = [](g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in,
                      g::HostTensor& y) {
    g::run_cpu(impl, p, in, y);
    if (impl == g::Impl::cpu_unfused) y.set(g::y_index(p, 5, 3), y.get(g::y_index(p, 5, 3)) + 0.5f);
  };
  const CaseRun r = run_case(std::string(kSmall) + "}");
  EXPECT_EQ(r.outcome.status, Status::fail);
  EXPECT_NE(r.outcome.message.find("cpu_unfused vs fp64 reference"), std::string::npos)
      << r.outcome.message;
  EXPECT_NE(r.outcome.message.find("Y[5,3]"), std::string::npos) << r.outcome.message;
  EXPECT_FALSE(r.outcome.metrics["impls"]["cpu_unfused"]["ok"].get<bool>());
  EXPECT_TRUE(r.outcome.metrics["impls"]["cpu_epilogue"]["ok"].get<bool>());
}

TEST_F(GemmKind, ASlowerFusedPathRaisesItsFlag) {
  cpu_function() = [](g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in,
                      g::HostTensor& y) {
    if (impl == g::Impl::cpu_epilogue) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    g::run_cpu(impl, p, in, y);
  };
  const CaseRun r = run_case(std::string(kSmall) +
                             ", impls: [cpu_epilogue, cpu_unfused], perf: {warmup: 1, iters: 3, "
                             "min_sample_time: 1ms}}");
  EXPECT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  const nlohmann::json& m = r.outcome.metrics;
  EXPECT_GT(m["fused_vs_best_alternative"].get<double>(), 1.05);
  EXPECT_GT(m["fused_vs_best_alternative_cold"].get<double>(), 1.05);
  EXPECT_EQ(m["fused_executed"], "cpu_epilogue");
  ASSERT_FALSE(m["flags"].empty());
  EXPECT_NE(m["flags"][0].get<std::string>().find("perf: cpu_epilogue is"), std::string::npos)
      << m["flags"];
  // The runner's samples time the same fused implementation by the same method.
  ASSERT_EQ(r.samples["time_s"][0].size(), 3u);
  EXPECT_GT(r.samples["time_s"][0][0].get<double>(), 3e-3);
  // A call longer than the minimum sample time is a sample of its own; the small unslowed
  // GEMM is timed in batches of many calls, each sample the time of one.
  EXPECT_EQ(m["impls"]["cpu_epilogue"]["calls_per_sample"], 1);
  EXPECT_EQ(m["time_s"]["calls_per_sample"], 1);
  EXPECT_GT(m["impls"]["cpu_unfused"]["calls_per_sample"].get<std::int64_t>(), 1);
  EXPECT_LT(m["impls"]["cpu_unfused"]["time_s"].get<double>(), 1e-3);
}

// Without a fused implementation the runner's samples time the first one listed, but never
// the fp64 reference, which measure_all leaves out as no contender.
TEST_F(GemmKind, TheRunnersSamplesNeverTimeTheReference) {
  cpu_function() = [](g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in,
                      g::HostTensor& y) {
    if (impl == g::Impl::cpu_unfused) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    g::run_cpu(impl, p, in, y);
  };
  const CaseRun r = run_case(std::string(kSmall) +
                             ", impls: [cpu_reference, cpu_unfused], perf: {warmup: 0, iters: 2}}");
  EXPECT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  ASSERT_EQ(r.samples["time_s"][0].size(), 2u);
  for (const nlohmann::json& t : r.samples["time_s"][0]) EXPECT_GT(t.get<double>(), 3e-3);
  EXPECT_FALSE(r.outcome.metrics["impls"]["cpu_reference"].contains("time_s"));
}

// The kind times every implementation with the warm-up and iterations of RunContext::perf(),
// as the other kinds do, not with counts of its own reading of the case.
TEST_F(GemmKind, TimesWithTheWarmupAndIterationsOfItsRunContext) {
  std::map<g::Impl, int> calls;
  cpu_function() = [&calls](g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in,
                            g::HostTensor& y) {
    ++calls[impl];
    g::run_cpu(impl, p, in, y);
  };
  PlannedCases planned = plan(std::string(kSmall) +
                              ", impls: [cpu_epilogue, cpu_unfused], perf: {warmup: 1, iters: 3}}");
  ASSERT_EQ(planned.cases.size(), 1u);
  // A minimum sample time of 0: every sample one call, so that the calls can be counted.
  planned.cases[0].perf = PerfSpec{2, 5, 1, 0.0};
  const CaseRun r = execute_case(planned.cases[0], std::nullopt);
  EXPECT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  // One checked run, then warm-up and iterations hot and again cold.
  EXPECT_EQ(calls[g::Impl::cpu_unfused], 1 + 2 * (2 + 5));
  // The runner's samples of the fused implementation come on top, with the same counts.
  EXPECT_EQ(calls[g::Impl::cpu_epilogue], 1 + 2 * (2 + 5) + (2 + 5));
  ASSERT_EQ(r.samples["time_s"][0].size(), 5u);
}

TEST_F(GemmKind, NoSlowdownNoFlag) {
  const CaseRun r = run_case(std::string(kSmall) +
                             ", impls: [cpu_epilogue, cpu_unfused], perf: {warmup: 1, iters: 3}}");
  EXPECT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  EXPECT_TRUE(r.outcome.metrics["fused_vs_best_alternative"].is_number());
}

// PyTorch #180875 emulated: split-K with bf16 partial sums passes the tolerance, and the drift
// against the pinned configuration is what reports it.
TEST_F(GemmKind, SplitKDriftWithinToleranceChangesTheFingerprint) {
  const CaseRun r = run_case(
      "{name: c, kind: gemm, m: 32, n: 48, k: 2048, dtype: bfloat16, epilogue: bias, "
      "impls: [cpu_epilogue, cpu_beta_bias], workspace: [0, 1MiB], split_k: [auto, 8], "
      "split_k_partials: bfloat16}");
  EXPECT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  const nlohmann::json& m = r.outcome.metrics;
  EXPECT_EQ(m["pinned_config"], "workspace=0B split_k=auto");
  ASSERT_EQ(m["configs"].size(), 3u);
  const std::string pinned = m["impls"]["cpu_epilogue"]["fingerprint"];
  for (const nlohmann::json& config : m["configs"]) {
    const std::string label = config["label"];
    const std::string fp = config["impls"]["cpu_epilogue"]["fingerprint"];
    const bool split = label.find("split_k=8") != std::string::npos;
    // The workspace means nothing to the CPU path: only split-K moves its bits.
    EXPECT_EQ(fp != pinned, split) << label;
    EXPECT_TRUE(config["impls"]["cpu_epilogue"]["ok"].get<bool>()) << label;
  }
  ASSERT_TRUE(m["drift"].contains("cpu_epilogue"));
  EXPECT_EQ(m["drift"]["cpu_epilogue"]["configs"].size(), 2u);
  EXPECT_GE(m["drift"]["cpu_epilogue"]["max_ulp_vs_pinned"].get<std::uint64_t>(), 1u);
  EXPECT_NE(r.outcome.message.find("drift: "), std::string::npos) << r.outcome.message;
  bool plan_names_config = false;
  for (const std::string& line : r.outcome.plan)
    plan_names_config |= line.rfind("[workspace=1MiB split_k=8] ", 0) == 0;
  EXPECT_TRUE(plan_names_config);
}

// cuBLASLt may take no algorithm with the split asked for (on an H100 none took split_k 4 or 8
// of the drift cases): that is flagged, or the drift check would pass for want of a split.
// Another implementation's answers (docs/impl-protocol.md, gemm) go through the same checks as
// meshgate's own: an output computed right passes, a wrong element fails naming it, and an
// answer that is not the protocol's is an ImplFailure.
class GemmObservables : public ::testing::Test {
 protected:
  // A bf16 relu_bias case with a padded ldy, offsets and a batch, so that the request's views
  // and Y as stored are exercised.
  static constexpr const char* kCase =
      "{name: c, kind: gemm, m: 9, n: 6, k: 12, dtype: bfloat16, epilogue: relu_bias, "
      "layout: tn, ldy: 8, x_offset: 1, bias_offset: 2, batch: 2}";

  void SetUp() override {
    planned_ = plan_one_case(kCase, kinds());
    dir_ = std::make_unique<ScratchDir>(std::filesystem::temp_directory_path(),
                                        "meshgate-gemm-observables-" + std::to_string(::getpid()));
    std::string why;
    const std::optional<nlohmann::json> request = planned_.prepared->impl_request(dir_->path(), why);
    ASSERT_TRUE(request) << why;
    request_ = *request;
    p_.m = 9, p_.n = 6, p_.k = 12, p_.dtype = g::DType::bf16, p_.epilogue = g::Epilogue::relu_bias;
    p_.layout = g::GemmLayout::tn, p_.ldy = 8, p_.x_offset = 1, p_.bias_offset = 2, p_.batch = 2;
  }

  // Y as meshgate's cpu_epilogue computes it, as stored ([batch, m, ldy]).
  g::HostTensor right_output() const {
    g::HostTensor y(p_.dtype, g::y_elements(p_));
    y.fill_nan();
    g::run_cpu(g::Impl::cpu_epilogue, p_, g::make_inputs(p_), y);
    return y;
  }

  nlohmann::json write(const std::string& name, const g::HostTensor& y,
                       std::vector<std::int64_t> shape = {}) const {
    if (shape.empty()) shape = {p_.batch, p_.m, g::y_ld(p_)};
    return write_tensor_file(dir_->path() / (name + ".bin"), "bfloat16", shape, y.data(),
                             y.bytes());
  }

  static nlohmann::json answer(const nlohmann::json& output, bool fused = true) {
    return {{"output", output}, {"fused", fused}, {"path", "test path"}};
  }

  Outcome check(const nlohmann::json& observables) {
    return planned_.prepared->check_observables(observables, dir_->path());
  }

  PlannedCase planned_;
  std::unique_ptr<ScratchDir> dir_;
  nlohmann::json request_;
  g::GemmProblem p_;
};

TEST_F(GemmObservables, TheRequestCarriesTheStoredInputsAndTheirViews) {
  EXPECT_EQ(request_["m"], 9);
  EXPECT_EQ(request_["layout"], "tn");
  EXPECT_EQ(request_["ldy"], 8);
  EXPECT_EQ(request_["device"], "cpu");
  const g::GemmInputs in = g::make_inputs(p_);
  const TensorFile x = read_tensor_file(request_["inputs"]["x"], dir_->path(), "x");
  ASSERT_EQ(x.bytes.size(), in.x.bytes());
  EXPECT_EQ(std::memcmp(x.bytes.data(), in.x.data(), in.x.bytes()), 0);
  // X is 't': stored [K, M] per batch, after the offset.
  EXPECT_EQ(request_["views"]["x"],
            (nlohmann::json{{"offset", 1}, {"shape", {2, 12, 9}}, {"stride", {108, 9, 1}}}));
  EXPECT_EQ(request_["views"]["w"],
            (nlohmann::json{{"offset", 0}, {"shape", {2, 12, 6}}, {"stride", {72, 6, 1}}}));
  EXPECT_EQ(request_["views"]["bias"],
            (nlohmann::json{{"offset", 2}, {"shape", {6}}, {"stride", {1}}}));
  EXPECT_EQ(read_tensor_file(request_["inputs"]["bias"], dir_->path(), "bias").shape,
            std::vector<std::int64_t>{8});
}

TEST_F(GemmObservables, RightOutputsPassWithTheMetricsOfMeshgatesOwn) {
  const g::HostTensor y = right_output();
  const Outcome o = check({{"impls",
                            {{"fused_one", answer(write("a", y))},
                             {"unfused_one", answer(write("b", y), false)}}},
                           {"numerics_env", "test env"}});
  EXPECT_EQ(o.status, Status::pass) << o.message;
  const nlohmann::json& impls = o.metrics["impls"];
  ASSERT_EQ(impls.size(), 2u);
  EXPECT_EQ(impls["fused_one"]["fingerprint"], g::fingerprint(p_, y));
  EXPECT_TRUE(impls["fused_one"]["fused"].get<bool>());
  EXPECT_FALSE(impls["unfused_one"]["fused"].get<bool>());
  EXPECT_EQ(impls["unfused_one"]["executed"], "test path");
  EXPECT_TRUE(impls["fused_one"].contains("ulp_vs_reference"));
  EXPECT_TRUE(o.metrics["pairs"]["fused_one/unfused_one"]["bitwise_equal"].get<bool>());
  EXPECT_EQ(o.metrics["numerics_env"], "test env");
  EXPECT_EQ(o.metrics["tolerance"]["atol"], g::tolerance_for(p_).atol);
}

TEST_F(GemmObservables, AWrongElementFailsNamingIt) {
  g::HostTensor wrong = right_output();
  const std::int64_t at = g::y_index(p_, 13, 4);  // batch 1, row 4
  wrong.set(at, wrong.get(at) + 1.0f);
  const Outcome o = check({{"impls",
                            {{"right", answer(write("a", right_output()))},
                             {"wrong", answer(write("b", wrong))}}}});
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(o.message.find("wrong vs fp64 reference"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("right/wrong drift"), std::string::npos) << o.message;
  EXPECT_TRUE(o.metrics["impls"]["right"]["ok"].get<bool>());
  EXPECT_FALSE(o.metrics["impls"]["wrong"]["ok"].get<bool>());
}

TEST_F(GemmObservables, PaddingOfYIsNeverRead) {
  g::HostTensor y = right_output();
  for (std::int64_t row = 0; row < g::total_rows(p_); ++row)
    for (std::int64_t j = p_.n; j < g::y_ld(p_); ++j) y.set(row * g::y_ld(p_) + j, 12345.0f);
  const Outcome o = check({{"impls", {{"a", answer(write("a", y))}}}});
  EXPECT_EQ(o.status, Status::pass) << o.message;
}

TEST_F(GemmObservables, AnswersOutsideTheProtocolAreImplFailures) {
  const g::HostTensor y = right_output();
  const nlohmann::json good = write("good", y);
  const auto fails = [&](const nlohmann::json& observables, const std::string& says) {
    try {
      check(observables);
      ADD_FAILURE() << "no ImplFailure for " << observables.dump();
    } catch (const ImplFailure& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  fails(nlohmann::json::object(), "without a non-empty object 'impls'");
  fails({{"impls", nlohmann::json::object()}}, "without a non-empty object 'impls'");
  fails({{"impls", {{"a", {{"output", good}, {"fused", "yes"}, {"path", "p"}}}}}},
        "without {output: TENSOR, fused: bool, path: string}");
  fails({{"impls", {{"a/b", answer(good)}}}}, "has no '/'");
  // Packed [batch, m, n] is not Y as stored when ldy pads it.
  g::HostTensor packed(p_.dtype, p_.batch * p_.m * p_.n);
  fails({{"impls", {{"a", answer(write("packed", packed, {p_.batch, p_.m, p_.n}))}}}},
        "with shape [2,9,6]");
  nlohmann::json as_f16 = good;
  as_f16["dtype"] = "float16";
  fails({{"impls", {{"a", answer(as_f16)}}}}, "as float16");
  nlohmann::json too_long = good;
  too_long["shape"] = {p_.batch, p_.m + 1, g::y_ld(p_)};
  fails({{"impls", {{"a", answer(too_long)}}}}, "bytes where its shape and dtype make");
  nlohmann::json outside = good;
  outside["path"] = "/etc/hostname";
  fails({{"impls", {{"a", answer(outside)}}}}, "outside the case's dir");
  fails({{"impls", {{"a", answer(good)}}}, {"numerics_env", 3}}, "'numerics_env'");
}

TEST_F(GemmKind, ACaseOfSeveralConfigurationsIsNotHandedOver) {
  PlannedCase planned = plan_one_case(
      "{name: c, kind: gemm, m: 4, n: 4, k: 4, dtype: float32, epilogue: bias, "
      "split_k: [auto, 2]}",
      kinds());
  const ScratchDir dir(std::filesystem::temp_directory_path(),
                       "meshgate-gemm-configs-" + std::to_string(::getpid()));
  std::string why;
  EXPECT_FALSE(planned.prepared->impl_request(dir.path(), why));
  EXPECT_NE(why.find("2 configurations"), std::string::npos) << why;
}

TEST(GemmSplitKFlag, NamesTheRequestsTheLibraryDidNotApply) {
  EXPECT_EQ(split_k_flag({}), "");
  EXPECT_EQ(split_k_flag({{"lt_epilogue", "workspace=32MiB split_k=4", 4, true}}), "");
  EXPECT_EQ(split_k_flag({{"lt_epilogue", "workspace=0B split_k=4", 4, false},
                          {"unfused", "workspace=0B split_k=4", 4, true},
                          {"lt_epilogue", "workspace=32MiB split_k=4", 4, false}}),
            "split-K not applied: lt_epilogue [workspace=0B split_k=4], lt_epilogue "
            "[workspace=32MiB split_k=4] ran the library's own choice (no algorithm took the "
            "split), so these configurations cannot show split-K drift");
}

TEST_F(GemmKind, SameConfigurationsNoDrift) {
  const CaseRun r = run_case(
      "{name: c, kind: gemm, m: 8, n: 8, k: 64, dtype: bfloat16, epilogue: bias, "
      "workspace: [0, 32MiB]}");
  EXPECT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  EXPECT_TRUE(r.outcome.metrics["drift"].empty());
  EXPECT_TRUE(r.outcome.message.empty()) << r.outcome.message;
}

// A case that lists a CUDA implementation is a CUDA case, isolated by default, whatever its
// `device` says (that key only picks the default impls).
TEST_F(GemmKind, CudaImplsAreIsolatedWhateverTheDevice) {
  const auto isolated = [](const std::string& keys) {
    PlannedCases planned =
        plan("{name: c, kind: gemm, m: 4, n: 4, k: 4, dtype: float32, epilogue: bias" + keys + "}");
    EXPECT_TRUE(planned.errors.empty()) << ::testing::PrintToString(planned.errors);
    return planned.cases.at(0).prepared->params()["isolate"].get<bool>();
  };
  EXPECT_FALSE(isolated(""));
  EXPECT_TRUE(isolated(", device: cuda"));
  EXPECT_TRUE(isolated(", impls: [cpu_reference, lt_epilogue]"));
  EXPECT_TRUE(isolated(", device: cpu, impls: [cublas]"));
  EXPECT_FALSE(isolated(", device: cuda, impls: [lt_epilogue], isolate: false"));
}

// An output with no elements is a pass at once however many empty rows it has: the reference
// once picked negative rows to check (an error), after minutes and gigabytes of row lists.
TEST_F(GemmKind, ManyEmptyRowsPassAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  const CaseRun r = run_case(
      "{name: c, kind: gemm, m: 1, n: 0, k: 0, batch: 1000000000000, dtype: float32, "
      "epilogue: bias}");
  EXPECT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  EXPECT_EQ(r.outcome.metrics["impls"]["cpu_epilogue"]["rows_checked"], 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// alpha 1e6 overflows float16 in every implementation and in the reference alike: a pass, with
// the infinities counted and the error statistics kept finite (they were null in JSON).
TEST_F(GemmKind, AnOverflowingOutputThatMatchesTheReferencePasses) {
  const CaseRun r = run_case(
      "{name: c, kind: gemm, m: 4, n: 4, k: 4, dtype: float16, epilogue: relu_bias, "
      "alpha: 1.0e6}");
  EXPECT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  for (const auto& [name, entry] : r.outcome.metrics["impls"].items()) {
    EXPECT_GT(entry["equal_infinities"].get<std::int64_t>(), 0) << name;
    EXPECT_EQ(entry["nonfinite_mismatches"], 0) << name;
    EXPECT_TRUE(entry["max_abs_err"].is_number()) << name << ": " << entry["max_abs_err"];
  }
}

TEST_F(GemmKind, SchemaKeysRunOnTheCpu) {
  const CaseRun r = run_case(
      "{name: c, kind: gemm, m: 9, n: 7, k: 11, dtype: float32, epilogue: gelu_bias, layout: tn, "
      "ldx: 12, ldw: 9, ldy: 8, x_offset: 1, w_offset: 3, batch: 3, tf32: true}");
  EXPECT_EQ(r.outcome.status, Status::pass) << r.outcome.message;
  EXPECT_EQ(r.outcome.metrics["impls"]["cpu_epilogue"]["rows_checked"], 27);
  EXPECT_EQ(r.params["batch"], 3);
  EXPECT_EQ(r.params["tf32"], true);
}

TEST_F(GemmKind, BadSchemaValuesNameTheirKey) {
  const auto error_of = [](const std::string& extra) {
    PlannedCases planned = plan(std::string(kSmall) + extra + "}");
    return planned.errors.empty() ? std::string() : planned.errors.front();
  };
  EXPECT_NE(error_of(", ldy: 4").find("key 'ldy'"), std::string::npos) << error_of(", ldy: 4");
  EXPECT_NE(error_of(", batch: 0").find("key 'batch'"), std::string::npos);
  // Sizes that overflow only together name the key that tipped them over, never a key the
  // case does not have.
  const std::string batch = error_of(", batch: 4611686018427387904");
  EXPECT_NE(batch.find("key 'batch': ValueError: batch x X rows"), std::string::npos) << batch;
  for (const char* offset : {"x_offset", "w_offset", "bias_offset"}) {
    const std::string e = error_of(std::string(", ") + offset + ": 9223372036854775807");
    EXPECT_NE(e.find(std::string("key '") + offset + "': ValueError: gemm " + offset +
                     " = 9223372036854775807 plus the "),
              std::string::npos)
        << e;
  }
  const std::string ldx = error_of(", ldx: 1152921504606846976");
  EXPECT_NE(ldx.find("key 'ldx'"), std::string::npos) << ldx;
  EXPECT_NE(error_of(", split_k: [1, lots]").find("key 'split_k'"), std::string::npos);
  EXPECT_NE(error_of(", workspace: []").find("key 'workspace'"), std::string::npos);
  EXPECT_NE(error_of(", split_k_partials: int8").find("key 'split_k_partials'"), std::string::npos);
  // What cuBLASLt and cuBLAS cannot express is refused when the case is read, not when it runs.
  const auto error_in = [](const std::string& text) {
    PlannedCases planned = plan(text);
    return planned.errors.empty() ? std::string() : planned.errors.front();
  };
  const std::string split = "{name: c, kind: gemm, m: 8, n: 8, k: 64, dtype: bfloat16, "
                            "epilogue: bias, split_k: [1, 4], split_k_partials: float16, impls: ";
  const std::string partials = error_in(split + "[lt_epilogue]}");
  EXPECT_NE(partials.find("key 'split_k_partials'"), std::string::npos) << partials;
  EXPECT_NE(partials.find("no cuBLASLt reduction scheme"), std::string::npos) << partials;
  EXPECT_EQ(error_in(split + "[cpu_epilogue]}"), "");
  const std::string wide = error_in(
      "{name: c, kind: gemm, m: 1, n: 16, k: 32, dtype: bfloat16, epilogue: bias, "
      "ldy: 2147483648, impls: [cublas]}");
  EXPECT_NE(wide.find("key 'impls'"), std::string::npos) << wide;
  EXPECT_NE(wide.find("32-bit"), std::string::npos) << wide;
  // sgemm's 32-bit ints likewise, at the key that does not fit; cpu_reference needs no BLAS.
  const std::string ld = "{name: c, kind: gemm, m: 1, n: 1, k: 4, dtype: float32, epilogue: bias, "
                         "ldw: 2147483648";
  for (const char* impls : {"", ", impls: [cpu_reference, cpu_epilogue]"}) {
    const std::string blas = error_in(ld + impls + "}");
    EXPECT_NE(blas.find("key 'ldw': ValueError: gemm ldw = 2147483648 does not fit the BLAS "
                        "library's 32-bit int"),
              std::string::npos)
        << blas;
  }
  EXPECT_EQ(error_in(ld + ", impls: [cpu_reference]}"), "");
  // A finite alpha that float32 cannot hold is named as written, not as the infinity it became.
  const std::string alpha = error_of(", alpha: 1.0e39");
  EXPECT_NE(alpha.find("key 'alpha': ValueError: gemm alpha = 1e+39 is outside float32's range"),
            std::string::npos)
      << alpha;
  const std::string tf32 = plan(
                               "{name: c, kind: gemm, m: 2, n: 2, k: 2, dtype: bfloat16, "
                               "epilogue: bias, tf32: true}")
                               .errors.front();
  EXPECT_NE(tf32.find("key 'tf32'"), std::string::npos) << tf32;
}

// Resident and peak resident bytes of this process (VmRSS and VmHWM of /proc/self/status).
std::pair<double, double> resident_bytes() {
  std::ifstream status("/proc/self/status");
  double rss = 0, peak = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) rss = 1024.0 * std::stod(line.substr(6));
    if (line.rfind("VmHWM:", 0) == 0) peak = 1024.0 * std::stod(line.substr(6));
  }
  return {rss, peak};
}

// The estimate is an upper bound of what a run adds to the process's peak: it once left out
// the fp32 copies of 16-bit inputs, the reference's fp32 op(W) and cpu_reference's whole fp64
// result, and fell short by a factor of about three for a wide bf16 GEMV; a tall output of one
// column needs the reference's per-row bookkeeping counted as well.
TEST_F(GemmKind, MemoryEstimateBoundsThePeakOfARun) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory and quarantine grow the resident size with every "
                  "allocation; the estimate bounds what the case allocates, measured unsanitized";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const std::string shape : {"m: 1, n: 1024, k: 16384, dtype: bfloat16",
                                  "m: 8388608, n: 1, k: 0, dtype: float32",
                                  "m: 2048, n: 2048, k: 16, dtype: float16, split_k: [1, 4]"}) {
    const auto run_and_measure = [&] {
      // OpenBLAS's buffers and the kind's first-use allocations are no part of a case.
      run_case("{name: warm, kind: gemm, m: 2, n: 2, k: 2, dtype: bfloat16, epilogue: bias}");
      PlannedCases planned = plan("{name: c, kind: gemm, epilogue: bias, " + shape + "}");
      const double estimate = planned.cases.at(0).prepared->memory_estimate().bytes;
      const double before = resident_bytes().first;
      execute_case(planned.cases.at(0), std::nullopt);
      const double added = resident_bytes().second - before;
      std::fprintf(stderr, "peak grew by %.0f MiB, estimate %.0f MiB\n", added / (1 << 20),
                   estimate / (1 << 20));
      std::exit(added <= estimate ? 0 : 1);
    };
    EXPECT_EXIT(run_and_measure(), ::testing::ExitedWithCode(0), "") << shape;
  }
}

TEST_F(GemmKind, MemoryEstimateNamesTheKeyOfItsLargestPart) {
  const auto key_of = [](const std::string& sizes) {
    PlannedCases planned = plan(
        "{name: c, kind: gemm, dtype: float32, epilogue: bias, impls: "
        "[cpu_epilogue], " +
        sizes + "}");
    EXPECT_EQ(planned.cases.size(), 1u) << ::testing::PrintToString(planned.errors);
    return planned.cases.empty() ? std::string()
                                 : planned.cases.front().prepared->memory_estimate().key;
  };
  EXPECT_EQ(key_of("m: 4, n: 64, k: 4096"), "k");
  EXPECT_EQ(key_of("m: 100000, n: 8, k: 8"), "m");
  EXPECT_EQ(key_of("m: 4, n: 4, k: 4, batch: 100000"), "batch");
  EXPECT_EQ(key_of("m: 4, n: 4, k: 4, ldy: 1000000"), "ldy");
  EXPECT_EQ(key_of("m: 4, n: 4, k: 4, x_offset: 1099511627"), "x_offset");
  EXPECT_EQ(key_of("m: 4, n: 4, k: 4, bias_offset: 1099511627"), "bias_offset");
  // Over the limit, the rejection sits at that key, not at the largest size.
  const std::vector<std::string> errors =
      plan(
          "{name: c, kind: gemm, dtype: float32, epilogue: bias, m: 64, n: 64, k: 64, "
          "bias_offset: 4398046511104}")
          .errors;
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("key 'bias_offset': needs an estimated 16 TiB"), std::string::npos)
      << errors[0];
}

// The isolation mechanism: a child that dies from a signal is reported with the signal and
// what it wrote to stderr; the parent carries on.
TEST(Isolation, AChildKilledBySignalIsDescribed) {
  const std::string err = ::testing::TempDir() + "isolation-stderr.txt";
  const ChildExit crashed =
      run_child({"/bin/sh", "-c", "echo device fault >&2; kill -SEGV $$"}, {}, err);
  EXPECT_FALSE(crashed.exited());
  EXPECT_EQ(crashed.signal, 11);
  EXPECT_NE(crashed.describe().find("killed by signal 11"), std::string::npos)
      << crashed.describe();
  EXPECT_EQ(crashed.stderr_tail, "device fault");
  const ChildExit ok = run_child({"/bin/sh", "-c", "test \"$MESHGATE_ISOLATED_CHILD\" = 1"},
                                 {"MESHGATE_ISOLATED_CHILD=1"}, err);
  EXPECT_TRUE(ok.exited());
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
}

}  // namespace
}  // namespace meshgate::runner
