#pragma once
// cuBLASLt implementations (spec/gemm.md section 2): lt_epilogue, lt_beta_bias and unfused, on
// device-resident copies of one problem's inputs. Only declared when meshgate was built with
// CUDA (MESHGATE_GEMM_CUDA); gemm::cuda_device_count() tells whether a GPU is present.
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
  LtPlan plan;                    // plan.executed != requested after a fallback, with the reason
  bool ran_gemm = false;          // false for K = 0 or empty outputs (no cuBLASLt call needed)
  bool simple_kernel = false;     // cuBLASLt had no algorithm at all: a plain CUDA kernel ran
  LtAlgoInfo algo;                // valid when ran_gemm and not simple_kernel
  bool heuristic_cached = false;  // the algorithm came from the per-problem cache
};
std::string describe(const CudaRunInfo& info);  // "lt_epilogue: BIAS algo 21 tile 18 splitk 1 ..."

// One problem on one device: inputs uploaded once, Y prefilled with NaN, descriptors and chosen
// algorithms kept per implementation so repeated calls cost one cublasLtMatmul.
class CudaGemm {
 public:
  CudaGemm(const GemmProblem& p, const GemmInputs& in, int device = 0);
  ~CudaGemm();
  CudaGemm(CudaGemm&&) noexcept;
  CudaGemm& operator=(CudaGemm&&) noexcept;

  // Runs `impl` once and waits for it; cuBLASLt refusals (no heuristic result, NOT_SUPPORTED,
  // EXECUTION_FAILED) fall back to unfused and say so. Other CUDA errors throw Error(runtime).
  CudaRunInfo run(Impl impl);
  // Mean seconds per call of `impl` over `iters` back-to-back calls, timed with CUDA events.
  double time(Impl impl, int iters);
  void fill_output_nan();
  HostTensor output() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Convenience: upload, fill Y with NaN, run once, download.
HostTensor run_cuda(Impl impl, const GemmProblem& p, const GemmInputs& in,
                    CudaRunInfo* info = nullptr);

}  // namespace meshgate::gemm

#endif  // MESHGATE_GEMM_CUDA
