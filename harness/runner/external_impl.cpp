#include "external_impl.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "timing.hpp"

namespace meshgate::runner {

namespace {

constexpr std::size_t kMaxAnswerBytes = std::size_t{1} << 30;
constexpr double kHelloTimeout = 120;  // importing torch takes seconds on a cold cache
constexpr double kByeTimeout = 10;

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
                           std::filesystem::path stderr_path, double timeout_s)
    : name_(std::move(name)),
      command_(std::move(command)),
      stderr_path_(std::move(stderr_path)),
      timeout_s_(timeout_s) {}

ExternalImpl::~ExternalImpl() { stop(); }

void ExternalImpl::fail(const std::string& message) {
  kill_group();
  std::string text = "implementation '" + name_ + "' " + message;
  const std::string tail = stderr_tail();
  if (!tail.empty()) text += "; its stderr ended with:\n" + tail;
  throw ImplFailure(text);
}

std::string ExternalImpl::stderr_tail() const {
  std::ifstream in(stderr_path_, std::ios::binary);
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
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

void ExternalImpl::ensure_started() {
  if (pid_ > 0) return;
  // A program that cannot even say hello will not on the next case either: every case gets the
  // same error without paying another start.
  if (start_error_) throw ImplFailure(*start_error_);
  if (command_.empty()) throw ImplFailure("implementation '" + name_ + "' has no command");
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0) {
    throw ImplFailure("implementation '" + name_ + "': pipe failed: " + std::strerror(errno));
  }
  const int err_fd = ::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  std::vector<char*> argv;
  for (std::string& arg : command_) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw ImplFailure("implementation '" + name_ + "': fork failed: " + std::strerror(errno));
  }
  if (pid == 0) {
    // The child: its own process group, so that a kill reaches the workers it starts.
    ::setpgid(0, 0);
    ::dup2(in_pipe[0], STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
    ::setenv("MESHGATE_IMPL_PROTOCOL", kImplProtocol, 1);
    ::execvp(argv[0], argv.data());
    const std::string message =
        std::string("cannot execute ") + argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, message.data(), message.size());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so that a kill right after fork reaches the group
  pid_ = pid;
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  if (err_fd >= 0) ::close(err_fd);
  to_child_ = in_pipe[1];
  from_child_ = out_pipe[0];
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

std::string ExternalImpl::read_line(double deadline, const std::string& what) {
  while (true) {
    const auto newline = buffered_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return line;
    }
    if (buffered_.size() > kMaxAnswerBytes) fail("answered " + what + " with a line over 1 GiB");
    const double left = deadline - monotonic_seconds();
    if (left <= 0) {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", timeout_s_);
      fail("did not answer " + what + " within " + limit + " s (the case timeout); stopped it");
    }
    pollfd p{from_child_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
    if (ready < 0 && errno != EINTR) fail(std::string("poll failed: ") + std::strerror(errno));
    if (ready <= 0) continue;
    char chunk[65536];
    const ssize_t n = ::read(from_child_, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(std::string("read failed: ") + std::strerror(errno));
    }
    if (n == 0) {
      int status = 0;
      std::string how = "closed its stdout";
      if (::waitpid(pid_, &status, 0) == pid_) {
        pid_ = -1;
        if (WIFEXITED(status)) {
          how = "exited with code " + std::to_string(WEXITSTATUS(status));
        } else if (WIFSIGNALED(status)) {
          how = std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                ::strsignal(WTERMSIG(status)) + ")";
        }
      }
      fail(how + " before answering " + what);
    }
    buffered_.append(chunk, static_cast<std::size_t>(n));
  }
}

nlohmann::json ExternalImpl::exchange(const nlohmann::json& request, const std::string& what) {
  if (!write_all(to_child_, request.dump() + "\n")) {
    fail("does not read its stdin (" + std::string(std::strerror(errno)) + ") at " + what);
  }
  const double timeout = what == "hello" ? std::max(timeout_s_, kHelloTimeout) : timeout_s_;
  const double deadline = timeout > 0 ? monotonic_seconds() + timeout : 1e300;
  const std::string line = read_line(deadline, what);
  nlohmann::json answer;
  try {
    answer = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    std::string shown = line.size() > 200 ? line.substr(0, 200) + "..." : line;
    fail("answered " + what + " with a line that is not JSON: " + shown);
  }
  if (!answer.is_object()) fail("answered " + what + " with " + describe_json(answer));
  return answer;
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
  if (pid_ <= 0) return;
  if (to_child_ >= 0) write_all(to_child_, nlohmann::json({{"type", "bye"}}).dump() + "\n");
  close_fd(to_child_);
  const double deadline = monotonic_seconds() + kByeTimeout;
  while (monotonic_seconds() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (pid_ > 0) kill_group();
  close_fd(from_child_);
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
