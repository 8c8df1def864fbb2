#pragma once
// CPU implementations for the harness to time against each other (spec/gemm.md sections 3-4):
// the fp32 GEMM core is OpenBLAS's sgemm; fp16/bf16 inputs are upcast exactly to fp32 first, so
// every dtype accumulates in fp32 like the GPU paths, and the output is rounded where each
// implementation's GPU counterpart rounds.
#include <string>

#include "gemm/gemm.hpp"

namespace meshgate::gemm {

// Runs `impl` (a CPU impl, cpu_reference included) into y, which must hold y_elements(p)
// elements of the dtype. Every logical element of y is written; ldy padding is left alone.
// TF32 rounds the inputs to TF32 first; split_k > 1 reduces K slices whose partial sums were
// stored in split_k_partials (the emulation of a split-K kernel's numerics). Error(value) for a
// CUDA impl or mismatched tensors.
void run_cpu(Impl impl, const GemmProblem& p, const GemmInputs& in, HostTensor& y);

// "cpu: OpenBLAS 0.3.21 ... core Haswell": what a bitwise output of the CPU implementations
// depends on besides the code (sgemm's kernels differ per version and per CPU core type).
std::string cpu_numerics_environment();

}  // namespace meshgate::gemm
