#pragma once
// Separate-process isolation: a case that may leave its device unusable (a sticky CUDA fault,
// a hung kernel) runs in a fresh runner process, so that a fault costs that case one `error`
// row and the cases after it start on a clean device. The child runs the same case file with
// `--case <id>` and writes its own results; the parent reads the one row back.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshgate::runner {

// How a child process ended, with the last lines it wrote to stderr.
struct ChildExit {
  int pid = -1;
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  std::string stderr_tail;

  bool exited() const { return signal == 0; }
  std::string describe() const;  // "exited with 2" / "was killed by signal 11 (Segmentation fault)"
};

// Runs argv[0] (a path) with `argv` and the extra `env` entries ("NAME=value") added to this
// process's environment, stdout to /dev/null and stderr to `stderr_path`, and waits for it.
// The child dies with this process (PR_SET_PDEATHSIG), so a watchdog exit leaves no orphan.
// Error(runtime) when it cannot be started.
ChildExit run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    const std::string& stderr_path);

// True inside a child started by run_case_isolated: the case then runs in this process.
bool in_isolated_child();

// What the child reported for the case: its result row (results.jsonl), or why there is none.
struct IsolatedRun {
  ChildExit exit;
  std::optional<nlohmann::json> row;
};

// Runs case `case_id` of `case_file` in a fresh runner process (this executable) with the
// watchdog off (the parent's watchdog covers the child) and `run_options` (e.g. the parent's
// --min-sample-time) added, and returns its row. The child inherits the parent's CPU pinning.
IsolatedRun run_case_isolated(const std::string& case_file, const std::string& case_id,
                              const std::vector<std::string>& run_options = {});

}  // namespace meshgate::runner
