#include "external_impl.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string_view>
#include <thread>

#include "timing.hpp"

extern char** environ;

namespace meshgate::runner {

namespace {

constexpr std::size_t kMaxAnswerBytes = std::size_t{1} << 30;
constexpr double kHelloTimeout = 120;  // importing torch takes seconds on a cold cache
constexpr double kByeTimeout = 10;
// Progress lines restart the case timeout for set-up work (a world of workers starting), but an
// answer never takes longer than this many case timeouts in all.
constexpr double kProgressLimitFactor = 4;
// What a program that exits before its hello may have missed.
constexpr const char* kChannelHint =
    " (meshgate.impl/1 carries requests and answers on the file descriptors that "
    "MESHGATE_IMPL_FDS names, not on stdin and stdout: docs/impl-protocol.md)";

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::string describe_json(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

}  // namespace

ExternalImpl::ExternalImpl(std::string name, std::vector<std::string> command,
                           std::filesystem::path log_path, double timeout_s)
    : name_(std::move(name)),
      command_(std::move(command)),
      log_path_(std::move(log_path)),
      timeout_s_(timeout_s) {}

ExternalImpl::~ExternalImpl() { stop(); }

void ExternalImpl::fail(const std::string& message) {
  kill_group();
  std::string text = "implementation '" + name_ + "' " + message;
  const std::string tail = log_tail();
  if (!tail.empty()) text += "; its output ended with:\n" + tail;
  throw ImplFailure(text);
}

std::string ExternalImpl::log_tail() const {
  std::ifstream in(log_path_, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff keep = std::min<std::streamoff>(size, 1500);
  in.seekg(size - keep);
  std::string text(static_cast<std::size_t>(keep), '\0');
  in.read(text.data(), keep);
  // Whole lines only.
  if (keep < size) {
    const auto newline = text.find('\n');
    if (newline != std::string::npos) text = text.substr(newline + 1);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

void ExternalImpl::kill_group() {
  close_fd(to_child_);
  close_fd(from_child_);
  buffered_.clear();
  // The whole group, also when the program itself has exited and been reaped: workers it
  // started must not outlive it.
  if (pgid_ > 0) ::kill(-pgid_, SIGKILL);
  if (pid_ > 0) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
  pgid_ = -1;
}

std::string ExternalImpl::reap_if_exited() {
  if (pid_ <= 0) return "exited";
  int status = 0;
  pid_t reaped = 0;
  do {
    reaped = ::waitpid(pid_, &status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped != pid_) return {};
  pid_ = -1;
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           ::strsignal(WTERMSIG(status)) + ")";
  }
  return "exited";
}

void ExternalImpl::ensure_started() {
  if (pid_ > 0) return;
  // A program that cannot even say hello will not on the next case either: every case gets the
  // same error without paying another start.
  if (start_error_) throw ImplFailure(*start_error_);
  if (command_.empty()) throw ImplFailure("implementation '" + name_ + "' has no command");
  // The channel: requests flow from the runner to the program, answers back, each on a pipe
  // of its own that nothing else writes to.
  int request_pipe[2] = {-1, -1};
  int answer_pipe[2] = {-1, -1};
  if (::pipe2(request_pipe, O_CLOEXEC) != 0 || ::pipe2(answer_pipe, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {request_pipe[0], request_pipe[1], answer_pipe[0], answer_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
    throw ImplFailure("implementation '" + name_ + "': pipe failed: " + why);
  }
  // Its stdout and stderr: the log. Its stdin: nothing to read.
  const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Everything the child needs is made before fork: after it, in a runner with threads, only
  // async-signal-safe calls are allowed.
  std::vector<char*> argv;
  for (std::string& arg : command_) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("MESHGATE_IMPL_PROTOCOL=", 0) == 0 ||
        entry.rfind(std::string(kImplFdsVariable) + "=", 0) == 0) {
      continue;
    }
    env_storage.emplace_back(entry);
  }
  env_storage.push_back(std::string("MESHGATE_IMPL_PROTOCOL=") + kImplProtocol);
  env_storage.push_back(std::string(kImplFdsVariable) + "=" + std::to_string(kImplRequestFd) +
                        "," + std::to_string(kImplAnswerFd));
  std::vector<char*> envp;
  for (std::string& entry : env_storage) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {request_pipe[0], request_pipe[1], answer_pipe[0], answer_pipe[1], log_fd,
                   null_fd}) {
      if (fd >= 0) ::close(fd);
    }
    throw ImplFailure("implementation '" + name_ + "': fork failed: " + why);
  }
  if (pid == 0) {
    // The child: its own process group, so that a kill reaches the workers it starts.
    ::setpgid(0, 0);
    ::signal(SIGPIPE, SIG_DFL);  // the runner ignores it; an ignored signal stays so over exec
    // Every source above the fds it lands on (0 to 4), so that no dup2 overwrites another's
    // source; dup2 onto another fd clears close-on-exec there.
    const int out_source = log_fd >= 0 ? log_fd : STDERR_FILENO;
    const int request = ::fcntl(request_pipe[0], F_DUPFD_CLOEXEC, 10);
    const int answer = ::fcntl(answer_pipe[1], F_DUPFD_CLOEXEC, 10);
    const int out = ::fcntl(out_source, F_DUPFD_CLOEXEC, 10);
    const int in = null_fd >= 0 ? ::fcntl(null_fd, F_DUPFD_CLOEXEC, 10) : -1;
    if (request < 0 || answer < 0 || out < 0) {
      const char message[] = "meshgate-runner: cannot set up the implementation's channel\n";
      (void)!::write(out_source, message, sizeof message - 1);
      ::_exit(127);
    }
    if (in >= 0) {
      ::dup2(in, STDIN_FILENO);
    } else {
      ::close(STDIN_FILENO);
    }
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::dup2(request, kImplRequestFd);
    ::dup2(answer, kImplAnswerFd);
#ifdef SYS_close_range
    // Nothing else of the runner's reaches the program, whether or not it was close-on-exec.
    ::syscall(SYS_close_range, kImplAnswerFd + 1, ~0U, 0);
#endif
    ::execvpe(argv[0], argv.data(), envp.data());
    // Into the log, which the runner quotes; no allocation between fork and exit.
    const char* why = std::strerror(errno);
    for (const char* part : {"cannot execute ", static_cast<const char*>(argv[0]), ": ", why,
                             "\n"}) {
      (void)!::write(STDERR_FILENO, part, std::strlen(part));
    }
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so that a kill right after fork reaches the group
  pid_ = pid;
  pgid_ = pid;
  ::close(request_pipe[0]);
  ::close(answer_pipe[1]);
  if (log_fd >= 0) ::close(log_fd);
  if (null_fd >= 0) ::close(null_fd);
  to_child_ = request_pipe[1];
  from_child_ = answer_pipe[0];
  ::signal(SIGPIPE, SIG_IGN);  // a dead child must be an ImplFailure, not the runner's death

  try {
    hello_ = exchange({{"type", "hello"}, {"protocol", kImplProtocol}}, "hello");
    check_hello();
  } catch (const ImplFailure& e) {
    start_error_ = e.what();
    throw;
  }
  start_error_.reset();
}

void ExternalImpl::check_hello() {
  const auto text_key = [&](const char* key) {
    if (!hello_.contains(key) || !hello_[key].is_string()) {
      fail(std::string("answered hello without a string '") + key + "': " + describe_json(hello_));
    }
    return hello_[key].get<std::string>();
  };
  if (const std::string protocol = text_key("protocol"); protocol != kImplProtocol) {
    fail("speaks protocol '" + protocol + "', this runner speaks " + kImplProtocol);
  }
  if (const std::string said = text_key("name"); said != name_) {
    fail("says its name is '" + said + "'; it was started as '" + name_ + "'");
  }
  text_key("version");
  if (!hello_.contains("kinds") || !hello_["kinds"].is_array()) {
    fail("answered hello without a list 'kinds': " + describe_json(hello_));
  }
  for (const auto& kind : hello_["kinds"]) {
    if (!kind.is_string()) fail("answered hello with a kind that is not a string");
  }
  if (hello_.contains("info") && !hello_["info"].is_object()) {
    fail("answered hello with an 'info' that is not an object");
  }
}

nlohmann::json ExternalImpl::header_entry() const {
  nlohmann::json entry = {{"version", hello_.value("version", nlohmann::json())}};
  if (hello_.contains("info") && hello_["info"].is_object()) {
    for (const auto& [key, value] : hello_["info"].items()) {
      if (key != "version") entry[key] = value;
    }
  }
  entry["protocol"] = kImplProtocol;
  if (start_error_) entry["error"] = *start_error_;
  return entry;
}

bool ExternalImpl::implements(const std::string& kind) const {
  if (!hello_.contains("kinds")) return false;
  for (const auto& k : hello_["kinds"]) {
    if (k == kind) return true;
  }
  return false;
}

std::string ExternalImpl::read_line(double deadline, const std::string& what,
                                    const std::string& limit) {
  const std::string hint = what == "hello" ? kChannelHint : "";
  std::string exited;  // how the program ended, once it has been reaped
  while (true) {
    const auto newline = buffered_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return line;
    }
    if (buffered_.size() > kMaxAnswerBytes) fail("answered " + what + " with a line over 1 GiB");
    const double left = deadline - monotonic_seconds();
    if (left <= 0) fail("did not answer " + what + " within " + limit + "; stopped it");
    pollfd p{from_child_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
    if (ready < 0 && errno != EINTR) fail(std::string("poll failed: ") + std::strerror(errno));
    if (ready == 0) {
      // Nothing to read: a program that has exited while a process it left behind holds the
      // answer pipe open would otherwise only end at the case timeout. What it wrote before it
      // exited is read first.
      if (exited.empty()) exited = reap_if_exited();
      pollfd again{from_child_, POLLIN, 0};
      if (!exited.empty() && ::poll(&again, 1, 0) <= 0) {
        fail(exited + " before answering " + what + hint);
      }
    }
    if (ready <= 0) continue;
    char chunk[65536];
    const ssize_t n = ::read(from_child_, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(std::string("read failed: ") + std::strerror(errno));
    }
    if (n == 0) {
      // The answer pipe closed: the program exited, or closed its end and runs on (then it is
      // killed with its group all the same).
      for (int i = 0; i < 50 && exited.empty(); ++i) {
        exited = reap_if_exited();
        if (exited.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (exited.empty()) {
        exited = "closed its answer channel (fd " + std::to_string(kImplAnswerFd) + ")";
      }
      fail(exited + " before answering " + what + hint);
    }
    buffered_.append(chunk, static_cast<std::size_t>(n));
  }
}

nlohmann::json ExternalImpl::exchange(const nlohmann::json& request, const std::string& what) {
  if (!write_all(to_child_, request.dump() + "\n")) {
    fail("does not read its requests (" + std::string(std::strerror(errno)) + ") at " + what);
  }
  const double timeout = what == "hello" ? std::max(timeout_s_, kHelloTimeout) : timeout_s_;
  const double start = monotonic_seconds();
  const double cap = timeout > 0 ? start + kProgressLimitFactor * timeout : 1e300;
  double deadline = timeout > 0 ? start + timeout : 1e300;
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", timeout);
  std::string limit = std::string(seconds) + " s (the case timeout)";
  while (true) {
    const std::string line = read_line(deadline, what, limit);
    nlohmann::json answer;
    try {
      answer = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      std::string shown = line.size() > 200 ? line.substr(0, 200) + "..." : line;
      fail("answered " + what + " with a line that is not JSON: " + shown);
    }
    if (!answer.is_object()) fail("answered " + what + " with " + describe_json(answer));
    if (answer.value("type", "") != "progress" || what == "hello") return answer;
    // Set-up that is not the case's own work restarts the clock, up to the cap.
    const double now = monotonic_seconds();
    deadline = std::min(now + timeout, cap);
    std::snprintf(seconds, sizeof seconds, "%g", timeout);
    limit = std::string(seconds) + " s (the case timeout) of its last progress line, " +
            describe_json(answer.value("doing", nlohmann::json("?")));
    if (deadline == cap) {
      std::snprintf(seconds, sizeof seconds, "%g", kProgressLimitFactor * timeout);
      limit = std::string(seconds) + " s (" + std::to_string(static_cast<int>(kProgressLimitFactor)) +
              " case timeouts, the most that progress lines extend it to)";
    }
  }
}

ImplAnswer ExternalImpl::run_case(const std::string& id, const std::string& kind,
                                  const nlohmann::json& request, const nlohmann::json& perf,
                                  const std::filesystem::path& dir) {
  ensure_started();
  const nlohmann::json answer = exchange({{"type", "case"},
                                          {"id", id},
                                          {"kind", kind},
                                          {"request", request},
                                          {"perf", perf},
                                          {"dir", dir.string()}},
                                         "case '" + id + "'");
  const auto string_key = [&](const char* key) {
    if (!answer.contains(key) || !answer[key].is_string()) {
      fail("answered case '" + id + "' without a string '" + key + "': " + describe_json(answer));
    }
    return answer[key].get<std::string>();
  };
  ImplAnswer out;
  const std::string status = string_key("status");
  if (status == "ok") {
    if (!answer.contains("observables") || !answer["observables"].is_object()) {
      fail("answered case '" + id + "' ok without an object 'observables'");
    }
    out.observables = answer["observables"];
    if (!perf.is_null()) {
      const nlohmann::json* samples = nullptr;
      if (answer.contains("samples") && answer["samples"].is_object() &&
          answer["samples"].contains("time_s")) {
        samples = &answer["samples"]["time_s"];
      }
      if (!samples || !samples->is_array() || samples->empty()) {
        fail("answered the perf case '" + id + "' without samples.time_s");
      }
      for (const auto& s : *samples) {
        if (!s.is_number() || s.get<double>() < 0) {
          fail("answered case '" + id + "' with a time sample that is not seconds >= 0: " +
               describe_json(s));
        }
        out.time_s.push_back(s.get<double>());
      }
    }
  } else if (status == "unsupported") {
    out.status = ImplAnswer::Status::unsupported;
    out.reason = string_key("reason");
  } else if (status == "rejected") {
    out.status = ImplAnswer::Status::rejected;
    out.reason = string_key("message");
    out.error = answer.contains("error") && answer["error"].is_string()
                    ? answer["error"].get<std::string>()
                    : std::string();
  } else if (status == "error") {
    out.status = ImplAnswer::Status::error;
    out.reason = string_key("message");
  } else {
    fail("answered case '" + id + "' with status '" + status +
         "' (one of ok, unsupported, rejected, error)");
  }
  return out;
}

void ExternalImpl::stop() {
  if (pid_ <= 0) {
    kill_group();  // what a program that already exited left in its group, if anything
    return;
  }
  if (to_child_ >= 0) write_all(to_child_, nlohmann::json({{"type", "bye"}}).dump() + "\n");
  close_fd(to_child_);
  const double deadline = monotonic_seconds() + kByeTimeout;
  while (monotonic_seconds() < deadline && reap_if_exited().empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // A clean exit or not, nothing of the program's group outlives the run.
  kill_group();
}

ScratchDir::ScratchDir(const std::filesystem::path& parent, const std::string& leaf)
    : path_(parent / leaf) {
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::optional<std::string> unsupported_row(const nlohmann::json& entry, const std::string& what) {
  if (!entry.is_object() || !entry.contains("unsupported")) return std::nullopt;
  const nlohmann::json& reason = entry["unsupported"];
  if (!reason.is_string() || reason.get<std::string>().empty()) {
    throw ImplFailure("answered " + what + " unsupported without a reason (a non-empty string): " +
                      describe_json(entry));
  }
  if (entry.size() != 1) {
    throw ImplFailure("answered " + what + " both unsupported and with observables: " +
                      describe_json(entry));
  }
  return reason.get<std::string>();
}

std::size_t protocol_dtype_size(const std::string& dtype) {
  if (dtype == "float64" || dtype == "int64") return 8;
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "int8" || dtype == "uint8") return 1;
  return 0;
}

nlohmann::json write_tensor_file(const std::filesystem::path& path, const std::string& dtype,
                                 const std::vector<std::int64_t>& shape, const void* data,
                                 std::size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) throw std::runtime_error("cannot write " + path.string());
  return {{"path", path.string()}, {"dtype", dtype}, {"shape", shape}};
}

TensorFile read_tensor_file(const nlohmann::json& descriptor, const std::filesystem::path& dir,
                            const std::string& what) {
  const auto bad = [&](const std::string& why) {
    throw ImplFailure("answered " + what + " " + why + ": " + describe_json(descriptor));
  };
  if (!descriptor.is_object()) bad("with a tensor that is not {path, dtype, shape}");
  for (const char* key : {"path", "dtype"}) {
    if (!descriptor.contains(key) || !descriptor[key].is_string()) {
      bad(std::string("with a tensor without a string '") + key + "'");
    }
  }
  if (!descriptor.contains("shape") || !descriptor["shape"].is_array()) {
    bad("with a tensor without a list 'shape'");
  }
  TensorFile t;
  t.dtype = descriptor["dtype"].get<std::string>();
  const std::size_t element = protocol_dtype_size(t.dtype);
  if (element == 0) bad("with an unknown dtype");
  std::size_t count = 1;
  for (const auto& extent : descriptor["shape"]) {
    if (!extent.is_number_integer() || extent.get<std::int64_t>() < 0) {
      bad("with a shape entry that is not an integer >= 0");
    }
    t.shape.push_back(extent.get<std::int64_t>());
    count *= static_cast<std::size_t>(t.shape.back());
  }
  const std::filesystem::path path =
      std::filesystem::weakly_canonical(descriptor["path"].get<std::string>());
  const std::filesystem::path root = std::filesystem::weakly_canonical(dir);
  const auto [root_end, path_it] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  if (root_end != root.end()) bad("with a tensor outside the case's dir");
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) bad("with a tensor file that cannot be read (" + ec.message() + ")");
  if (size != count * element) {
    bad("with a tensor file of " + std::to_string(size) + " bytes where its shape and dtype make " +
        std::to_string(count * element));
  }
  t.bytes.resize(size);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(t.bytes.data()), static_cast<std::streamsize>(size));
  if (!in) bad("with a tensor file that cannot be read");
  return t;
}

}  // namespace meshgate::runner
