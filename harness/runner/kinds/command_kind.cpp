// kind: command — a program in any language as a case. The runner starts `ranks` processes of
// `command` with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), waits for them with a deadline, and reads the JSON document each
// rank writes to $MESHGATE_RESULT: its status, message, metrics, timed samples and signals. The
// ranks' documents are merged as the built-in kinds merge ranks (docs/kinds.md, "Programs").
//
// Every rank's process is started by the rank itself, inside run_on_ranks: on the threads
// backend each rank thread starts one process; under mpi and nccl each runner process starts the
// process of its own rank. The ranks then exchange what they saw over the case's communicator,
// so the same code serves every backend and every process reaches the same verdict.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "case_kind.hpp"
#include "diagnostics.hpp"
#include "kinds/rank_process.hpp"

namespace meshgate::runner {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Each rank is a process (and a thread of the runner on the threads backend): a typo such as
// `ranks: 40000` must not start forty thousand of them.
constexpr int kMaxRanks = 1024;
// A result document is a few numbers and lists; anything larger is not one.
constexpr std::uintmax_t kMaxResultBytes = std::uintmax_t{16} << 20;
// The runner's case timeout ends the whole run (its watchdog); the programs are stopped this much
// earlier (at most 1 s, 5% of a short timeout), so that the case gets an error row of its own.
constexpr double kWatchdogMargin = 0.05;
constexpr double kMaxWatchdogMargin = 1.0;

// Set by the runner for each rank; a case's `env` may not set them.
const std::vector<std::string>& runner_variables() {
  static const std::vector<std::string> names = {
      "RANK",        "WORLD_SIZE",  "LOCAL_RANK",     "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "MESHGATE_RESULT"};
  return names;
}

const std::vector<std::string>& result_keys() {
  static const std::vector<std::string> keys = {"status", "message", "metrics", "samples",
                                                "signals"};
  return keys;
}

bool is_variable_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// `text` as one item of a YAML flow list, quoted when plain YAML would read it otherwise.
std::string flow_item(const std::string& text) {
  const bool plain = !text.empty() && text != "-" && text != "?" &&
                     text.find_first_of(",[]{}:#&*!|>'\"%@`") == std::string::npos;
  if (plain) return text;
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

// "[python3, bench/x.py, --bytes, 4]" for "python3 bench/x.py --bytes 4": the list form of a
// command given as one string, split at blanks (as a suggestion; the runner never splits).
std::string as_flow_list(const std::string& command) {
  std::istringstream words(command);
  std::string list;
  for (std::string word; words >> word;) list += (list.empty() ? "" : ", ") + flow_item(word);
  return "[" + list + "]";
}

// ---------------------------------------------------------------------------------------------
// Exchanging text between the ranks of a case

// Memory of the communicator's space (device memory for nccl), freed on scope exit.
class CommBuffer {
 public:
  CommBuffer(comm::Communicator& comm, std::size_t bytes)
      : comm_(comm), data_(comm.allocate(std::max<std::size_t>(bytes, 1))) {}
  ~CommBuffer() { comm_.deallocate(data_); }
  CommBuffer(const CommBuffer&) = delete;
  CommBuffer& operator=(const CommBuffer&) = delete;
  void* data() const { return data_; }

 private:
  comm::Communicator& comm_;
  void* data_;
};

// Collective over `comm`: every rank's `mine`, by rank.
std::vector<std::string> all_gather_text(comm::Communicator& comm, const std::string& mine) {
  const auto ranks = static_cast<std::size_t>(comm.size());
  const std::int64_t my_length = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> lengths(ranks);
  {
    CommBuffer send(comm, sizeof my_length), receive(comm, sizeof my_length * ranks);
    comm.copy_from_host(send.data(), &my_length, sizeof my_length);
    comm.all_gather(send.data(), receive.data(), 1, comm::DType::i64);
    comm.synchronize();
    comm.copy_to_host(lengths.data(), receive.data(), sizeof my_length * ranks);
  }
  const auto longest = static_cast<std::size_t>(*std::max_element(lengths.begin(), lengths.end()));
  std::vector<std::string> texts(ranks);
  if (longest == 0) return texts;
  std::string padded = mine;
  padded.resize(longest);
  std::string all(longest * ranks, '\0');
  {
    CommBuffer send(comm, longest), receive(comm, longest * ranks);
    comm.copy_from_host(send.data(), padded.data(), longest);
    comm.all_gather(send.data(), receive.data(), longest, comm::DType::u8);
    comm.synchronize();
    comm.copy_to_host(all.data(), receive.data(), all.size());
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    texts[r] = all.substr(r * longest, static_cast<std::size_t>(lengths[r]));
  }
  return texts;
}

// ---------------------------------------------------------------------------------------------
// Where the ranks meet: torchrun's variables

// A TCP port that nothing listens on now, different from every port this runner handed out
// before, so that two cases never share one even when the kernel offers the same port again.
int pick_free_port() {
  static std::mutex mutex;
  static std::set<int> handed_out;
  const std::lock_guard<std::mutex> lock(mutex);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(std::string("socket failed: ") + std::strerror(errno));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = 0;
    socklen_t length = sizeof address;
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                       ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
    const int error = errno;
    ::close(fd);
    if (!bound) {
      throw std::runtime_error(std::string("cannot find a free port for MASTER_PORT: ") +
                               std::strerror(error));
    }
    const int port = ntohs(address.sin_port);
    if (handed_out.insert(port).second) return port;
  }
  throw std::runtime_error("cannot find a free port for MASTER_PORT that no case used before");
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

struct Rendezvous {
  std::string master_addr;
  int master_port = 0;  // 0 when rank 0 found none: `problem` says why
  int local_rank = 0;
  int local_world_size = 1;
  std::string problem;
};

// Collective over the case's communicator: rank 0 picks the port, every rank learns which
// ranks share its host. MASTER_ADDR is the loopback address when every rank runs on rank 0's
// host (always so on the threads backend), else rank 0's host name. Nothing here throws before
// the exchange, which every rank of a process world must reach.
Rendezvous agree_on_rendezvous(comm::Communicator& comm) {
  const std::string me = host_name();
  int port = 0;
  std::string port_problem;
  if (comm.rank() == 0) {
    try {
      port = pick_free_port();
    } catch (const std::exception& e) {
      port_problem = e.what();
    }
  }
  const std::vector<std::string> seen = all_gather_text(comm, std::to_string(port) + " " + me);
  std::vector<std::string> hosts;
  for (const std::string& entry : seen) hosts.push_back(entry.substr(entry.find(' ') + 1));
  Rendezvous out;
  out.master_port = std::atoi(seen[0].c_str());
  const bool one_host =
      std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
  out.master_addr = one_host ? "127.0.0.1" : hosts[0];
  out.local_rank = static_cast<int>(std::count(hosts.begin(), hosts.begin() + comm.rank(), me));
  out.local_world_size = static_cast<int>(std::count(hosts.begin(), hosts.end(), me));
  if (out.master_port == 0) {
    out.problem = comm.rank() == 0 ? port_problem : "not started: rank 0 found no MASTER_PORT";
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// One rank: its process and its result document

// Lets the ranks of a case that run in this process stop each other: the first rank that fails
// makes a pipe readable that every rank's wait watches, so that its peers, likely blocked on it
// in a collective, end at once instead of at the timeout. Under mpi and nccl each process holds
// one rank and its peers run until they end or time out.
class RankStopper {
 public:
  RankStopper() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
  }
  ~RankStopper() {
    for (const int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  RankStopper(const RankStopper&) = delete;
  RankStopper& operator=(const RankStopper&) = delete;

  int watch_fd() const { return fds_[0]; }
  void stop_others(int failed_rank) {
    int none = -1;
    if (first_failed_.compare_exchange_strong(none, failed_rank) && fds_[1] >= 0) {
      (void)!::write(fds_[1], "x", 1);
    }
  }
  int first_failed() const { return first_failed_.load(); }

 private:
  int fds_[2] = {-1, -1};
  std::atomic<int> first_failed_{-1};
};

// What the limit on a rank's run is and how to name it when it is reached.
struct Deadline {
  Clock::time_point at;
  bool set = false;
  std::string reached;  // "timed out after 60 s (timeout: 60)"
};

// The problem of a result document, or nullopt when it has the contract's form.
std::optional<std::string> result_problem(const nlohmann::json& doc) {
  if (!doc.is_object()) return "is not a JSON object";
  for (const auto& [key, value] : doc.items()) {
    if (std::find(result_keys().begin(), result_keys().end(), key) == result_keys().end()) {
      return "has the unknown key " + quote_value(key) + did_you_mean(key, result_keys()) +
             " (a result holds status, message, metrics, samples and signals)";
    }
  }
  if (!doc.contains("status")) return "has no status (\"pass\" or \"fail\")";
  const nlohmann::json& status = doc["status"];
  if (!status.is_string() || (status != "pass" && status != "fail")) {
    return "key 'status': expected \"pass\" or \"fail\", got " + status.dump();
  }
  if (doc.contains("message") && !doc["message"].is_string()) {
    return "key 'message': expected a string, got " + doc["message"].dump();
  }
  if (doc.contains("metrics")) {
    const nlohmann::json& metrics = doc["metrics"];
    if (!metrics.is_object()) return "key 'metrics': expected {name: number}";
    for (const auto& [name, value] : metrics.items()) {
      if (!value.is_number()) {
        return "key 'metrics." + name + "': expected a number, got " + value.dump();
      }
      if (name == "time_s") {
        return "key 'metrics.time_s': the runner writes it from samples.time_s; report the "
               "seconds of each timed iteration there";
      }
    }
  }
  if (doc.contains("samples")) {
    const nlohmann::json& samples = doc["samples"];
    if (!samples.is_object()) return "key 'samples': expected {\"time_s\": [seconds, ...]}";
    for (const auto& [name, value] : samples.items()) {
      if (name != "time_s") {
        return "key 'samples." + name +
               "': the only samples are time_s (seconds per timed "
               "iteration)";
      }
      if (!value.is_array()) return "key 'samples.time_s': expected a list of seconds";
      for (const nlohmann::json& t : value) {
        if (!t.is_number() || !std::isfinite(t.get<double>()) || t.get<double>() < 0) {
          return "key 'samples.time_s': expected seconds (numbers >= 0), got " + t.dump();
        }
      }
    }
  }
  if (doc.contains("signals") && !doc["signals"].is_object()) {
    return "key 'signals': expected {name: value}";
  }
  return std::nullopt;
}

// The end of the rank's stderr (or its stdout when stderr is empty), for an error message.
std::string output_tails(const fs::path& dir) {
  for (const char* stream : {"stderr", "stdout"}) {
    const std::string tail = file_tail(dir / stream);
    if (tail.empty()) continue;
    std::string indented;
    std::istringstream lines(tail);
    for (std::string line; std::getline(lines, line);) indented += "\n    " + line;
    return std::string("; its ") + stream + " ended with:" + indented;
  }
  return "; it wrote nothing to stderr or stdout";
}

// A private folder of one rank's files (stdout, stderr, result.json), removed with the object.
class RankFolder {
 public:
  RankFolder() {
    std::string path = (fs::temp_directory_path() / "meshgate-command-XXXXXX").string();
    if (::mkdtemp(path.data()) == nullptr) {
      throw std::runtime_error("cannot create a folder for the program's output under " +
                               fs::temp_directory_path().string() + ": " + std::strerror(errno));
    }
    path_ = path;
  }
  ~RankFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  RankFolder(const RankFolder&) = delete;
  RankFolder& operator=(const RankFolder&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs one rank's process and judges what it left: {"result": document} when it exited 0 with
// a well-formed result, else {"error": why} (without the "rank r: " the merge adds).
nlohmann::json run_rank(int rank, int ranks, const Rendezvous& meet,
                        const std::vector<std::string>& command,
                        const std::vector<std::pair<std::string, std::string>>& case_env,
                        const Deadline& deadline, RankStopper& stopper) {
  const RankFolder folder;
  const fs::path result_path = folder.path() / "result.json";
  RankProcessSpec spec;
  spec.argv = command;
  spec.env = case_env;
  spec.env.emplace_back("RANK", std::to_string(rank));
  spec.env.emplace_back("WORLD_SIZE", std::to_string(ranks));
  spec.env.emplace_back("LOCAL_RANK", std::to_string(meet.local_rank));
  spec.env.emplace_back("LOCAL_WORLD_SIZE", std::to_string(meet.local_world_size));
  spec.env.emplace_back("MASTER_ADDR", meet.master_addr);
  spec.env.emplace_back("MASTER_PORT", std::to_string(meet.master_port));
  spec.env.emplace_back("MESHGATE_RESULT", result_path.string());
  spec.stdout_path = folder.path() / "stdout";
  spec.stderr_path = folder.path() / "stderr";
  spec.stop_fd = stopper.watch_fd();
  if (deadline.set) {
    // At least a moment, so that a limit already reached still reports as one.
    spec.timeout_s =
        std::max(1e-3, std::chrono::duration<double>(deadline.at - Clock::now()).count());
  }
  const RankProcessEnd end = run_rank_process(spec);
  const auto error = [&](const std::string& why) {
    stopper.stop_others(rank);
    return nlohmann::json{{"error", why}};
  };
  using How = RankProcessEnd::How;
  switch (end.how) {
    case How::not_started:
      return error(end.start_error);
    case How::timed_out:
      // Not a reason to stop the others: they share the deadline.
      return {{"error",
               deadline.reached + "; its process group was killed" + output_tails(folder.path())}};
    case How::stopped:
      // Not a failure of its own: it does not stop anyone.
      return {{"error", "stopped when rank " + std::to_string(stopper.first_failed()) +
                            " failed; its process group was killed"}};
    case How::killed_by_signal:
      return error(end.describe() + output_tails(folder.path()));
    case How::exited:
      break;
  }
  if (end.exit_code != 0) return error(end.describe() + output_tails(folder.path()));

  std::error_code ec;
  if (!fs::exists(result_path, ec)) {
    return error("exited with 0 without writing its result to $MESHGATE_RESULT" +
                 output_tails(folder.path()));
  }
  const std::uintmax_t bytes = fs::file_size(result_path, ec);
  if (!ec && bytes > kMaxResultBytes) {
    return error("wrote a result of " + std::to_string(bytes) +
                 " bytes to $MESHGATE_RESULT, "
                 "above the limit of " +
                 std::to_string(kMaxResultBytes) + " bytes");
  }
  std::ifstream in(result_path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    return error("wrote a result to $MESHGATE_RESULT that is not valid JSON (" +
                 std::string(e.what()) + ")" + output_tails(folder.path()));
  }
  if (const std::optional<std::string> problem = result_problem(doc)) {
    return error("wrote a result to $MESHGATE_RESULT that " + *problem);
  }
  return {{"result", std::move(doc)}};
}

// ---------------------------------------------------------------------------------------------
// Merging the ranks

std::string signal_line(const std::string& name, const nlohmann::json& value) {
  return name + " = " + value.dump();
}

// The rank whose failure stopped the others, as their reports name it ("stopped when rank N
// failed"); -1 when no rank was stopped.
int rank_that_stopped_the_others(const std::vector<nlohmann::json>& reports) {
  static constexpr std::string_view stopped = "stopped when rank ";
  for (const nlohmann::json& report : reports) {
    if (!report.contains("error")) continue;
    const std::string text = report["error"].get<std::string>();
    if (text.rfind(stopped, 0) != 0) continue;
    const int named = std::atoi(text.c_str() + stopped.size());
    if (named >= 0 && static_cast<std::size_t>(named) < reports.size()) return named;
  }
  return -1;
}

// The merged outcome of every rank's report (by rank, the rank that stopped the others first):
// the worst status wins and each message keeps its rank; metrics and signals are rank 0's, with
// the signals that another rank reports differently added under its rank; a timed iteration
// takes the max over the ranks that timed.
Outcome merge_reports(const std::vector<nlohmann::json>& reports, bool timed) {
  Outcome out;
  std::vector<std::string> errors, failures;
  std::vector<const nlohmann::json*> results(reports.size(), nullptr);
  // The cause first: the message's first line says why the case broke, not that rank 0 was
  // stopped because another rank failed.
  const int cause = rank_that_stopped_the_others(reports);
  if (cause >= 0 && reports[static_cast<std::size_t>(cause)].contains("error")) {
    errors.push_back("rank " + std::to_string(cause) + ": " +
                     reports[static_cast<std::size_t>(cause)]["error"].get<std::string>());
  }
  for (std::size_t r = 0; r < reports.size(); ++r) {
    const std::string prefix = "rank " + std::to_string(r) + ": ";
    if (reports[r].contains("error")) {
      if (static_cast<int>(r) != cause) {
        errors.push_back(prefix + reports[r]["error"].get<std::string>());
      }
      continue;
    }
    results[r] = &reports[r]["result"];
    const nlohmann::json& result = *results[r];
    if (result["status"] == "fail") {
      const std::string message = result.value("message", "");
      failures.push_back(prefix + (message.empty() ? "reported fail" : message));
    }
  }

  if (results[0] != nullptr) {
    const nlohmann::json& lead = *results[0];
    out.metrics = lead.value("metrics", nlohmann::json::object());
    const nlohmann::json lead_signals = lead.value("signals", nlohmann::json::object());
    for (const auto& [name, value] : lead_signals.items())
      out.plan.push_back(signal_line(name, value));
    for (std::size_t r = 1; r < results.size(); ++r) {
      if (results[r] == nullptr || !results[r]->contains("signals")) continue;
      for (const auto& [name, value] : (*results[r])["signals"].items()) {
        if (!lead_signals.contains(name) || lead_signals[name] != value) {
          out.plan.push_back("rank " + std::to_string(r) + ": " + signal_line(name, value));
        }
      }
    }
  }

  const auto join = [](const std::vector<std::string>& lines) {
    std::string text;
    for (const std::string& line : lines) text += (text.empty() ? "" : "\n") + line;
    return text;
  };
  if (!errors.empty()) {
    errors.insert(errors.end(), failures.begin(), failures.end());
    out.status = Status::error;
    out.message = join(errors);
    return out;
  }
  if (!failures.empty()) {
    out.status = Status::fail;
    out.message = join(failures);
    return out;
  }
  if (!timed) return out;

  // A timed iteration ends when its slowest rank does.
  std::vector<double> slowest;
  std::optional<std::size_t> first_timed;
  for (std::size_t r = 0; r < results.size(); ++r) {
    const nlohmann::json samples =
        results[r]->value("samples", nlohmann::json::object()).value("time_s", nlohmann::json());
    if (!samples.is_array() || samples.empty()) continue;
    if (!first_timed) {
      first_timed = r;
      slowest = samples.get<std::vector<double>>();
      continue;
    }
    if (samples.size() != slowest.size()) {
      out.status = Status::error;
      out.message = "the ranks timed different numbers of iterations: rank " +
                    std::to_string(*first_timed) + " " + std::to_string(slowest.size()) +
                    ", rank " + std::to_string(r) + " " + std::to_string(samples.size());
      return out;
    }
    for (std::size_t i = 0; i < slowest.size(); ++i) {
      slowest[i] = std::max(slowest[i], samples[i].get<double>());
    }
  }
  if (!first_timed) {
    out.status = Status::error;
    out.message =
        "a performance case, but no rank reported samples.time_s (the seconds of each "
        "of its timed iterations)";
    return out;
  }
  out.measured_time_s = std::move(slowest);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The case

class CommandCase final : public PreparedCase {
 public:
  std::vector<std::string> command;
  int rank_count = 1;
  std::optional<double> timeout_s;
  std::vector<std::pair<std::string, std::string>> env;

  // The programs' memory is their own, outside the runner.
  MemoryEstimate memory_estimate() const override { return {}; }
  int ranks() const override { return rank_count; }

  nlohmann::json params() const override {
    nlohmann::json p = {{"command", command}, {"ranks", rank_count}};
    if (timeout_s) p["timeout"] = *timeout_s;
    if (!env.empty()) {
      nlohmann::json variables = nlohmann::json::object();
      for (const auto& [name, value] : env) variables[name] = value;
      p["env"] = std::move(variables);
    }
    return p;
  }

  Outcome run(RunContext& ctx) override {
    const Deadline deadline = deadline_for(ctx.case_timeout_s());
    RankStopper stopper;
    std::vector<std::string> gathered;
    ctx.run_on_ranks(rank_count, [&](int rank, comm::Communicator& comm) {
      const Rendezvous meet = agree_on_rendezvous(comm);
      // Whatever happens to this rank becomes its report: a rank that threw before the next
      // exchange would leave its peers in other processes waiting there forever.
      nlohmann::json report;
      if (!meet.problem.empty()) {
        report = {{"error", meet.problem}};
      } else {
        try {
          report = run_rank(rank, rank_count, meet, command, env, deadline, stopper);
        } catch (const std::exception& e) {
          stopper.stop_others(rank);
          report = {{"error", std::string("the runner could not run it: ") + e.what()}};
        }
      }
      std::vector<std::string> all = all_gather_text(comm, report.dump());
      if (rank == ctx.lead_rank()) gathered = std::move(all);
    });
    std::vector<nlohmann::json> reports;
    for (const std::string& text : gathered) reports.push_back(nlohmann::json::parse(text));
    return merge_reports(reports, ctx.perf().has_value());
  }

  // The program times its own iterations: run() hands them to the runner (measured_time_s).
  double time_calls(RunContext&, std::int64_t) override {
    throw std::logic_error("a command case is timed by its program, not by time_calls");
  }

 private:
  // The case's own timeout, or the runner's case timeout less a margin when that comes first.
  Deadline deadline_for(double case_timeout_s) const {
    Deadline deadline;
    const Clock::time_point now = Clock::now();
    const auto after = [&](double seconds) {
      return now +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    };
    if (timeout_s) {
      deadline = {after(*timeout_s), true,
                  "timed out after " + format_seconds(*timeout_s) + " s (the case's timeout)"};
    }
    if (case_timeout_s > 0) {
      const double before_watchdog =
          case_timeout_s - std::min(kMaxWatchdogMargin, kWatchdogMargin * case_timeout_s);
      if (!timeout_s || before_watchdog < *timeout_s) {
        deadline = {after(before_watchdog), true,
                    "was still running at the runner's case timeout (--case-timeout " +
                        format_seconds(case_timeout_s) + " s)"};
      }
    }
    return deadline;
  }

  static std::string format_seconds(double seconds) {
    std::ostringstream text;
    text << seconds;
    return text.str();
  }
};

}  // namespace

const std::vector<std::string>& command_case_keys() {
  static const std::vector<std::string> keys = {"command", "ranks", "timeout", "env"};
  return keys;
}

std::unique_ptr<PreparedCase> parse_command_case(CaseNode& node, bool expect_error) {
  auto c = std::make_unique<CommandCase>();
  if (expect_error) {
    node.fail("expect_error",
              "a command case's program judges itself: it reports \"status\": \"fail\" when "
              "what it checks is wrong, so there is no rejection to expect");
  }
  // The runner read perf.runs (launches); what happens inside a launch is the program's.
  if (const YAML::Node perf = node.raw("perf"); perf.IsMap()) {
    CaseNode perf_node = node.child("perf");
    for (const char* key : {"warmup", "iters", "min_sample_time"}) {
      if (perf_node.has(key)) {
        perf_node.fail(key,
                       "a command case's program runs its own warm-up and timed iterations "
                       "and reports their seconds in samples.time_s; only perf.runs (the "
                       "launches of every rank) applies");
      }
    }
  }

  const YAML::Node command = node.raw("command");
  if (!command || command.IsNull()) {
    node.fail("command", "is required (a list of strings: the program and its arguments)");
  }
  if (command.IsScalar()) {
    node.fail_at(command, "command",
                 "expected a list of strings (the program and its arguments), got the string " +
                     quote_value(command.Scalar()) +
                     "; write it as a list, e.g. command: " + as_flow_list(command.Scalar()) +
                     " (the runner splits nothing and starts no shell; for a shell write "
                     "[sh, -c, \"...\"])");
  }
  if (!command.IsSequence()) {
    node.fail_at(command, "command",
                 "expected a list of strings (the program and its arguments), got " +
                     describe_node(command));
  }
  if (command.size() == 0) {
    node.fail_at(command, "command", "the list is empty; name the program to run first");
  }
  for (const YAML::Node& item : command) {
    if (!item.IsScalar()) {
      node.fail_at(item, "command",
                   "expected a string for each argument, got " + describe_node(item));
    }
    c->command.push_back(item.Scalar());
  }
  if (c->command[0].empty()) {
    node.fail_at(command[0], "command", "the program's name is empty");
  }

  if (const std::optional<int> ranks = node.optional<int>("ranks")) {
    if (*ranks < 1 || *ranks > kMaxRanks) {
      reject_value(node, "ranks",
                   "must be 1 to " + std::to_string(kMaxRanks) + " (one process each), got " +
                       std::to_string(*ranks));
    }
    c->rank_count = *ranks;
  }
  if (const std::optional<double> timeout = node.optional<double>("timeout")) {
    if (!std::isfinite(*timeout) || *timeout <= 0) {
      reject_value(node, "timeout",
                   "must be a number of seconds above 0, got " + node.raw("timeout").Scalar());
    }
    c->timeout_s = *timeout;
  }

  const YAML::Node env = node.raw("env");
  if (env && !env.IsNull()) {
    if (!env.IsMap()) {
      node.fail_at(env, "env",
                   "expected a mapping of variable names to values, e.g. {NCCL_DEBUG: WARN}, "
                   "got " +
                       describe_node(env));
    }
    for (auto it = env.begin(); it != env.end(); ++it) {
      const std::string name = it->first.Scalar();
      if (!is_variable_name(name)) {
        node.fail_at(it->first, "env",
                     quote_value(name) +
                         " is not a variable name (letters, digits and '_', "
                         "not starting with a digit)");
      }
      const auto& reserved = runner_variables();
      if (std::find(reserved.begin(), reserved.end(), name) != reserved.end()) {
        node.fail_at(
            it->first, "env",
            quote_value(name) +
                " is set by the runner for each rank (RANK, WORLD_SIZE, "
                "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, MESHGATE_RESULT)");
      }
      if (!it->second.IsScalar()) {
        node.fail_at(it->second, "env",
                     "the value of " + quote_value(name) + ": expected a string, got " +
                         describe_node(it->second) + " (write '' for an empty value)");
      }
      c->env.emplace_back(name, it->second.Scalar());
    }
  }
  return c;
}

}  // namespace meshgate::runner
