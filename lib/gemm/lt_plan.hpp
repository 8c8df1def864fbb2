#pragma once
// How each CUDA implementation maps a problem onto cuBLASLt and cuBLAS: the epilogue decision
// table and the column-major operand descriptions, host-only so they are tested without a GPU. The enum values are cublasLtEpilogue_t's (checked against the
// header in cuda/lt_gemm.cpp).
#include <cstdint>
#include <string>

#include "gemm/gemm.hpp"

// The index arithmetic below also runs in the CUDA kernels (gemm/cuda/kernels.cu).
#if defined(__CUDACC__)
#define MESHGATE_HOST_DEVICE __host__ __device__
#else
#define MESHGATE_HOST_DEVICE
#endif

namespace meshgate::gemm {

enum class LtEpilogue : std::uint32_t {
  default_ = 1,    // CUBLASLT_EPILOGUE_DEFAULT
  relu = 2,        // CUBLASLT_EPILOGUE_RELU
  bias = 4,        // CUBLASLT_EPILOGUE_BIAS
  relu_bias = 6,   // CUBLASLT_EPILOGUE_RELU_BIAS
  gelu = 32,       // CUBLASLT_EPILOGUE_GELU
  gelu_bias = 36,  // CUBLASLT_EPILOGUE_GELU_BIAS
};
std::string_view to_string(LtEpilogue e);

// cuBLASLt kernels may assume a 16-byte aligned bias.
inline constexpr std::uint64_t kLtBiasAlignment = 16;

struct LtPlan {
  Impl executed = Impl::unfused;  // the impl that really runs (after a fallback)
  LtEpilogue epilogue = LtEpilogue::default_;
  bool bias_through_c = false;   // bias broadcast into Y, then beta = 1
  bool bias_act_kernel = false;  // a separate bias + activation kernel after the GEMM
  std::string fallback_reason;   // empty unless executed != requested

  friend bool operator==(const LtPlan&, const LtPlan&) = default;
};

// The plan for `requested` (a CUDA impl) given the epilogue and the bias pointer's byte address
// (only its alignment matters). lt_epilogue with a bias that is not 16-byte aligned falls back
// to unfused and says why; cublas (cublasGemmEx, no cuBLASLt) has the unfused shape: the GEMM,
// then the bias/activation kernel. Error(value) for a CPU impl.
LtPlan plan_lt(Impl requested, Epilogue epilogue, std::uint64_t bias_address);

// The same plan once cuBLASLt itself refused (no heuristic result or NOT_SUPPORTED): unfused.
LtPlan fallback_plan(Epilogue epilogue, std::string reason);

// One matrix of the column-major view, as cublasLtMatrixLayoutCreate (and cublasGemmEx's
// lda/ldb/ldc) take it: `rows` x `cols` with `ld` elements between columns, element (0, 0)
// `offset` elements after the buffer's start, and GEMM b of a batch `batch_stride` further on.
struct LtMatrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ld = 0;
  std::int64_t offset = 0;
  std::int64_t batch_stride = 0;

  friend bool operator==(const LtMatrix&, const LtMatrix&) = default;
};

// The row-major problem Y[M,N] = op(X) op(W) as the column-major D = op(A) op(B) that cuBLASLt
// and cuBLAS compute: D = Y^T (N x M), A = W, B = X, so D's m is the problem's N and the bias
// epilogue's per-row vector is bias[N]. C is D.
struct LtOperands {
  bool trans_a = false;  // CUBLASLT_MATMUL_DESC_TRANSA / cublasGemmEx transa
  bool trans_b = false;
  std::int64_t m = 0;  // rows of op(A) and D
  std::int64_t n = 0;  // columns of op(B) and D
  std::int64_t k = 0;
  std::int64_t batch = 1;
  LtMatrix a, b, d;

  friend bool operator==(const LtOperands&, const LtOperands&) = default;
};
// Flat index of element (r, c) of op(mat) in GEMM `b` of the batch: what cuBLAS reads for
// this description (element (c, r) of the stored matrix when it is read transposed).
MESHGATE_HOST_DEVICE constexpr std::int64_t op_element(const LtMatrix& mat, bool transposed,
                                                      std::int64_t r, std::int64_t c,
                                                      std::int64_t b) {
  const std::int64_t base = mat.offset + b * mat.batch_stride;
  return transposed ? base + c + r * mat.ld : base + r + c * mat.ld;
}

// Error(value) when the batch does not fit cuBLASLt's 32-bit batch count.
LtOperands lt_operands(const GemmProblem& p);
// cublasGemmEx takes 32-bit sizes and leading dimensions (and a 32-bit batch count):
// Error(value) naming the one that does not fit.
void check_fits_cublas(const LtOperands& o);

// cuBLASLt keeps split-K partial sums in the compute type (float32) or the output dtype only:
// Error(value) for any other `split_k_partials` when the problem forces split-K.
void check_lt_split_k(const GemmProblem& p);

// Largest power of two <= 256 dividing `address`, the MIN_ALIGNMENT preference to pass.
std::uint32_t pointer_alignment(std::uint64_t address);

}  // namespace meshgate::gemm
