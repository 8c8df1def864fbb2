#pragma once
// One rank of a command case as an operating-system process: started with posix_spawn in a
// process group of its own, stdin from /dev/null and stdout and stderr into files, waited for
// with a deadline, and killed together with every process of its group when it exits, times out
// or is told to stop, so that nothing it started outlives it.
//
// The group is anchored by a small guard process (/bin/sh blocked on a pipe that only the
// runner holds open). Should the runner die first (its case-timeout watchdog, SIGKILL from a
// cancelled job, a crash), the pipe closes and the guard kills the group: the programs a case
// started never outlive the runner either.
#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace meshgate::runner {

struct RankProcessSpec {
  // argv[0] is the program: a path when it holds '/', else looked up on the PATH of `env` when
  // that sets PATH, else on the runner's PATH.
  std::vector<std::string> argv;
  // Variables set on top of the runner's environment (replacing any of the same name).
  std::vector<std::pair<std::string, std::string>> env;
  std::filesystem::path stdout_path;
  std::filesystem::path stderr_path;
  double timeout_s = 0;  // <= 0: no deadline
  // When this descriptor becomes readable, the process is stopped (another rank failed);
  // -1: nothing to watch.
  int stop_fd = -1;
};

// How the process ended.
struct RankProcessEnd {
  enum class How { exited, killed_by_signal, timed_out, stopped, not_started };
  How how = How::not_started;
  int exit_code = -1;       // exited
  int signal = 0;           // killed_by_signal
  std::string start_error;  // not_started: why
  double seconds = 0;       // from the start to the end of the wait

  // "exited with 3", "was killed by signal 11 (Segmentation fault)", "cannot start 'x': ..."
  // (timed_out and stopped are described by the caller, who knows which limit applied).
  std::string describe() const;
};

// Starts the process, waits for it and kills its group; never throws for anything the program
// does (a program that cannot be started is How::not_started).
RankProcessEnd run_rank_process(const RankProcessSpec& spec);

// The end of a text file for a message: at most `max_lines` lines and `max_bytes` bytes, whole
// lines when it was cut, without trailing blanks; "" when the file is missing or empty.
std::string file_tail(const std::filesystem::path& path, std::size_t max_lines = 10,
                      std::size_t max_bytes = 1000);

}  // namespace meshgate::runner
