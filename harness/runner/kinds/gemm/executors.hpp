#pragma once
// The gemm kind's executors: the implementations of one device run and timed on one
// configuration of the problem.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kinds/gemm/gemm_case.hpp"

namespace meshgate::runner::gemm_kind {

// Runs the implementations of one device on one configuration of the problem.
class Executor {
 public:
  virtual ~Executor() = default;
  // Runs `impl` into a NaN-filled Y, records the executed path in `entry` and returns Y.
  virtual g::HostTensor run(g::Impl impl, nlohmann::json& entry, std::string& plan_line) = 0;
  // Seconds of `calls` back-to-back calls, the caches as the previous calls left them.
  virtual double time_hot(g::Impl impl, std::int64_t calls) = 0;
  // Seconds of one call after flushing the caches (untimed).
  virtual double time_cold(g::Impl impl) = 0;
  // Per-call host overhead measured without caches, when the implementation has one.
  virtual nlohmann::json setup_overhead(g::Impl) { return nullptr; }
};

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const g::GemmProblem& p, const g::GemmInputs& in, CpuGemmFunction run_cpu)
      : p_(p), in_(in), run_cpu_(std::move(run_cpu)) {}

  g::HostTensor run(g::Impl impl, nlohmann::json& entry, std::string& plan_line) override {
    g::HostTensor y(p_.dtype, g::y_elements(p_));
    y.fill_nan();
    run_cpu_(impl, p_, in_, y);
    entry["executed"] = g::to_string(impl);
    plan_line = std::string(g::to_string(impl));
    return y;
  }

  double time_hot(g::Impl impl, std::int64_t calls) override {
    prepare_output();
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < calls; ++i) run_cpu_(impl, p_, in_, timing_output_);
    return seconds_since(start);
  }

  double time_cold(g::Impl impl) override {
    prepare_output();
    flush_.resize(cold_flush_bytes());
    std::memset(flush_.data(), static_cast<int>(++flushes_ & 0xff), flush_.size());
    const auto start = std::chrono::steady_clock::now();
    run_cpu_(impl, p_, in_, timing_output_);
    return seconds_since(start);
  }

 private:
  void prepare_output() {
    if (timing_output_.size() != g::y_elements(p_))
      timing_output_ = g::HostTensor(p_.dtype, g::y_elements(p_));
  }

  g::GemmProblem p_;
  const g::GemmInputs& in_;
  CpuGemmFunction run_cpu_;
  g::HostTensor timing_output_;
  std::vector<unsigned char> flush_;
  unsigned flushes_ = 0;
};

#ifdef MESHGATE_GEMM_CUDA
class CudaExecutor final : public Executor {
 public:
  CudaExecutor(const g::GemmProblem& p, const g::GemmInputs& in) : gemm_(p, in) {}

  g::HostTensor run(g::Impl impl, nlohmann::json& entry, std::string& plan_line) override {
    gemm_.fill_output_nan();
    const g::CudaRunInfo info = gemm_.run(impl);
    entry["executed"] = g::to_string(info.plan.executed);
    entry["lt_epilogue"] = g::to_string(info.plan.epilogue);
    if (!info.plan.fallback_reason.empty()) entry["fallback_reason"] = info.plan.fallback_reason;
    if (info.simple_kernel) entry["simple_kernel"] = true;
    if (info.ran_gemm && !info.simple_kernel)
      entry["algo"] = {{"id", info.algo.algo_id},
                       {"tile", info.algo.tile_id},
                       {"splitk_num", info.algo.splitk_num},
                       {"reduction_scheme", info.algo.reduction_scheme},
                       {"stages", info.algo.stages_id},
                       {"workspace_bytes", info.algo.workspace_bytes},
                       {"split_k_forced", info.split_k_forced},
                       {"heuristic_cached", info.heuristic_cached}};
    plan_line = g::describe(info);
    return gemm_.output();
  }

  double time_hot(g::Impl impl, std::int64_t calls) override {
    return gemm_.sample_calls(impl, calls);
  }
  double time_cold(g::Impl impl) override { return gemm_.sample(impl, true); }

  nlohmann::json setup_overhead(g::Impl impl) override {
    if (impl == g::Impl::cublas) return nullptr;  // cublasGemmEx has no descriptors to build
    const g::LtSetupOverhead o = gemm_.measure_setup_overhead(impl);
    return {{"descriptors_s", o.descriptors_s}, {"heuristic_s", o.heuristic_s}};
  }

 private:
  g::CudaGemm gemm_;
};
#endif

}  // namespace meshgate::runner::gemm_kind
