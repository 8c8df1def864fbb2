// One rank of a command case: its process, started with torchrun's variables in a private
// folder, and the result document it left there.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "kinds/command/command_case.hpp"
#include "kinds/command/rank_process.hpp"

namespace meshgate::runner::command_kind {
namespace {

namespace fs = std::filesystem;

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

// The process of rank `rank`: the case's command and variables, torchrun's, and the files of
// `folder`; it stops at the deadline or when `stop_fd` becomes readable.
RankProcessSpec process_spec(int rank, int ranks, const Rendezvous& meet,
                             const std::vector<std::string>& command,
                             const std::vector<std::pair<std::string, std::string>>& case_env,
                             const fs::path& folder, const Deadline& deadline, int stop_fd) {
  RankProcessSpec spec;
  spec.argv = command;
  spec.env = case_env;
  spec.env.emplace_back("RANK", std::to_string(rank));
  spec.env.emplace_back("WORLD_SIZE", std::to_string(ranks));
  spec.env.emplace_back("LOCAL_RANK", std::to_string(meet.local_rank));
  spec.env.emplace_back("LOCAL_WORLD_SIZE", std::to_string(meet.local_world_size));
  spec.env.emplace_back("MASTER_ADDR", meet.master_addr);
  spec.env.emplace_back("MASTER_PORT", std::to_string(meet.master_port));
  spec.env.emplace_back("MESHGATE_RESULT", (folder / "result.json").string());
  spec.stdout_path = folder / "stdout";
  spec.stderr_path = folder / "stderr";
  spec.stop_fd = stop_fd;
  if (deadline.set) {
    // At least a moment, so that a limit already reached still reports as one.
    spec.timeout_s =
        std::max(1e-3, std::chrono::duration<double>(deadline.at - Clock::now()).count());
  }
  return spec;
}

// The result document a process that exited with 0 left in `folder`, or why it is none (then
// `doc` is null).
struct ResultFile {
  nlohmann::json doc;
  std::string problem;
};

ResultFile read_result(const fs::path& folder) {
  const fs::path result_path = folder / "result.json";
  std::error_code ec;
  if (!fs::exists(result_path, ec)) {
    return {{},
            "exited with 0 without writing its result to $MESHGATE_RESULT" + output_tails(folder)};
  }
  const std::uintmax_t bytes = fs::file_size(result_path, ec);
  if (!ec && bytes > kMaxResultBytes) {
    return {{},
            "wrote a result of " + std::to_string(bytes) +
                " bytes to $MESHGATE_RESULT, above the limit of " +
                std::to_string(kMaxResultBytes) + " bytes"};
  }
  std::ifstream in(result_path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  ResultFile out;
  try {
    out.doc = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    return {{},
            "wrote a result to $MESHGATE_RESULT that is not valid JSON (" +
                std::string(e.what()) + ")" + output_tails(folder)};
  }
  if (const std::optional<std::string> problem = result_problem(out.doc)) {
    return {{}, "wrote a result to $MESHGATE_RESULT that " + *problem};
  }
  return out;
}

}  // namespace

nlohmann::json run_rank(int rank, int ranks, const Rendezvous& meet,
                        const std::vector<std::string>& command,
                        const std::vector<std::pair<std::string, std::string>>& case_env,
                        const Deadline& deadline, RankStopper& stopper) {
  const RankFolder folder;
  const RankProcessEnd end = run_rank_process(process_spec(
      rank, ranks, meet, command, case_env, folder.path(), deadline, stopper.watch_fd()));
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
  ResultFile result = read_result(folder.path());
  if (!result.problem.empty()) return error(result.problem);
  return {{"result", std::move(result.doc)}};
}

}  // namespace meshgate::runner::command_kind
