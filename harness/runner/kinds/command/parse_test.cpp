// The command kind's keys: the input errors that name them, and matrix values substituted in
// the command's items and the values of env.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "case_file.hpp"
#include "kinds/command/command_case.hpp"
#include "kinds/kind_test_support.hpp"
#include "validate.hpp"

namespace meshgate::runner {
namespace {

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {{"command", &parse_command_case, command_case_keys()}};
  return k;
}

TEST(CommandKind, MatrixValuesAreSubstitutedInCommandItemsAndEnvValues) {
  LoadedCases loaded;
  load_case_text(
      "suite: s\ncases:\n  - {name: 'a-${bytes}', kind: command, matrix: {bytes: [1MiB, 64MiB]}, "
      "command: [python3, bench.py, --bytes, '${bytes}', '--label=x${bytes}'], "
      "env: {SIZE: '${bytes}'}}\n",
      "t.yaml", loaded);
  ASSERT_TRUE(loaded.errors.empty()) << loaded.errors.front();
  PlannedCases planned = prepare_cases(std::move(loaded.cases), kinds());
  ASSERT_TRUE(planned.errors.empty()) << planned.errors.front();
  ASSERT_EQ(planned.cases.size(), 2u);
  EXPECT_EQ(planned.cases[1].spec.id, "s/a-64MiB");
  EXPECT_EQ(planned.cases[1].prepared->params(),
            nlohmann::json::parse(R"({"command": ["python3", "bench.py", "--bytes", "64MiB",
                                      "--label=x64MiB"], "ranks": 1, "env": {"SIZE": "64MiB"}})"));
}

TEST(CommandKind, InputErrorsNameTheKey) {
  const auto error = [](const std::string& keys) {
    return case_input_error("{name: a, kind: command, " + keys + "}", kinds());
  };
  EXPECT_EQ(error("command: python3 bench/allreduce.py --bytes 4"),
            "t.yaml:3:39: case 's/a': key 'command': expected a list of strings (the program and "
            "its arguments), got the string 'python3 bench/allreduce.py --bytes 4'; write it as a "
            "list, e.g. command: [python3, bench/allreduce.py, --bytes, 4] (the runner splits "
            "nothing and starts no shell; for a shell write [sh, -c, \"...\"])");
  EXPECT_EQ(error("ranks: 2"),
            "t.yaml:3:5: case 's/a': key 'command': is required (a list of strings: the program "
            "and its arguments)");
  EXPECT_NE(error("command: []").find("key 'command': the list is empty"), std::string::npos);
  EXPECT_NE(error("command: [sh, [a]]")
                .find("key 'command': expected a string for each "
                      "argument, got a list"),
            std::string::npos);
  EXPECT_NE(error("command: [true], perf: {min_sample_time: 1ms}")
                .find("key 'perf.min_sample_time': a command case's program runs its own warm-up"),
            std::string::npos);
  EXPECT_NE(error("command: [true], perf: {iters: 5}")
                .find("key 'perf.iters': a command case's program runs its own warm-up and timed "
                      "iterations"),
            std::string::npos);
  EXPECT_NE(error("command: [true], expect_error: true")
                .find("key 'expect_error': a command case's program judges itself"),
            std::string::npos);
  EXPECT_NE(error("command: [true], env: {RANK: 3}")
                .find("key 'env': 'RANK' is set by the runner for each rank"),
            std::string::npos);
  EXPECT_NE(error("command: [true], env: {A: [1]}")
                .find("key 'env': the value of 'A': expected a string, got a list"),
            std::string::npos);
  EXPECT_NE(error("command: [true], env: [A]").find("key 'env': expected a mapping"),
            std::string::npos);
  EXPECT_NE(error("command: [true], ranks: 0").find("key 'ranks': must be 1 to 1024"),
            std::string::npos);
  EXPECT_NE(error("command: [true], timeout: 0")
                .find("key 'timeout': must be a number of "
                      "seconds above 0, got 0"),
            std::string::npos);
  EXPECT_NE(error("command: [true], rnaks: 2").find("unknown key (did you mean 'ranks'?)"),
            std::string::npos);
}

}  // namespace
}  // namespace meshgate::runner
