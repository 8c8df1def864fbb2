#include "cli.hpp"

#include <gtest/gtest.h>

namespace meshgate::runner {
namespace {

Command parse(std::vector<std::string> args) { return parse_command_line(args); }

std::string usage_error(std::vector<std::string> args) {
  try {
    parse_command_line(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(CommandLine, RunTakesRepeatedFiltersWithoutSwallowingPaths) {
  const auto run = std::get<RunOptions>(parse({"run", "a.yaml", "--suite", "s1", "--tag=t",
                                               "--suite", "s2", "b.yaml", "--case", "x/*",
                                               "--ranks", "4", "--out", "o", "--run-id", "r",
                                               "--resume", "--case-timeout", "2.5", "--progress",
                                               "--backend", "mpi"}));
  EXPECT_EQ(run.paths, (std::vector<std::string>{"a.yaml", "b.yaml"}));
  EXPECT_EQ(run.filter.suites, (std::vector<std::string>{"s1", "s2"}));
  EXPECT_EQ(run.filter.tags, (std::vector<std::string>{"t"}));
  EXPECT_EQ(run.filter.case_patterns, (std::vector<std::string>{"x/*"}));
  EXPECT_EQ(run.ranks, 4);
  EXPECT_EQ(run.out_dir, "o");
  EXPECT_EQ(run.run_id, "r");
  EXPECT_TRUE(run.resume);
  EXPECT_TRUE(run.progress);
  EXPECT_DOUBLE_EQ(run.case_timeout_s, 2.5);
  EXPECT_EQ(run.backend, "mpi");
}

TEST(CommandLine, Defaults) {
  const auto run = std::get<RunOptions>(parse({"run", "cases"}));
  EXPECT_EQ(run.backend, "threads");
  EXPECT_FALSE(run.ranks.has_value());
  EXPECT_FALSE(run.out_dir.has_value());
  EXPECT_FALSE(run.resume);
  EXPECT_DOUBLE_EQ(run.case_timeout_s, 300);
  const auto list = std::get<ListOptions>(parse({"list", "cases", "--json"}));
  EXPECT_TRUE(list.json);
  EXPECT_EQ(list.paths, std::vector<std::string>{"cases"});
  EXPECT_FALSE(list.kinds);
  const auto kinds = std::get<ListOptions>(parse({"list", "--kinds", "--json"}));
  EXPECT_TRUE(kinds.kinds);
  EXPECT_TRUE(kinds.json);
  EXPECT_TRUE(kinds.paths.empty());
}

// list --kinds describes the runner, not cases: a case selection with it is a mistake, and a
// list of cases still needs its paths.
TEST(CommandLine, ListKindsTakesNoCaseSelection) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"list", "--kinds", "cases"},
        std::vector<std::string>{"list", "--kinds", "--suite", "s"},
        std::vector<std::string>{"list", "--kinds", "--case", "s/*"}}) {
    EXPECT_EQ(usage_error(args),
              "list --kinds lists the kinds this runner knows: it takes no PATH, --suite, --tag "
              "or --case");
  }
  EXPECT_EQ(usage_error({"list"}), "paths is required: list PATH... (or list --kinds for the case kinds)");
  EXPECT_EQ(usage_error({"list", "--json"}).find("paths is required"), 0u);
}

TEST(CommandLine, MistakesAreUsageErrorsThatSayWhatToChange) {
  EXPECT_EQ(usage_error({"run", "a.yaml", "--rank", "4"}),
            "unknown option '--rank' for run (did you mean '--ranks'?)");
  EXPECT_EQ(usage_error({"list", "a.yaml", "--progress"}).rfind("unknown option '--progress' for list", 0), 0u);
  EXPECT_EQ(usage_error({"lst", "a.yaml"}),
            "unknown command 'lst' (did you mean 'list'?); commands are run, list and version");
  EXPECT_EQ(usage_error({}), "missing command: run, list or version");
  EXPECT_NE(usage_error({"run"}).find("paths is required"), std::string::npos);
  EXPECT_NE(usage_error({"run", "a", "--ranks", "0"}).find("at least 1, got '0'"), std::string::npos);
  EXPECT_NE(usage_error({"run", "a", "--ranks", "2x"}).find("got '2x'"), std::string::npos);
  EXPECT_NE(usage_error({"run", "a", "--case-timeout", "soon"})
                .find(">= 0 (0 = no limit), got 'soon'"),
            std::string::npos);
  for (const char* not_finite : {"inf", "Infinity", "nan", "-inf"})
    EXPECT_NE(usage_error({"run", "a", "--case-timeout", not_finite}).find("finite number"),
              std::string::npos)
        << not_finite;
  // Beyond the steady clock's range is accepted; the watchdog then never fires.
  EXPECT_DOUBLE_EQ(
      std::get<RunOptions>(parse({"run", "a", "--case-timeout", "1e300"})).case_timeout_s, 1e300);
  EXPECT_NE(usage_error({"run", "a", "--backend", "gloo"}).find("gloo"), std::string::npos);
  EXPECT_NE(usage_error({"run", "a", "--out"}).find("--out"), std::string::npos);
  EXPECT_NE(usage_error({"run", "a", "--resume=no"}), "(accepted)");
}

TEST(CommandLine, CpusTakesATasksetListAndABadOneIsAUsageErrorNamingTheOption) {
  EXPECT_FALSE(std::get<RunOptions>(parse({"run", "a"})).cpus.has_value());
  EXPECT_EQ(std::get<RunOptions>(parse({"run", "a", "--cpus", "0"})).cpus, std::vector<int>{0});
  EXPECT_EQ(std::get<RunOptions>(parse({"run", "a", "--cpus=0-1,3"})).cpus,
            (std::vector<int>{0, 1, 3}));
  for (const char* bad : {"1-0", "zero", "0,,1", ""}) {
    const std::string message = usage_error({"run", "a", "--cpus", bad});
    EXPECT_NE(message.find("--cpus"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find("expects a CPU list such as 0, 0-3 or 0,2"), std::string::npos)
        << bad << ": " << message;
    EXPECT_NE(message.find("got '" + std::string(bad) + "'"), std::string::npos) << message;
  }
  EXPECT_NE(usage_error({"list", "a", "--cpus", "0"}).find("unknown option '--cpus'"),
            std::string::npos);
}

TEST(CommandLine, MinSampleTimeTakesADuration) {
  EXPECT_DOUBLE_EQ(std::get<RunOptions>(parse({"run", "a"})).min_sample_time_s,
                   kDefaultMinSampleTimeS);
  EXPECT_DOUBLE_EQ(
      std::get<RunOptions>(parse({"run", "a", "--min-sample-time", "0.5ms"})).min_sample_time_s,
      5e-4);
  EXPECT_DOUBLE_EQ(
      std::get<RunOptions>(parse({"run", "a", "--min-sample-time", "0"})).min_sample_time_s, 0);
  const std::string message = usage_error({"run", "a", "--min-sample-time", "soon"});
  EXPECT_NE(message.find("--min-sample-time"), std::string::npos) << message;
  EXPECT_NE(message.find("got 'soon'"), std::string::npos) << message;
}

TEST(CommandLine, HelpAndVersion) {
  const auto help = std::get<HelpRequest>(parse({"run", "--help"}));
  for (const char* option : {"--suite", "--tag", "--case", "--backend", "--ranks", "--out",
                             "--run-id", "--resume", "--case-timeout", "--cpus",
                             "--min-sample-time", "--progress"}) {
    EXPECT_NE(help.text.find(option), std::string::npos) << option;
  }
  EXPECT_NE(std::get<HelpRequest>(parse({"--help"})).text.find("version"), std::string::npos);
  EXPECT_FALSE(std::get<VersionRequest>(parse({"--version"})).json);
  EXPECT_TRUE(std::get<VersionRequest>(parse({"version", "--json"})).json);
  // Every option of every command has help text: no line of the help ends at an option name.
  const std::string all = usage_text();
  for (const char* option : {"--json", "--version", "--progress", "--resume"}) {
    const std::size_t at = all.find(option);
    ASSERT_NE(at, std::string::npos) << option;
    const std::size_t eol = all.find('\n', at);
    EXPECT_GT(all.substr(at, eol - at).size(), std::string(option).size() + 4) << option;
  }
}

}  // namespace
}  // namespace meshgate::runner
