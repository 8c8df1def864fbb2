#pragma once
// Validation of selected cases before anything runs: the common keys (expect_error, perf,
// memory_limit, kind) here, the kind's own keys through its parse(), the case's memory estimate
// against its limit, then every key nobody read.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "case_kind.hpp"

namespace meshgate::runner {

// A validated case, ready to run.
struct PlannedCase {
  CaseSpec spec;
  bool expect_error = false;
  std::string expected_message;  // substring the rejection must contain; empty = any
  std::optional<PerfSpec> perf;
  std::unique_ptr<PreparedCase> prepared;
  // The run's --case-timeout (0: none), which the case's RunContext reports to its kind.
  double case_timeout_s = 0;
  // <out>/case-state, the RunContext's state_dir(); empty when the run has no output folder.
  std::string state_dir;
};

struct PlannedCases {
  std::vector<PlannedCase> cases;
  std::vector<std::string> errors;  // every input error of every case
};

// The keys the runner itself reads on every case.
const std::vector<std::string>& common_case_keys();

// The memory limit of a case without `memory_limit:` when the runner is given no
// --memory-limit: 16 GiB, enough for every suite in cases/ many times over, and below what a
// CI runner or a workstation can hold without swapping itself to death.
inline constexpr std::int64_t kDefaultMemoryLimit = std::int64_t{16} << 30;

struct ValidationOptions {
  // The limit of a case's memory estimate (--memory-limit; none: kDefaultMemoryLimit). A case's
  // own `memory_limit:` key overrides it.
  std::optional<std::int64_t> memory_limit;
};

// Validates the cases: every input error of every case in `errors`, the rest in `cases`. A case
// with expect_error whose values are rejected here (a ValueRejection) is planned to report that
// rejection when it runs, where the runner judges it like any other.
PlannedCases prepare_cases(std::vector<CaseSpec> specs, const std::vector<KindEntry>& kinds,
                           const ValidationOptions& options = {});

}  // namespace meshgate::runner
