#pragma once
// The two commands of meshgate-runner, with the case kinds passed in so that tests can run
// the whole pipeline on kinds of their own.
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_kind.hpp"
#include "filter.hpp"
#include "validate.hpp"

namespace meshgate::runner {

struct RunOptions {
  std::vector<std::string> paths;
  CaseFilter filter;
  std::string backend = "threads";
  std::optional<int> ranks;            // caps the world; none = each case gets what it needs
  std::optional<std::string> out_dir;  // default reports/<run id>
  std::optional<std::string> run_id;   // default a fresh one
  bool resume = false;
  double case_timeout_s = 300;  // 0 = no watchdog
  bool progress = false;
};

struct ListOptions {
  std::vector<std::string> paths;
  CaseFilter filter;
  bool json = false;
};

// What running one case produced, before it becomes a result row.
struct CaseRun {
  Outcome outcome;
  nlohmann::json params = nlohmann::json::object();
  nlohmann::json samples = nlohmann::json::object();
  double seconds = 0;
};

// Runs one validated case: the skip check against `ranks_cap`, run(), the expect_error rules,
// then the perf measurement of a passing perf case.
CaseRun execute_case(PlannedCase& planned, std::optional<int> ranks_cap);

// meshgate-runner run: returns the exit code (0 all pass/skip, 1 any fail, 2 any error or
// unusable input). On a case timeout the process exits 2 from the watchdog thread.
int run_command(const RunOptions& options, const std::vector<KindEntry>& kinds, std::ostream& out,
                std::ostream& err);

// meshgate-runner list: the selected cases, validated; 0, or 2 on input errors.
int list_command(const ListOptions& options, const std::vector<KindEntry>& kinds, std::ostream& out,
                 std::ostream& err);

}  // namespace meshgate::runner
