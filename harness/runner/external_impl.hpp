#pragma once
// An implementation under test other than meshgate's own: a program that speaks the
// meshgate.impl/1 protocol (docs/impl-protocol.md) on a channel of its own, two pipes the runner
// creates and passes as file descriptors kImplRequestFd (requests, which it reads) and
// kImplAnswerFd (answers, which it writes), named in its environment as
// MESHGATE_IMPL_FDS="3,4". Its stdin is /dev/null; its stdout and stderr both go to its log
// file, so that whatever it or its libraries print never reaches the channel. The runner starts
// it once per run, sends it each case's resolved request and checks what it answers exactly as
// it checks the library's results. A crash, a timeout or an answer that is not the protocol's
// becomes an ImplFailure (an error row naming the implementation), and the next case gets a
// freshly started process.
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshgate::runner {

inline constexpr const char* kImplProtocol = "meshgate.impl/1";
// The implementation's ends of the channel, and the variable that names them.
inline constexpr int kImplRequestFd = 3;
inline constexpr int kImplAnswerFd = 4;
inline constexpr const char* kImplFdsVariable = "MESHGATE_IMPL_FDS";

// The implementation could not answer: it is not running, died, hung or spoke garbage.
class ImplFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the implementation answered for one case.
struct ImplAnswer {
  enum class Status { ok, unsupported, rejected, error };
  Status status = Status::ok;
  nlohmann::json observables = nlohmann::json::object();  // ok
  std::vector<double> time_s;                             // ok, for perf requests
  std::string reason;   // unsupported: why; rejected: the message; error: the message
  std::string error;    // rejected: the exception type, e.g. "ValueError"
};

class ExternalImpl {
 public:
  // `log_path`: where the program's stdout and stderr go (appended across restarts).
  ExternalImpl(std::string name, std::vector<std::string> command,
               std::filesystem::path log_path, double timeout_s);
  ~ExternalImpl();
  ExternalImpl(const ExternalImpl&) = delete;
  ExternalImpl& operator=(const ExternalImpl&) = delete;

  const std::string& name() const { return name_; }
  // Starts the program and reads its hello when it is not running. Throws ImplFailure.
  void ensure_started();
  // The hello answer of the last start (empty object before one).
  const nlohmann::json& hello() const { return hello_; }
  // {"version": ..., ...info} for the run header; with "error" when the start failed.
  nlohmann::json header_entry() const;
  bool implements(const std::string& kind) const;

  // Sends one case and reads the answer. Throws ImplFailure after stopping the program (the
  // next call restarts it) on a timeout, an exit or an answer outside the protocol.
  ImplAnswer run_case(const std::string& id, const std::string& kind,
                      const nlohmann::json& request, const nlohmann::json& perf,
                      const std::filesystem::path& dir);

  // Says bye and waits a little for a clean exit; kills the process group otherwise.
  void stop();

 private:
  nlohmann::json exchange(const nlohmann::json& request, const std::string& what);
  void check_hello();  // ImplFailure unless hello_ is the protocol's hello answer
  // The next line of the answer channel; fails naming `what` and `limit` past `deadline`.
  std::string read_line(double deadline, const std::string& what, const std::string& limit);
  // How the program ended, when it has (reaping it); empty while it runs.
  std::string reap_if_exited();
  [[noreturn]] void fail(const std::string& message);
  std::string log_tail() const;
  void kill_group();

  std::string name_;
  std::vector<std::string> command_;
  std::filesystem::path log_path_;
  double timeout_s_;
  pid_t pid_ = -1;   // the program, until it is reaped
  pid_t pgid_ = -1;  // its process group, until it is killed: workers may outlive the program
  int to_child_ = -1;
  int from_child_ = -1;
  std::string buffered_;
  nlohmann::json hello_ = nlohmann::json::object();
  std::optional<std::string> start_error_;
};

// Creates (and, from the destructor, removes) a scratch folder for one case's tensors.
class ScratchDir {
 public:
  explicit ScratchDir(const std::filesystem::path& parent, const std::string& leaf);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Tensors of the protocol: raw little-endian row-major values in a file, described by
// {"path", "dtype", "shape"}.
nlohmann::json write_tensor_file(const std::filesystem::path& path, const std::string& dtype,
                                 const std::vector<std::int64_t>& shape, const void* data,
                                 std::size_t bytes);
// Reads a descriptor an implementation answered: checks its keys, that the path lies inside
// `dir`, the dtype and that the file holds exactly shape x dtype bytes. Throws ImplFailure
// naming `what` otherwise.
struct TensorFile {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> bytes;
};
TensorFile read_tensor_file(const nlohmann::json& descriptor, const std::filesystem::path& dir,
                            const std::string& what);
// A row of a kind's observables (one entry of a collective's "sizes") that the implementation
// did not run, written {"unsupported": REASON} in place of the row's observables
// (docs/impl-protocol.md, "Rows an implementation does not run"): the reason, or nullopt for a
// row it answered. An entry that says unsupported without a non-empty reason string, or with
// other keys beside it, throws ImplFailure naming `what`: a row must be either run or declined.
std::optional<std::string> unsupported_row(const nlohmann::json& entry, const std::string& what);

// Bytes per element of a protocol dtype name; 0 when unknown.
std::size_t protocol_dtype_size(const std::string& dtype);

}  // namespace meshgate::runner
