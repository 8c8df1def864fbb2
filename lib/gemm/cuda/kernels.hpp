#pragma once
// The elementwise kernels around the GEMM of the unfused and beta-bias paths.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemm/gemm.hpp"

namespace meshgate::gemm::cuda {

// y[r, j] = act(y[r, j] + bias[j]) over `rows` rows of n elements, ldy apart (a batch's rows
// follow each other), one rounding to the dtype. A null bias adds nothing (activation only).
void launch_bias_act(DType dtype, void* y, const void* bias, std::int64_t rows, std::int64_t n,
                     std::int64_t ldy, Epilogue epilogue, cudaStream_t stream);
// Y = alpha * op(X) op(W) for every GEMM of the batch with fp32 accumulation, one thread per
// output element: the last resort when cuBLASLt has no algorithm even without an epilogue.
// x, w and y are the buffers' starts: the problem's offsets, leading dimensions and batch
// strides apply, through the same column-major description (lt_operands) that cuBLASLt gets.
// Correct, not fast.
void launch_simple_gemm(const GemmProblem& p, const void* x, const void* w, void* y,
                        cudaStream_t stream);
// y[r, j] = bias[j]: the bias broadcast into Y so that the GEMM can add it through C, beta = 1.
void launch_broadcast_bias(DType dtype, void* y, const void* bias, std::int64_t rows,
                           std::int64_t n, std::int64_t ldy, cudaStream_t stream);

}  // namespace meshgate::gemm::cuda
