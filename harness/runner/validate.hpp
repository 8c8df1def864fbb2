#pragma once
// Validation of selected cases before anything runs: the common keys (expect_error, perf,
// kind) here, the kind's own keys through its parse(), then every key nobody read.
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
};

struct PlannedCases {
  std::vector<PlannedCase> cases;
  std::vector<std::string> errors;  // every input error of every case
};

// The keys the runner itself reads on every case.
const std::vector<std::string>& common_case_keys();

PlannedCases prepare_cases(std::vector<CaseSpec> specs, const std::vector<KindEntry>& kinds);

}  // namespace meshgate::runner
