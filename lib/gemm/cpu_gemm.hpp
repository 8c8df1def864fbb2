#pragma once
// CPU implementations for the harness to time against each other (docs/kinds.md, GEMM:
// Implementations): the fp32 GEMM core is OpenBLAS's sgemm; fp16/bf16 inputs are upcast exactly to
// fp32 first, so every dtype accumulates in fp32 like the GPU paths, and the output is rounded
// where each implementation's GPU counterpart rounds.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gemm/gemm.hpp"

namespace meshgate::gemm {

// Whether `impl` computes its product with sgemm (cpu_epilogue, cpu_unfused, cpu_beta_bias; the
// reference does not).
bool uses_cpu_blas(Impl impl);

// One size or leading dimension that sgemm takes as the BLAS library's integer, by the problem
// field it comes from.
struct BlasArgument {
  std::string_view field;  // m, n, k, ldx or ldw
  std::int64_t value;      // the effective value: a packed X or W passes its row length
};
// What the BLAS-backed implementations pass to sgemm, in field order.
std::vector<BlasArgument> cpu_blas_arguments(const GemmProblem& p);
// Error(value) naming the field when `a` does not fit the BLAS library's integer (32 bits
// unless OpenBLAS was built with INTERFACE64): sgemm would see it truncated.
void check_fits_cpu_blas(const BlasArgument& a);

// Runs `impl` (a CPU impl, cpu_reference included) into y, which must hold y_elements(p)
// elements of the dtype. Every logical element of y is written; ldy padding is left alone.
// TF32 rounds the inputs to TF32 first; split_k > 1 reduces K slices whose partial sums were
// stored in split_k_partials (the emulation of a split-K kernel's numerics). Error(value) for a
// CUDA impl, mismatched tensors, or a size that sgemm cannot take (check_fits_cpu_blas).
void run_cpu(Impl impl, const GemmProblem& p, const GemmInputs& in, HostTensor& y);

// "cpu: OpenBLAS 0.3.21 ... core Haswell": what a bitwise output of the CPU implementations
// depends on besides the code (sgemm's kernels differ per version and per CPU core type).
std::string cpu_numerics_environment();

}  // namespace meshgate::gemm
