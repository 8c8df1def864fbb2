#pragma once
// kind: gemm_sweep — thousands of GEMM shapes and configurations in one case, on inputs whose
// exact product every correct implementation reproduces, with every wrong output classified
// (docs/kinds.md, gemm_sweep). The seam below lets tests swap the CPU GEMM for one made wrong
// on purpose and interrupt a sweep part-way.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "case_kind.hpp"
#include "gemm/gemm.hpp"

namespace meshgate::runner {

// Runs a CPU implementation of a problem into y (gemm::run_cpu by default).
using SweepCpuFunction = std::function<void(gemm::Impl, const gemm::GemmProblem&,
                                            const gemm::GemmInputs&, gemm::HostTensor&)>;

struct SweepHooks {
  SweepCpuFunction run_cpu;
  // Stops the sweep after this many shapes of one run, its checkpoint written, as a killed
  // runner would have left it (an exception, so the case becomes an error row).
  std::optional<std::int64_t> interrupt_after;
};

std::unique_ptr<PreparedCase> parse_gemm_sweep_case(CaseNode& node, bool expect_error);
std::unique_ptr<PreparedCase> parse_gemm_sweep_case_with(CaseNode& node, bool expect_error,
                                                         SweepHooks hooks);
const std::vector<std::string>& gemm_sweep_case_keys();

}  // namespace meshgate::runner
