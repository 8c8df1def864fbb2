// GFLOP/s of each CPU implementation on a few shapes and dtypes (the perf table of the report).
#include <benchmark/benchmark.h>

#include "gemm/cpu_gemm.hpp"

namespace {

using meshgate::gemm::DType;
using meshgate::gemm::Epilogue;
using meshgate::gemm::GemmProblem;
using meshgate::gemm::Impl;

void BM_CpuGemm(benchmark::State& state, Impl impl, DType dtype, Epilogue epilogue) {
  const GemmProblem p{.m = state.range(0),
                      .n = state.range(1),
                      .k = state.range(2),
                      .dtype = dtype,
                      .epilogue = epilogue};
  const meshgate::gemm::GemmInputs in = meshgate::gemm::make_inputs(p);
  meshgate::gemm::HostTensor y(p.dtype, p.m * p.n);
  for (auto _ : state) {
    meshgate::gemm::run_cpu(impl, p, in, y);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(meshgate::gemm::flops(p) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({512, 512, 512})
      ->Args({2048, 256, 256})
      ->Args({16, 2048, 2048})
      ->Args({1024, 1024, 1024});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

#define MESHGATE_GEMM_BENCH(impl, dtype, epilogue)                                     \
  BENCHMARK_CAPTURE(BM_CpuGemm, impl##_##dtype##_##epilogue, Impl::impl, DType::dtype, \
                    Epilogue::epilogue)                                                \
      ->Apply(shapes)

MESHGATE_GEMM_BENCH(cpu_epilogue, f32, bias);
MESHGATE_GEMM_BENCH(cpu_unfused, f32, bias);
MESHGATE_GEMM_BENCH(cpu_beta_bias, f32, bias);
MESHGATE_GEMM_BENCH(cpu_epilogue, f32, gelu_bias);
MESHGATE_GEMM_BENCH(cpu_unfused, f32, gelu_bias);
MESHGATE_GEMM_BENCH(cpu_beta_bias, f32, gelu_bias);
MESHGATE_GEMM_BENCH(cpu_epilogue, bf16, bias);
MESHGATE_GEMM_BENCH(cpu_unfused, bf16, bias);
MESHGATE_GEMM_BENCH(cpu_beta_bias, bf16, bias);
