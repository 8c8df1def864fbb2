#pragma once
// kind: gemm, with the seam its tests use: the function that runs a CPU implementation.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "case_kind.hpp"
#include "gemm/gemm.hpp"

namespace meshgate::runner {

// Runs a CPU implementation of a problem into y (gemm::run_cpu by default).
using CpuGemmFunction = std::function<void(gemm::Impl, const gemm::GemmProblem&,
                                           const gemm::GemmInputs&, gemm::HostTensor&)>;

// One implementation run under one configuration that asked for a split-K above 1, and
// whether the library applied it (cuBLASLt's algorithm took SPLITK_NUM; the CPU always does).
struct SplitKRequest {
  std::string impl;
  std::string config;
  std::int64_t split_k = 0;
  bool applied = false;
};
// The `split-K not applied:` flag naming the requests that were not applied, or "" when every
// one was: without it a drift check across split-K settings would pass for want of a split.
std::string split_k_flag(const std::vector<SplitKRequest>& requests);

std::unique_ptr<PreparedCase> parse_gemm_case(CaseNode& node, bool expect_error);
// The keys the gemm kind reads (its KindEntry::keys).
const std::vector<std::string>& gemm_case_keys();
// The same kind with another CPU GEMM: tests make one implementation wrong, slow or drifting.
std::unique_ptr<PreparedCase> parse_gemm_case_with(CaseNode& node, bool expect_error,
                                                   CpuGemmFunction run_cpu);

}  // namespace meshgate::runner
