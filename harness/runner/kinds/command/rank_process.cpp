#include "kinds/command/rank_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>

extern char** environ;

namespace meshgate::runner {
namespace {

using Clock = std::chrono::steady_clock;

// The guard of a rank's process group: it blocks reading its stdin, the read end of a pipe whose
// write end only the runner holds; at end of file (the runner is gone) it kills its group.
constexpr const char* kGuardShell = "/bin/sh";
constexpr const char* kGuardScript = "read -r line; kill -9 0";

class SpawnActions {
 public:
  SpawnActions() { ::posix_spawn_file_actions_init(&actions_); }
  ~SpawnActions() { ::posix_spawn_file_actions_destroy(&actions_); }
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

// Attributes shared by the guard and the program: a process group (0 = a new one led by the
// process), no blocked signals, and every signal at its default action (the runner ignores
// SIGPIPE, and an ignored signal would stay ignored across exec).
class SpawnAttributes {
 public:
  explicit SpawnAttributes(pid_t process_group) {
    ::posix_spawnattr_init(&attr_);
    sigset_t none, all;
    ::sigemptyset(&none);
    ::sigfillset(&all);
    ::sigdelset(&all, SIGKILL);
    ::sigdelset(&all, SIGSTOP);
    ::posix_spawnattr_setsigmask(&attr_, &none);
    ::posix_spawnattr_setsigdefault(&attr_, &all);
    ::posix_spawnattr_setpgroup(&attr_, process_group);
    ::posix_spawnattr_setflags(
        &attr_, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }
  ~SpawnAttributes() { ::posix_spawnattr_destroy(&attr_); }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
  posix_spawnattr_t* get() { return &attr_; }

 private:
  posix_spawnattr_t attr_;
};

class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() { reset(); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The runner's environment with `overrides` replacing or adding variables.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool replaced = std::any_of(overrides.begin(), overrides.end(),
                                      [&](const auto& o) { return o.first == name; });
    if (!replaced) out.emplace_back(entry);
  }
  for (const auto& [name, value] : overrides) out.push_back(name + "=" + value);
  return out;
}

// Where argv[0] is: itself when it holds '/', else the first executable file of that name on
// `path` (an empty entry is the working directory, as for execvp).
std::optional<std::string> find_program(const std::string& program, const std::string& path) {
  if (program.find('/') != std::string::npos) return program;
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find(':', start), path.size());
    const std::string dir = path.substr(start, end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    std::error_code ec;
    if (::access(candidate.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(candidate, ec)) {
      return candidate;
    }
    start = end + 1;
  }
  return std::nullopt;
}

std::string search_path(const RankProcessSpec& spec) {
  for (const auto& [name, value] : spec.env) {
    if (name == "PATH") return value;
  }
  const char* path = std::getenv("PATH");
  return path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
}

// Starts the guard in a new process group and returns its pid (the group's id), or -1 when it
// cannot start: the program then leads its own group, killed by the runner alone.
pid_t start_guard(Descriptor& runner_end) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
  Descriptor read_end(pipe_fds[0]);
  runner_end.reset(pipe_fds[1]);
  SpawnActions actions;
  ::posix_spawn_file_actions_adddup2(actions.get(), read_end.get(), STDIN_FILENO);
  ::posix_spawn_file_actions_addopen(actions.get(), STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  ::posix_spawn_file_actions_addopen(actions.get(), STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  SpawnAttributes attributes(0);
  std::vector<std::string> argv = {"sh", "-c", kGuardScript};
  std::vector<std::string> envp;
  pid_t pid = -1;
  if (::posix_spawn(&pid, kGuardShell, actions.get(), attributes.get(), pointers(argv).data(),
                    pointers(envp).data()) != 0) {
    runner_end.reset();
    return -1;
  }
  return pid;
}

void reap(pid_t pid, int* status = nullptr) {
  int ignored = 0;
  while (::waitpid(pid, status != nullptr ? status : &ignored, 0) < 0 && errno == EINTR) {
  }
}

enum class WaitResult { exited, timed_out, stopped };

// Waits until `pid` has exited (left unreaped, so that its pid and group stay ours), the
// deadline passes or `stop_fd` becomes readable.
WaitResult wait_for(pid_t pid, std::optional<Clock::time_point> deadline, int stop_fd) {
  const Descriptor pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  while (true) {
    int wait_ms = -1;
    if (deadline) {
      const auto left = std::chrono::duration<double, std::milli>(*deadline - Clock::now());
      if (left.count() <= 0) return WaitResult::timed_out;
      wait_ms = static_cast<int>(std::min(std::ceil(left.count()), 1e9));
    }
    // Without pidfds (Linux before 5.3) the exit is polled every few milliseconds.
    if (pidfd.get() < 0) wait_ms = wait_ms < 0 ? 2 : std::min(wait_ms, 2);
    pollfd fds[2] = {{pidfd.get(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, 2, wait_ms) < 0 && errno != EINTR) ::usleep(2000);
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid) {
      return WaitResult::exited;
    }
    if (fds[1].revents != 0) return WaitResult::stopped;
  }
}

}  // namespace

std::string RankProcessEnd::describe() const {
  switch (how) {
    case How::exited:
      return "exited with " + std::to_string(exit_code);
    case How::killed_by_signal:
      return "was killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
    case How::timed_out:
      return "timed out";
    case How::stopped:
      return "was stopped";
    case How::not_started:
      return start_error;
  }
  return "ended";
}

RankProcessEnd run_rank_process(const RankProcessSpec& spec) {
  RankProcessEnd end;
  if (spec.argv.empty() || spec.argv[0].empty()) {
    end.start_error = "cannot start a program without a name";
    return end;
  }
  const std::optional<std::string> program = find_program(spec.argv[0], search_path(spec));
  if (!program) {
    end.start_error = "cannot start '" + spec.argv[0] + "': no such program on PATH";
    return end;
  }
  // Everything is built before the spawns: nothing allocates between them and the wait.
  std::vector<std::string> argv = spec.argv;
  std::vector<std::string> envp = environment_with(spec.env);
  std::vector<char*> argv_pointers = pointers(argv);
  std::vector<char*> envp_pointers = pointers(envp);

  Descriptor guard_pipe;
  const pid_t guard = start_guard(guard_pipe);
  SpawnActions actions;
  ::posix_spawn_file_actions_addopen(actions.get(), STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_addopen(actions.get(), STDOUT_FILENO, spec.stdout_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::posix_spawn_file_actions_addopen(actions.get(), STDERR_FILENO, spec.stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  SpawnAttributes attributes(guard > 0 ? guard : 0);
  const Clock::time_point start = Clock::now();
  pid_t pid = -1;
  const int spawn_error = ::posix_spawn(&pid, program->c_str(), actions.get(), attributes.get(),
                                        argv_pointers.data(), envp_pointers.data());
  if (spawn_error != 0) {
    if (guard > 0) {
      ::kill(-guard, SIGKILL);
      reap(guard);
    }
    end.start_error = "cannot start '" + spec.argv[0] + "': " + std::strerror(spawn_error);
    return end;
  }
  const pid_t group = guard > 0 ? guard : pid;

  std::optional<Clock::time_point> deadline;
  if (spec.timeout_s > 0) {
    deadline = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(spec.timeout_s));
  }
  const WaitResult waited = wait_for(pid, deadline, spec.stop_fd);
  // The program is still unreaped here, so its group cannot have been handed to anyone else:
  // the kill reaches only what this rank started (the program, what it left running, the guard).
  ::kill(-group, SIGKILL);
  int status = 0;
  reap(pid, &status);
  if (guard > 0) reap(guard);
  end.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  switch (waited) {
    case WaitResult::timed_out:
      end.how = RankProcessEnd::How::timed_out;
      break;
    case WaitResult::stopped:
      end.how = RankProcessEnd::How::stopped;
      break;
    case WaitResult::exited:
      if (WIFSIGNALED(status)) {
        end.how = RankProcessEnd::How::killed_by_signal;
        end.signal = WTERMSIG(status);
      } else {
        end.how = RankProcessEnd::How::exited;
        end.exit_code = WEXITSTATUS(status);
      }
      break;
  }
  return end;
}

std::string file_tail(const std::filesystem::path& path, std::size_t max_lines,
                      std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size <= 0) return {};
  const std::streamoff keep =
      std::min<std::streamoff>(size, static_cast<std::streamoff>(max_bytes));
  in.seekg(size - keep);
  std::string text(static_cast<std::size_t>(keep), '\0');
  in.read(text.data(), keep);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  // A line cut by the byte limit is left out.
  if (keep < size) {
    const std::size_t newline = text.find('\n');
    text = newline == std::string::npos ? text : text.substr(newline + 1);
  }
  std::size_t lines = 0;
  for (std::size_t i = text.size(); i-- > 0;) {
    if (text[i] == '\n' && ++lines == max_lines) return text.substr(i + 1);
  }
  return text;
}

}  // namespace meshgate::runner
