#pragma once
// kind: gemm, with the seam its tests use: the function that runs a CPU implementation.
#include <functional>
#include <memory>

#include "case_kind.hpp"
#include "gemm/gemm.hpp"

namespace meshgate::runner {

// Runs a CPU implementation of a problem into y (gemm::run_cpu by default).
using CpuGemmFunction = std::function<void(gemm::Impl, const gemm::GemmProblem&,
                                           const gemm::GemmInputs&, gemm::HostTensor&)>;

std::unique_ptr<PreparedCase> parse_gemm_case(CaseNode& node, bool expect_error);
// The same kind with another CPU GEMM: tests make one implementation wrong, slow or drifting.
std::unique_ptr<PreparedCase> parse_gemm_case_with(CaseNode& node, bool expect_error,
                                                   CpuGemmFunction run_cpu);

}  // namespace meshgate::runner
