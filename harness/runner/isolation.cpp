#include "isolation.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

extern char** environ;

namespace meshgate::runner {
namespace {

constexpr const char* kChildVariable = "MESHGATE_ISOLATED_CHILD";

std::string tail_of(const std::string& path, std::size_t limit = 2000) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.size() <= limit ? s : "..." + s.substr(s.size() - limit);
}

std::string self_executable() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    throw Error(ErrorKind::runtime,
                "cannot find this runner's executable for an isolated case: " + ec.message());
  return exe.string();
}

}  // namespace

std::string ChildExit::describe() const {
  if (exited()) return "exited with " + std::to_string(exit_code);
  return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
}

ChildExit run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    const std::string& stderr_path) {
  if (argv.empty()) throw Error(ErrorKind::value, "run_child needs a program");
  // Everything the child needs is built before fork: between fork and exec only
  // async-signal-safe calls are allowed in a multi-threaded parent.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) env_storage.emplace_back(*e);
  env_storage.insert(env_storage.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (const std::string& e : env_storage) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int err_fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (err_fd < 0 || null_fd < 0) {
    if (err_fd >= 0) ::close(err_fd);
    if (null_fd >= 0) ::close(null_fd);
    throw Error(ErrorKind::runtime,
                "cannot open " + stderr_path + " for an isolated case: " + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    ::dup2(null_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(err_fd);
  ::close(null_fd);
  if (pid < 0)
    throw Error(ErrorKind::runtime,
                std::string("fork failed for an isolated case: ") + std::strerror(errno));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ChildExit out;
  out.pid = pid;
  if (WIFSIGNALED(status))
    out.signal = WTERMSIG(status);
  else
    out.exit_code = WEXITSTATUS(status);
  out.stderr_tail = tail_of(stderr_path);
  return out;
}

bool in_isolated_child() {
  const char* value = std::getenv(kChildVariable);
  return value != nullptr && std::string(value) == "1";
}

IsolatedRun run_case_isolated(const std::string& case_file, const std::string& case_id,
                              const std::vector<std::string>& run_options) {
  // A private folder for the child's results, in the system's temporary folder ($TMPDIR).
  std::string dir_template =
      (std::filesystem::temp_directory_path() / "meshgate-isolated-XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr)
    throw Error(ErrorKind::runtime, "cannot create a folder for an isolated case under " +
                                        std::filesystem::temp_directory_path().string() + ": " +
                                        std::strerror(errno));
  const std::filesystem::path dir = dir_template;
  IsolatedRun run;
  std::vector<std::string> argv = {self_executable(), "run", case_file, "--case", case_id,
                                   "--out", (dir / "out").string(), "--case-timeout", "0"};
  argv.insert(argv.end(), run_options.begin(), run_options.end());
  run.exit = run_child(argv, {std::string(kChildVariable) + "=1"}, (dir / "stderr.txt").string());
  std::ifstream rows(dir / "out" / "results.jsonl");
  for (std::string line; std::getline(rows, line);) {
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_discarded() && row.value("id", "") == case_id) run.row = std::move(row);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return run;
}

}  // namespace meshgate::runner
