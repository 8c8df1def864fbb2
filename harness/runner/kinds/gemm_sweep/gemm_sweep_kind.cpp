// kind: gemm_sweep (docs/kinds.md). Each shape of the sweep gets its drawn configuration and
// the exact inputs of gemm/sweep.hpp; every listed implementation runs it into an output filled
// with NaN first, and the output is classified. The case fails when any class has a failure,
// naming the classes with their smallest failing shape.
//
// Resumable: the progress (the next shape and the tally so far) is written about once a second
// to the `checkpoint` folder, or without one to the run's own state folder (RunContext::
// state_dir, under --out); a run that finds a checkpoint of the same sweep continues from it,
// so the case a killed run left without a row (which `--resume` reruns) picks up where it
// stopped. A finished sweep removes its checkpoint.
#include "kinds/gemm_sweep/gemm_sweep_kind.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <utility>

#include "core/error.hpp"
#include "gemm/cpu_gemm.hpp"
#include "gemm/sweep.hpp"
#include "kinds/gemm_sweep/sweep_spec.hpp"
#include "kinds/gemm_sweep/sweep_tally.hpp"
#ifdef MESHGATE_GEMM_CUDA
#include "gemm/cuda_gemm.hpp"
#endif

namespace meshgate::runner {
namespace {

namespace g = meshgate::gemm;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kCheckpointEveryS = 1.0;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool on_cuda(g::Impl i) { return g::device_of(i) == g::Device::cuda; }

// What one implementation produced for one shape.
struct ImplRun {
  g::HostTensor y;
  std::optional<SweepFailure> fallback;  // the requested path was not the one that ran
  bool planned_fallback = false;         // the planner's documented choice (misaligned bias)
  // A forced split-K that no algorithm took within the workspace: counted, not a failure, since
  // a small workspace legitimately rules split-K out.
  bool split_k_unapplied = false;
  nlohmann::json info;                   // the implementation's account, for the failures
};

// The device copy of one shape's inputs, uploaded once for all its CUDA implementations: a
// CudaGemm holds the handles, stream and buffers that would otherwise be made per call.
struct DeviceInputs {
#ifdef MESHGATE_GEMM_CUDA
  std::unique_ptr<g::CudaGemm> gemm;
#endif
};

#ifdef MESHGATE_GEMM_CUDA
nlohmann::json cuda_info_json(const g::CudaRunInfo& info) {
  return {{"plan", g::describe(info)},
          {"executed", g::to_string(info.plan.executed)},
          {"algo_id", info.algo.algo_id},
          {"tile", info.algo.tile_id},
          {"splitk_num", info.algo.splitk_num},
          {"split_k_forced", info.split_k_forced},
          {"reduction_scheme", info.algo.reduction_scheme},
          {"stages", info.algo.stages_id},
          {"workspace_bytes", info.algo.workspace_bytes}};
}

// The cuBLASLt run of `impl`, with what it did instead of what was asked, if anything.
ImplRun run_on_cuda(g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in,
                    DeviceInputs& device) {
  ImplRun r;
  if (!device.gemm) device.gemm = std::make_unique<g::CudaGemm>(p, in);
  device.gemm->fill_output_nan();  // an element this implementation never writes stays NaN
  const g::CudaRunInfo info = device.gemm->run(impl);
  r.y = device.gemm->output();
  r.info = cuda_info_json(info);
  std::string why;
  if (info.plan.executed != impl) {
    // plan_lt's own rule (docs/kinds.md): an unaligned bias takes the unfused path by design.
    if (info.plan.fallback_reason.rfind("bias pointer is", 0) == 0) {
      r.planned_fallback = true;
    } else {
      why = std::string(g::to_string(impl)) + " ran as " +
            std::string(g::to_string(info.plan.executed)) + ": " + info.plan.fallback_reason;
    }
  } else if (info.simple_kernel) {
    why = "cuBLASLt had no algorithm; a plain CUDA kernel ran";
  }
  r.split_k_unapplied = info.ran_gemm && !info.simple_kernel && p.split_k > 0 &&
                        !info.split_k_forced && info.plan.executed != g::Impl::cublas;
  if (!why.empty()) r.fallback = SweepFailure{g::FailureClass::fallback, impl, why, r.info};
  return r;
}
#endif

fs::path checkpoint_file(const SweepSpec& s, const fs::path& dir) {
  std::string name;
  for (const char c : s.case_id) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return dir / ("gemm_sweep-" + name + ".json");
}

class SweepCase : public PreparedCase {
 public:
  SweepCase(SweepSpec spec, SweepHooks hooks) : s_(std::move(spec)), hooks_(std::move(hooks)) {
    if (!hooks_.run_cpu) hooks_.run_cpu = &g::run_cpu;
  }

  MemoryEstimate memory_estimate() const override;
  nlohmann::json params() const override { return sweep_params(s_); }
  Outcome run(RunContext& ctx) override;
  double time_calls(RunContext& ctx, std::int64_t calls) override;

 private:
  std::optional<std::string> skip_reason() const;
  ImplRun run_impl(g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in,
                   DeviceInputs& device) const;
  void run_point(const SweepPoint& pt, SweepTally& tally) const;
  // The tally and next index of a checkpoint of this same sweep in `file`; a fresh start
  // otherwise.
  std::int64_t load_checkpoint(const fs::path& file, SweepTally& tally, double& seconds) const;
  void save_checkpoint(const fs::path& file, std::int64_t next, const SweepTally& tally,
                       double seconds) const;
  Outcome conclude(const SweepTally& tally, double seconds, std::int64_t resumed_at) const;

  SweepSpec s_;
  SweepHooks hooks_;
};

MemoryEstimate SweepCase::memory_estimate() const {
  g::SweepShape largest{s_.space.m.hi, s_.space.n.hi, s_.space.k.hi};
  if (!s_.shapes.empty()) {
    largest = {1, 1, 1};
    for (const g::SweepShape& sh : s_.shapes)
      largest = {std::max(largest.m, sh.m), std::max(largest.n, sh.n), std::max(largest.k, sh.k)};
  }
  const auto most = [](const std::vector<std::int64_t>& v) {
    return static_cast<double>(*std::max_element(v.begin(), v.end()));
  };
  const double m = double(largest.m), n = double(largest.n), k = double(largest.k);
  // fp32 elements at worst: X, W, the bias and Y; the CPU implementations upcast 16-bit
  // inputs to fp32 copies of X and W, hence twice the inputs.
  const double elements = 2 * (m * k + most(s_.x_offsets) + k * n + most(s_.w_offsets)) +
                          n + most(s_.bias_offsets) + 2 * m * n;
  const std::string key = k >= m && k >= n ? "k" : (m >= n ? "m" : "n");
  return {4 * elements, key,
          "the largest shape " + std::to_string(largest.m) + "x" + std::to_string(largest.n) +
              "x" + std::to_string(largest.k) + ": X, W, bias, Y and fp32 copies"};
}

std::optional<std::string> SweepCase::skip_reason() const {
  if (std::none_of(s_.impls.begin(), s_.impls.end(), on_cuda)) return std::nullopt;
#ifdef MESHGATE_GEMM_CUDA
  if (g::cuda_device_count() == 0) return "no CUDA device present";
  return std::nullopt;
#else
  return "meshgate was built without CUDA: configure with -DMESHGATE_CUDA=ON on a machine with "
         "nvcc";
#endif
}

ImplRun SweepCase::run_impl(g::Impl impl, const g::GemmProblem& p, const g::GemmInputs& in,
                            DeviceInputs& device) const {
#ifdef MESHGATE_GEMM_CUDA
  if (on_cuda(impl)) return run_on_cuda(impl, p, in, device);
#else
  (void)device;
#endif
  ImplRun r;
  r.y = g::HostTensor(p.dtype, g::y_elements(p));
  r.y.fill_nan();  // an element the implementation never writes stays NaN: class unwritten
  hooks_.run_cpu(impl, p, in, r.y);
  return r;
}

void SweepCase::run_point(const SweepPoint& pt, SweepTally& tally) const {
  const g::ExactPattern pattern = g::exact_pattern(pt.problem);
  const g::GemmInputs inputs = g::make_exact_inputs(pt.problem, pattern);
  DeviceInputs device;
  for (const g::Impl impl : s_.impls) {
    ImplRun r = run_impl(impl, pt.problem, inputs, device);
    tally.count_run();
    if (r.planned_fallback) tally.count_planned_fallback();
    if (r.split_k_unapplied) tally.count_split_k_unapplied();
    if (r.fallback) tally.add(pt, *r.fallback);
    const g::OutputVerdict v = g::classify_output(pt.problem, pattern, r.y);
    if (!v.ok) {
      std::string detail = v.detail;
      if (v.failure == g::FailureClass::k_tail)
        detail += v.offset > 0 ? " (short by " : " (over by ";
      if (v.failure == g::FailureClass::k_tail)
        detail += std::to_string(static_cast<std::int64_t>(std::abs(v.offset))) + ")";
      tally.add(pt, SweepFailure{v.failure, impl, detail, r.info});
    } else if (v.bad > 0) {
      tally.count_tolerated();
    }
  }
  tally.count_shape();
}

std::int64_t SweepCase::load_checkpoint(const fs::path& file, SweepTally& tally,
                                        double& seconds) const {
  std::ifstream in(file);
  if (!in) return 0;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    // A checkpoint of another sweep (the case was edited since), or of other exact inputs (an
    // older meshgate), is not continued.
    if (j.at("params") != sweep_params(s_)) return 0;
    if (j.value("inputs", 0) != g::kExactInputsVersion) return 0;
    tally = SweepTally::from_json(j.at("tally"));
    seconds = j.at("seconds").get<double>();
    return std::clamp<std::int64_t>(j.at("next").get<std::int64_t>(), 0, s_.count);
  } catch (const std::exception&) {
    tally = SweepTally();  // a torn or foreign file: start over
    seconds = 0;
    return 0;
  }
}

void SweepCase::save_checkpoint(const fs::path& file, std::int64_t next, const SweepTally& tally,
                                double seconds) const {
  fs::create_directories(file.parent_path());
  const fs::path partial = file.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << nlohmann::json{{"params", sweep_params(s_)},
                          {"inputs", g::kExactInputsVersion},
                          {"next", next},
                          {"tally", tally.to_json()},
                          {"seconds", seconds}};
    if (!out) throw Error(ErrorKind::runtime, "cannot write the checkpoint " + partial.string());
  }
  fs::rename(partial, file);  // a kill mid-write leaves the previous checkpoint whole
}

Outcome SweepCase::run(RunContext& ctx) {
  if (const auto why = skip_reason()) {
    Outcome o;
    o.status = Status::skip;
    o.message = *why;
    return o;
  }
  // The case's own folder, else the run's; none when the run has no output folder either.
  const fs::path dir = s_.checkpoint ? fs::path(*s_.checkpoint) : fs::path(ctx.state_dir());
  const std::optional<fs::path> file =
      dir.empty() ? std::nullopt : std::optional<fs::path>(checkpoint_file(s_, dir));
  SweepTally tally;
  double earlier_s = 0;
  const std::int64_t resumed_at = file ? load_checkpoint(*file, tally, earlier_s) : 0;
  const Clock::time_point start = Clock::now();
  Clock::time_point saved = start;
  std::int64_t ran = 0;
  for (std::int64_t i = resumed_at; i < s_.count; ++i) {
    run_point(sweep_point(s_, i), tally);
    ++ran;
    const bool interrupt = hooks_.interrupt_after && ran >= *hooks_.interrupt_after;
    if (file && (interrupt || seconds_since(saved) >= kCheckpointEveryS)) {
      save_checkpoint(*file, i + 1, tally, earlier_s + seconds_since(start));
      saved = Clock::now();
    }
    if (interrupt && i + 1 < s_.count)
      throw std::runtime_error("gemm_sweep interrupted after shape " + std::to_string(i));
  }
  const double seconds = earlier_s + seconds_since(start);
  if (file) {
    fs::remove(*file);
    std::error_code kept;  // the run's state folder goes too when nothing else is left in it
    if (!s_.checkpoint) fs::remove(dir, kept);
  }
  return conclude(tally, seconds, resumed_at);
}

Outcome SweepCase::conclude(const SweepTally& tally, double seconds,
                            std::int64_t resumed_at) const {
  Outcome o;
  tally.write_metrics(o.metrics);
  o.metrics["sweep_s"] = seconds;
  o.metrics["shapes_per_s"] = seconds > 0 ? double(tally.shapes_tried()) / seconds : 0.0;
  o.metrics["resumed_at"] = resumed_at;
  o.plan.push_back("gemm_sweep: " + std::to_string(tally.shapes_tried()) + " shapes (" +
                   std::string(s_.shapes.empty() ? g::to_string(s_.space.mode) : "listed") +
                   ", seed " + std::to_string(s_.seed) + ")");
  if (tally.failures() == 0) return o;
  o.status = Status::fail;
  o.message = "gemm_sweep: " + std::to_string(tally.failures()) + " failure(s) over " +
              std::to_string(tally.shapes_tried()) + " shapes: " + tally.summary();
  return o;
}

double SweepCase::time_calls(RunContext&, std::int64_t calls) {
  // The measured work of a timed sweep case: its first shape on every implementation.
  const SweepPoint pt = sweep_point(s_, 0);
  const g::ExactPattern pattern = g::exact_pattern(pt.problem);
  const g::GemmInputs inputs = g::make_exact_inputs(pt.problem, pattern);
  DeviceInputs device;
  const Clock::time_point start = Clock::now();
  for (std::int64_t c = 0; c < calls; ++c)
    for (const g::Impl impl : s_.impls) run_impl(impl, pt.problem, inputs, device);
  return seconds_since(start);
}

}  // namespace

std::unique_ptr<PreparedCase> parse_gemm_sweep_case_with(CaseNode& node, bool expect_error,
                                                         SweepHooks hooks) {
  (void)expect_error;  // a sweep has no expect: it passes when it finds nothing
  return std::make_unique<SweepCase>(read_sweep_spec(node), std::move(hooks));
}

std::unique_ptr<PreparedCase> parse_gemm_sweep_case(CaseNode& node, bool expect_error) {
  return parse_gemm_sweep_case_with(node, expect_error, SweepHooks{});
}

}  // namespace meshgate::runner
