#pragma once
// CUDA implementations (docs/kinds.md, GEMM: Implementations): lt_epilogue, lt_beta_bias and
// unfused on cuBLASLt, cublas on cublasGemmEx, on device-resident copies of one problem's inputs.
// Only declared when meshgate was built with CUDA (MESHGATE_GEMM_CUDA); gemm::cuda_device_count()
// tells whether a GPU is present.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gemm/gemm.hpp"
#include "gemm/lt_plan.hpp"

#ifdef MESHGATE_GEMM_CUDA

namespace meshgate::gemm {

// The algorithm cuBLASLt's heuristic chose, as reported by cublasLtMatmulAlgoConfigGetAttribute.
struct LtAlgoInfo {
  int algo_id = -1;
  int tile_id = 0;
  int splitk_num = 1;
  int reduction_scheme = 0;
  int stages_id = 0;
  std::size_t workspace_bytes = 0;  // what the algorithm needs (<= the problem's workspace)
  float waves = 0;
};

struct CudaRunInfo {
  Impl requested = Impl::lt_epilogue;
  bool split_k_forced = false;    // the problem's split_k (>= 1) is the chosen algorithm's
  LtPlan plan;                    // plan.executed != requested after a fallback, with the reason
  bool ran_gemm = false;          // false for K = 0 or empty outputs (no cuBLASLt call needed)
  bool simple_kernel = false;     // cuBLASLt had no algorithm at all: a plain CUDA kernel ran
  LtAlgoInfo algo;                // valid when ran_gemm and not simple_kernel
  bool heuristic_cached = false;  // the algorithm came from the per-problem cache
};
std::string describe(const CudaRunInfo& info);  // "lt_epilogue: BIAS algo 21 tile 18 splitk 1 ..."

// Host time of what a cuBLASLt call costs before the kernel when nothing is cached: creating
// the handle-independent descriptors and layouts, and one heuristic query.
struct LtSetupOverhead {
  double descriptors_s = 0;
  double heuristic_s = 0;
};

// One problem on one device: inputs uploaded once on the case's own stream, Y prefilled with
// NaN, descriptors and chosen algorithms kept per implementation so repeated calls cost one
// cublasLtMatmul. Everything it holds on the device (buffers, workspace, L2 flush buffer,
// cuBLAS handles, stream) is freed by its destructor.
class CudaGemm {
 public:
  CudaGemm(const GemmProblem& p, const GemmInputs& in, int device = 0);
  ~CudaGemm();
  CudaGemm(CudaGemm&&) noexcept;
  CudaGemm& operator=(CudaGemm&&) noexcept;

  // Runs `impl` once and waits for it. Any failure of cublasLtMatmul (a refusal or a launch
  // error), and a heuristic without an answer, falls back to unfused and says so in
  // plan.fallback_reason, as PyTorch's addmm retries without Lt; CUDA runtime errors throw
  // Error(runtime).
  CudaRunInfo run(Impl impl);
  // One timed call of `impl` (prepared by run() first if needed): CUDA events recorded on the
  // stream right around it. With `cold_l2`, a buffer twice the L2 size is written first
  // (outside the events), so the call starts with none of its operands in L2.
  double sample(Impl impl, bool cold_l2);
  // Seconds of `calls` (>= 1) back-to-back calls of `impl` between one pair of CUDA events: a
  // GEMM of a few microseconds is shorter than what an event pair resolves reliably, a batch is
  // not. Hot only: the caches are not flushed between the calls.
  double sample_calls(Impl impl, std::int64_t calls);
  // The descriptor and heuristic cost of `impl` measured once, bypassing every cache.
  LtSetupOverhead measure_setup_overhead(Impl impl);
  void fill_output_nan();
  HostTensor output() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// "cuda: NVIDIA H100 80GB HBM3 (sm_90), cuBLASLt 130100, cuBLAS 130100": what a bitwise
// output of the CUDA implementations depends on besides the code.
std::string cuda_numerics_environment(int device = 0);

// Convenience: upload, fill Y with NaN, run once, download.
HostTensor run_cuda(Impl impl, const GemmProblem& p, const GemmInputs& in,
                    CudaRunInfo* info = nullptr);

}  // namespace meshgate::gemm

#endif  // MESHGATE_GEMM_CUDA
