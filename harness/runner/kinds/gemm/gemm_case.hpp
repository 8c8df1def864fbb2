#pragma once
// kind: gemm — bias-fused GEMM implementations against the fp64 reference and each other
// (docs/kinds.md, GEMM: Correctness, Performance). Keys: m, n, k, dtype, epilogue, layout, impls,
// device, alpha, bias_offset, x_offset, w_offset, ldx, ldw, ldy, batch, tf32, workspace, split_k,
// split_k_partials, isolate.
//
// `workspace` and `split_k` may be lists: every implementation then runs in every combination
// (a configuration), the first one is the pinned configuration, and an output that is not
// bitwise equal to the pinned one is reported as drift even when it is within tolerance
// (PyTorch #180875, #183923). Every output carries a fingerprint (a hash of its bits) and a
// ulp-distance summary, so a changed fingerprint on the same device and library shows up in
// the deterministic signals.
//
// Timing, with perf, is one method for every implementation, after the same warm-up: hot samples
// are batches of back-to-back calls sized to the case's minimum sample time as the runner sizes
// its own (timing.hpp; CUDA events around the batch on the GPU, a monotonic clock on the CPU)
// and report the time per call; cold samples are one call each, caches flushed before it. The
// fused-vs-best-alternative ratio is the ratio of the hot medians; the runner's samples
// (time_calls) are hot batches of the fused implementation (else of the first listed other than
// cpu_reference) timed by the same function.
//
// Another implementation under test (docs/impl-protocol.md, gemm) gets the stored inputs and
// answers its outputs; the same OutputJudge that checks meshgate's implementations in run()
//
// The kind's files: parse.cpp reads and resolves the case, estimate.cpp estimates its memory,
// run.cpp runs and times meshgate's implementations (executors.hpp), impl.cpp hands the case to
// another implementation, judge.cpp holds the OutputJudge both paths share. gemm_kind.hpp is
// the seam the tests use.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "byte_size.hpp"
#include "case_kind.hpp"
#include "core/error.hpp"
#include "external_impl.hpp"
#include "gemm/cpu_gemm.hpp"
#include "gemm/gemm.hpp"
#include "gemm/numeric.hpp"
#include "gemm/lt_plan.hpp"
#include "gemm/reference.hpp"
#include "isolation.hpp"
#include "kinds/gemm/gemm_kind.hpp"
#include "timing.hpp"
#ifdef MESHGATE_GEMM_CUDA
#include "gemm/cuda_gemm.hpp"
#endif

namespace meshgate::runner::gemm_kind {

namespace g = meshgate::gemm;

// A fused path slower than the best alternative by more than this is flagged (docs/kinds.md, GEMM: Performance).
inline constexpr double kSlowerFusedFlag = 1.05;

// The case's values as written; resolved into a problem while parsing, so that bad values are
// rejected before anything executes.
struct GemmSpec {
  std::int64_t m = 0, n = 0, k = 0;
  std::string dtype, epilogue, layout = "nt", device = "cpu";
  std::optional<std::vector<std::string>> impls;
  double alpha = 1.0;
  std::int64_t bias_offset = 0, x_offset = 0, w_offset = 0;
  std::int64_t ldx = 0, ldw = 0, ldy = 0, batch = 1;
  bool tf32 = false;
  std::vector<std::int64_t> workspaces{32LL << 20};
  std::vector<std::int64_t> split_ks{0};
  std::string split_k_partials = "float32";
  std::optional<bool> isolate;
};

// One combination of the library settings that may change the numerics.
struct Config {
  std::int64_t workspace = 0;
  std::int64_t split_k = 0;
  std::string label;
};

struct Resolved {
  g::GemmProblem problem;  // with the pinned configuration
  g::Device device = g::Device::cpu;
  std::vector<g::Impl> impls;
  std::vector<Config> configs;
};


double seconds_since(std::chrono::steady_clock::time_point start);
double median(std::vector<double> samples);
nlohmann::json comparison_json(const g::Comparison& c);
nlohmann::json ulp_json(const g::UlpSummary& u);
// Ulp distances of y to the reference rounded once to the dtype, over the checked rows: the
// pinned reference configuration every implementation and configuration is measured against.
g::UlpSummary ulp_to_reference(const g::GemmProblem& p, const std::vector<std::int64_t>& rows,
                               const std::vector<double>& ref, const g::HostTensor& y);
// Twice the last-level cache, written before each cold CPU sample: the GEMM starts with none
// of its operands cached. In estimate.cpp, which counts it.
std::size_t cold_flush_bytes();

Status parse_status(const std::string& s);

// Judges the outputs of one problem, whoever computed them (meshgate's implementations in run(),
// another implementation's answers in check_observables()): each output against the fp64
// reference of the checked rows with the dtype's tolerance and row cosine, each output of a
// configuration after the pinned one against the same implementation's pinned output (drift),
// and every pair of implementations of the pinned configuration against each other.
// Runs the implementations of one device on one configuration of the problem (executors.hpp).
class Executor;

class OutputJudge {
 public:
  OutputJudge(const Resolved& r, const g::GemmInputs& inputs)
      : r_(r),
        // All rows up to 2^30 multiply-adds of fp64 reference, evenly spread rows beyond that.
        rows_(g::rows_to_check(r.problem, 1 << 30)),
        ref_(g::reference_rows(r.problem, inputs, rows_)),
        tol_(g::tolerance_for(r.problem)) {}

  // Judges `y`, the output of implementation `name` under configuration `c` (0: the pinned
  // one), with what the run recorded of it in `entry`. The implementations of a configuration
  // come in the same order as those of the pinned one.
  void add(std::size_t c, const std::string& name, nlohmann::json entry,
           const std::string& plan_line, g::HostTensor y);

  // After the last output of configuration `c`.
  void end_config(std::size_t c);

  // Compares the implementations with each other and writes the metrics; returns the flags of
  // numerics, drift and split-K, which the caller may extend before conclude().
  std::vector<std::string> summarize(const std::vector<std::string>& environments);

  // The metrics written by summarize() (perf adds to them before conclude()).
  Outcome& outcome() { return outcome_; }

  // The verdict: fail naming every failure, else pass (saying the first flag when there is one).
  Outcome conclude(std::vector<std::string> flags);

 private:
  const Resolved& r_;
  std::vector<std::int64_t> rows_;
  std::vector<double> ref_;
  g::Tolerance tol_;
  Outcome outcome_;
  std::vector<std::string> failures_;
  std::vector<std::string> names_;    // the implementations, in the order of the pinned outputs
  std::vector<g::HostTensor> pinned_;  // outputs of the pinned configuration, per implementation
  nlohmann::json impls_ = nlohmann::json::object();
  nlohmann::json config_impls_ = nlohmann::json::object();
  nlohmann::json configs_ = nlohmann::json::array();
  nlohmann::json drift_ = nlohmann::json::object();
  std::vector<SplitKRequest> split_k_requests_;
};

class GemmCase final : public PreparedCase {
 public:
  GemmCase(GemmSpec spec, Resolved resolved, bool timed, std::string file, std::string case_id,
           CpuGemmFunction run_cpu);
  ~GemmCase() override;  // run.cpp, where an Executor is a complete type

  nlohmann::json params() const override;

  // Host memory of a run, an upper bound: what lives through the whole run (X, W and the bias
  // as stored, padding, offsets and the batch included; one output per implementation, all
  // kept for the pairwise comparison, and one for timing; the fp64 reference of the checked
  // rows and their list), the largest working set one step holds while it runs (the
  // reference's fp32 op(W) per batch; cpu_reference's whole fp64 result and row list; a BLAS
  // implementation's fp32 copies of X and W and its fp32 product buffers; the cache flush of
  // cold timing) and a fixed overhead. The key named is the one the largest part grows with.
  MemoryEstimate memory_estimate() const override;

  Outcome run(RunContext& ctx) override;

  // Hot calls of timed_impl(), by the same time_hot() that times every implementation in run().
  // An isolated case hands over the samples its child process measured from run() instead.
  double time_calls(RunContext&, std::int64_t calls) override;

  void release() override;

  // The case for another implementation (docs/impl-protocol.md, gemm): the problem's keys and
  // the stored input buffers exactly as meshgate's implementations read them (offsets, padded
  // leading dimensions and batch strides included), each with the strided view of the stored
  // matrix inside it. The layout's transposes are the implementation's to apply.
  std::optional<nlohmann::json> impl_request(const std::filesystem::path& dir,
                                             std::string& why) override;

  // Every output the implementation answered, judged by the same OutputJudge as meshgate's own
  // implementations in run(): against the fp64 reference and against each other.
  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path& dir) override;

 private:
  static Outcome skipped(std::string reason);

  // A case is a CUDA case when its device is cuda or it lists a CUDA implementation.
  bool uses_cuda() const;
  std::string request_device() const { return uses_cuda() ? "cuda" : "cpu"; }

  // CUDA cases run in a child process unless the case says otherwise: a sticky device fault
  // then costs one error row, not the rest of the suite. A case is a CUDA case when it lists a
  // CUDA implementation, whatever its `device` (which only picks the default impls).
  bool isolated() const;

  Outcome run_in_child();

  g::GemmProblem problem_of(const Config& config) const;

  Executor& executor(std::size_t config, g::Device device);

  void release_config(std::size_t config);

  // The fused implementation, else the first listed that is not the fp64 reference (a triple
  // loop, not a contender), else the reference.
  g::Impl timed_impl() const;

  // The case's hot samples of `impl` (perf_): per-call seconds of batches sized as the runner
  // sizes its own, after the untimed warm-up.
  TimedSamples hot_samples(g::Impl impl);

  // The case's cold samples of `impl`: one call each, after as many untimed warm-up calls.
  std::vector<double> cold_samples(g::Impl impl);

  void measure_all(Outcome& outcome, std::vector<std::string>& flags);

  GemmSpec spec_;
  Resolved resolved_;
  // The case has perf: settings. Known when it is read, for the memory estimate; run() gets
  // the settings themselves from its RunContext.
  bool timed_;
  std::optional<PerfSpec> perf_;  // RunContext::perf() of the last run()
  std::string file_;
  std::string case_id_;
  CpuGemmFunction run_cpu_;
  g::GemmInputs inputs_;
  std::map<std::pair<std::size_t, g::Device>, std::unique_ptr<Executor>> executors_;
};

}  // namespace meshgate::runner::gemm_kind
