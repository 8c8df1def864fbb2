// The command kind: small POSIX shell programs as ranks. What they report (pass, fail, metrics,
// samples, signals), how each way of going wrong becomes an error row naming the rank, the
// timeouts that kill a rank's whole process group, and torchrun's variables. The input errors
// of the case's keys are parse_test.cpp's.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kinds/command/command_case.hpp"
#include "kinds/command/rank_process.hpp"
#include "kinds/kind_test_support.hpp"
#include "runner.hpp"
#include "validate.hpp"

namespace meshgate::runner {
namespace {

namespace fs = std::filesystem;

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {{"command", &parse_command_case, command_case_keys()}};
  return k;
}

// A private folder for the programs of one test and what they leave behind.
class Scratch {
 public:
  Scratch() {
    std::string path = (fs::temp_directory_path() / "meshgate-command-test-XXXXXX").string();
    EXPECT_NE(::mkdtemp(path.data()), nullptr);
    path_ = path;
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  // Writes a POSIX shell program and returns its path.
  std::string program(const std::string& name, const std::string& body) const {
    const fs::path file = path_ / name;
    std::ofstream(file) << body;
    return file.string();
  }
  fs::path path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs a case on the threads backend as `meshgate-runner run` does.
CaseRun run_case(const std::string& case_yaml, double case_timeout_s = 0) {
  PlannedCase planned = plan_one_case(case_yaml, kinds());
  planned.case_timeout_s = case_timeout_s;
  return execute_case(planned, std::nullopt);
}

std::string sh_case(const std::string& program, const std::string& more = "") {
  return "{name: a, kind: command, command: [sh, " + program + "]" +
         (more.empty() ? "" : ", " + more) + "}";
}

// Whether `pid` names a process that still runs (a zombie waiting for its parent does not).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const std::size_t state = line.rfind(')') + 2;
  return state < line.size() && line[state] != 'Z';
}

// SIGKILL ends a process only once the kernel next schedules it, which on a loaded machine can
// be a while after the kill returns: a killed process counts as gone if it is within 5 s.
bool ends_soon(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (running(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Whether this test process has no child left, reaped or not.
bool no_children() {
  int status = 0;
  return ::waitpid(-1, &status, WNOHANG) < 0 && errno == ECHILD;
}

TEST(CommandKind, PassReportsRankZerosMetricsSamplesAndSignals) {
  const Scratch dir;
  const std::string program = dir.program("pass.sh", R"(
printf '{"status": "pass", "metrics": {"bytes": 1024, "busbw": 3.5},
         "samples": {"time_s": [0.3, 0.1, 0.2]}, "signals": {"algorithm": "ring", "chunks": 4}}' \
  > "$MESHGATE_RESULT"
)");
  const CaseRun run = run_case(sh_case(program, "perf: {runs: 3}"));
  ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  EXPECT_EQ(run.outcome.message, "");
  EXPECT_EQ(run.outcome.metrics["bytes"], 1024);
  EXPECT_EQ(run.outcome.metrics["busbw"], 3.5);
  EXPECT_EQ(run.outcome.metrics["time_s"]["median"], 0.2);
  EXPECT_EQ(run.samples["time_s"], nlohmann::json::parse("[[0.3, 0.1, 0.2]]"));
  EXPECT_EQ(run.outcome.plan, (std::vector<std::string>{"algorithm = \"ring\"", "chunks = 4"}));
  EXPECT_EQ(run.params["command"], nlohmann::json({"sh", program}));
  EXPECT_EQ(run.params["ranks"], 1);
  EXPECT_TRUE(no_children());
}

TEST(CommandKind, WithoutPerfTheSamplesAreNotRecorded) {
  const Scratch dir;
  const std::string program = dir.program("pass.sh", R"(
echo '{"status": "pass", "samples": {"time_s": [0.1]}}' > "$MESHGATE_RESULT"
)");
  const CaseRun run = run_case(sh_case(program));
  ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  EXPECT_TRUE(run.samples.empty());
  EXPECT_FALSE(run.outcome.metrics.contains("time_s"));
}

TEST(CommandKind, AFailingRankFailsTheCaseWithItsMessageUnderItsRank) {
  const Scratch dir;
  const std::string program = dir.program("fail.sh", R"(
if [ "$RANK" = 1 ]; then
  echo '{"status": "fail", "message": "sum is 7, expected 8"}' > "$MESHGATE_RESULT"
elif [ "$RANK" = 2 ]; then
  echo '{"status": "fail"}' > "$MESHGATE_RESULT"
else
  echo '{"status": "pass", "message": "not shown on a failed case"}' > "$MESHGATE_RESULT"
fi
)");
  const CaseRun run = run_case(sh_case(program, "ranks: 3"));
  EXPECT_EQ(run.outcome.status, Status::fail);
  EXPECT_EQ(run.outcome.message, "rank 1: sum is 7, expected 8\nrank 2: reported fail");
}

TEST(CommandKind, ANonZeroExitIsAnErrorNamingTheRankWithTheEndOfItsStderr) {
  const Scratch dir;
  const std::string program = dir.program("exit.sh", R"(
if [ "$RANK" = 2 ]; then
  echo "loading" >&2
  echo "Traceback: boom" >&2
  echo '{"status": "fail"}' > "$MESHGATE_RESULT"
  exit 3
fi
echo '{"status": "pass"}' > "$MESHGATE_RESULT"
)");
  const CaseRun run = run_case(sh_case(program, "ranks: 3"));
  EXPECT_EQ(run.outcome.status, Status::error);
  // Ranks 0 and 1 have usually passed by then; one still running is stopped (next test), and
  // the rank that stopped it comes first either way.
  const std::string& message = run.outcome.message;
  const std::string rank_2 =
      "rank 2: exited with 3; its stderr ended with:\n    loading\n    Traceback: boom";
  EXPECT_EQ(message.rfind(rank_2, 0), 0u) << message;
  EXPECT_EQ(message.find("rank 0: exited"), std::string::npos) << message;
}

TEST(CommandKind, AKilledRankIsAnErrorNamingTheSignal) {
  const Scratch dir;
  const std::string program = dir.program("kill.sh", "echo 'to stdout only'\nkill -TERM $$\n");
  const CaseRun run = run_case(sh_case(program));
  EXPECT_EQ(run.outcome.status, Status::error);
  EXPECT_EQ(run.outcome.message,
            "rank 0: was killed by signal 15 (Terminated); its stdout ended with:\n"
            "    to stdout only");
}

TEST(CommandKind, AMissingResultIsAnError) {
  const Scratch dir;
  const std::string program = dir.program("silent.sh", "exit 0\n");
  const CaseRun run = run_case(sh_case(program));
  EXPECT_EQ(run.outcome.status, Status::error);
  EXPECT_EQ(run.outcome.message,
            "rank 0: exited with 0 without writing its result to $MESHGATE_RESULT; it wrote "
            "nothing to stderr or stdout");
}

TEST(CommandKind, AMalformedResultIsAnErrorSayingWhatIsWrong) {
  const Scratch dir;
  const auto error_of = [&](const std::string& document) {
    const std::string program =
        dir.program("bad.sh", "cat > \"$MESHGATE_RESULT\" <<'EOF'\n" + document + "\nEOF\n");
    const CaseRun run = run_case(sh_case(program));
    EXPECT_EQ(run.outcome.status, Status::error) << document;
    return run.outcome.message;
  };
  EXPECT_EQ(error_of("{status: pass")
                .rfind("rank 0: wrote a result to $MESHGATE_RESULT that is not valid JSON (", 0),
            0u);
  EXPECT_EQ(error_of(R"({"status": "ok"})"),
            "rank 0: wrote a result to $MESHGATE_RESULT that key 'status': expected \"pass\" or "
            "\"fail\", got \"ok\"");
  EXPECT_EQ(error_of(R"({"status": "pass", "metric": {}})"),
            "rank 0: wrote a result to $MESHGATE_RESULT that has the unknown key 'metric' (did "
            "you mean 'metrics'?) (a result holds status, message, metrics, samples and signals)");
  EXPECT_EQ(error_of(R"({"status": "pass", "metrics": {"gbps": "fast"}})"),
            "rank 0: wrote a result to $MESHGATE_RESULT that key 'metrics.gbps': expected a "
            "number, got \"fast\"");
  EXPECT_EQ(error_of(R"({"status": "pass", "samples": {"time_s": [0.1, -1]}})"),
            "rank 0: wrote a result to $MESHGATE_RESULT that key 'samples.time_s': expected "
            "seconds (numbers >= 0), got -1");
  EXPECT_EQ(error_of(R"([1, 2])"),
            "rank 0: wrote a result to $MESHGATE_RESULT that is not a JSON object");
}

TEST(CommandKind, ATimeoutKillsTheWholeProcessGroupAndNoChildSurvives) {
  const Scratch dir;
  // The rank leaves a process of its own running in the background, then hangs.
  const std::string program = dir.program("hang.sh", R"(
echo $$ >> ")" + (dir.path() / "pids").string() + R"("
sleep 300 &
echo $! >> ")" + (dir.path() / "pids").string() + R"("
echo "waiting" >&2
wait
)");
  const auto start = std::chrono::steady_clock::now();
  // 2 s: long enough for both shells to start and write their pids on a loaded machine.
  const CaseRun run = run_case(sh_case(program, "ranks: 2, timeout: 2"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(run.outcome.status, Status::error);
  EXPECT_NE(run.outcome.message.find(
                "rank 0: timed out after 2 s (the case's timeout); its process group was "
                "killed; its stderr ended with:\n    waiting"),
            std::string::npos)
      << run.outcome.message;
  EXPECT_NE(run.outcome.message.find("rank 1: timed out after 2 s"), std::string::npos);
  EXPECT_LT(seconds, 10);
  std::istringstream pids(read_file(dir.path() / "pids"));
  int count = 0;
  for (pid_t pid; pids >> pid; ++count) EXPECT_TRUE(ends_soon(pid)) << "pid " << pid;
  EXPECT_EQ(count, 4);  // two ranks, each with its shell and its background sleep
  EXPECT_TRUE(no_children());
}

TEST(CommandKind, TheRunnersCaseTimeoutStopsTheProgramsBeforeItsWatchdog) {
  const Scratch dir;
  const std::string program = dir.program("hang.sh", "sleep 300\n");
  const auto start = std::chrono::steady_clock::now();
  const CaseRun run = run_case(sh_case(program, "timeout: 60"), 1.0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(run.outcome.status, Status::error);
  EXPECT_EQ(run.outcome.message.rfind(
                "rank 0: was still running at the runner's case timeout (--case-timeout 1 s); "
                "its process group was killed",
                0),
            0u)
      << run.outcome.message;
  EXPECT_LT(seconds, 1.0);
  EXPECT_GT(seconds, 0.9);
  EXPECT_TRUE(no_children());
}

TEST(CommandKind, AFailingRankStopsItsPeersAtOnce) {
  const Scratch dir;
  const std::string program = dir.program("peer.sh", R"(
if [ "$RANK" = 1 ]; then echo "cannot connect" >&2; exit 1; fi
sleep 300
)");
  const auto start = std::chrono::steady_clock::now();
  const CaseRun run = run_case(sh_case(program, "ranks: 3"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(run.outcome.status, Status::error);
  EXPECT_EQ(run.outcome.message,
            "rank 1: exited with 1; its stderr ended with:\n    cannot connect\n"
            "rank 0: stopped when rank 1 failed; its process group was killed\n"
            "rank 2: stopped when rank 1 failed; its process group was killed");
  EXPECT_LT(seconds, 5);
  EXPECT_TRUE(no_children());
}

TEST(CommandKind, FourRanksGetTorchrunsVariablesAndEachCaseItsOwnFreePort) {
  const Scratch dir;
  const std::string program = dir.program("env.sh", R"(
echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $EXTRA" \
  > ")" + dir.path().string() + R"(/env-$CASE-$RANK"
echo '{"status": "pass"}' > "$MESHGATE_RESULT"
)");
  std::set<std::string> ports;
  for (const std::string case_name : {"one", "two"}) {
    const CaseRun run =
        run_case(sh_case(program, "ranks: 4, env: {CASE: " + case_name + ", EXTRA: x}"));
    ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
    std::string port;
    for (int rank = 0; rank < 4; ++rank) {
      std::istringstream seen(
          read_file(dir.path() / ("env-" + case_name + "-" + std::to_string(rank))));
      std::string r, world, local, local_world, addr, this_port, extra;
      seen >> r >> world >> local >> local_world >> addr >> this_port >> extra;
      EXPECT_EQ(r, std::to_string(rank));
      EXPECT_EQ(world, "4");
      EXPECT_EQ(local, std::to_string(rank));
      EXPECT_EQ(local_world, "4");
      EXPECT_EQ(addr, "127.0.0.1");
      EXPECT_EQ(extra, "x");
      EXPECT_GT(std::atoi(this_port.c_str()), 0);
      if (rank == 0) port = this_port;
      EXPECT_EQ(this_port, port) << "every rank of a case meets at one port";
    }
    ports.insert(port);
  }
  EXPECT_EQ(ports.size(), 2u) << "each case gets a port of its own";
}

TEST(CommandKind, ATimedIterationTakesTheMaxOverRanks) {
  const Scratch dir;
  const std::string program = dir.program("times.sh", R"(
case "$RANK" in
  0) t='[1, 5, 2]' ;;
  1) t='[3, 1, 2]' ;;
  2) t='[2, 2, 4]' ;;
  3) t='[]' ;;
esac
echo "{\"status\": \"pass\", \"samples\": {\"time_s\": $t}}" > "$MESHGATE_RESULT"
)");
  const CaseRun run = run_case(sh_case(program, "ranks: 4, perf: {runs: 1}"));
  ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  EXPECT_EQ(run.samples["time_s"], nlohmann::json::parse("[[3, 5, 4]]"));

  const std::string uneven = dir.program("uneven.sh", R"(
if [ "$RANK" = 0 ]; then t='[1, 2]'; else t='[1]'; fi
echo "{\"status\": \"pass\", \"samples\": {\"time_s\": $t}}" > "$MESHGATE_RESULT"
)");
  const CaseRun bad = run_case(sh_case(uneven, "ranks: 2, perf: {runs: 1}"));
  EXPECT_EQ(bad.outcome.status, Status::error);
  EXPECT_EQ(bad.outcome.message,
            "the ranks timed different numbers of iterations: rank 0 2, rank 1 1");

  const std::string untimed =
      dir.program("untimed.sh", "echo '{\"status\": \"pass\"}' > \"$MESHGATE_RESULT\"\n");
  const CaseRun none = run_case(sh_case(untimed, "perf: {runs: 1}"));
  EXPECT_EQ(none.outcome.status, Status::error);
  EXPECT_NE(none.outcome.message.find("no rank reported samples.time_s"), std::string::npos)
      << none.outcome.message;
}

TEST(CommandKind, SignalsAreRankZerosWithEveryOtherRanksDifferencesUnderItsRank) {
  const Scratch dir;
  const std::string program = dir.program("signals.sh", R"(
if [ "$RANK" = 2 ]; then s='{"plan": "ring", "steps": 3}'; else s='{"plan": "ring"}'; fi
echo "{\"status\": \"pass\", \"signals\": $s, \"metrics\": {\"rank\": $RANK}}" \
  > "$MESHGATE_RESULT"
)");
  const CaseRun run = run_case(sh_case(program, "ranks: 3"));
  ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  EXPECT_EQ(run.outcome.plan, (std::vector<std::string>{"plan = \"ring\"", "rank 2: steps = 3"}));
  EXPECT_EQ(run.outcome.metrics, nlohmann::json({{"rank", 0}}));
}

TEST(CommandKind, AProgramThatCannotStartIsAnError) {
  const CaseRun run =
      run_case("{name: a, kind: command, command: [no-such-program-of-meshgate], ranks: 2}");
  EXPECT_EQ(run.outcome.status, Status::error);
  EXPECT_EQ(run.outcome.message,
            "rank 0: cannot start 'no-such-program-of-meshgate': no such program on PATH\n"
            "rank 1: cannot start 'no-such-program-of-meshgate': no such program on PATH");
}

TEST(RankProcess, TheTailOfAFileKeepsWholeLines) {
  const Scratch dir;
  const fs::path file = dir.path() / "log";
  std::ofstream(file) << "first line\nsecond\nthird\n\n";
  EXPECT_EQ(file_tail(file), "first line\nsecond\nthird");
  EXPECT_EQ(file_tail(file, 2), "second\nthird");
  EXPECT_EQ(file_tail(file, 10, 16), "second\nthird");  // the cut first line is left out
  EXPECT_EQ(file_tail(dir.path() / "missing"), "");
}

}  // namespace
}  // namespace meshgate::runner
