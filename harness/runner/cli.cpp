#include "cli.hpp"

#include <charconv>

#include "byte_size.hpp"
#include "diagnostics.hpp"

namespace meshgate::runner {

std::string usage_text() {
  return "usage:\n"
         "  meshgate-runner run  PATH... [--suite S]... [--tag T]... [--case ID]...\n"
         "                       [--backend threads|mpi|nccl] [--ranks N] [--out DIR]\n"
         "                       [--run-id ID] [--resume] [--case-timeout SECONDS] [--progress]\n"
         "                       [--memory-limit SIZE]\n"
         "  meshgate-runner list PATH... [--suite S]... [--tag T]... [--case ID]... [--json]\n"
         "                       [--memory-limit SIZE]\n"
         "PATH: case files or directories (searched recursively for *.yaml, *.yml).\n"
         "--backend mpi|nccl: start under mpirun -np N or srun; one process per rank.\n"
         "--memory-limit SIZE (e.g. 64GiB): reject cases whose estimated host memory is larger\n"
         "  (default 16GiB); a case's memory_limit: key overrides it.\n"
         "Exit code: 0 all pass/skip, 1 any fail, 2 any error or unusable input.\n";
}

namespace {

int parse_int(const std::string& option, const std::string& text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw UsageError(option + " expects an integer, got '" + text + "'");
  }
  return value;
}

double parse_seconds(const std::string& option, const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || value < 0) {
    throw UsageError(option + " expects a number of seconds >= 0, got '" + text + "'");
  }
  return value;
}

std::int64_t parse_memory_limit(const std::string& option, const std::string& text) {
  const std::optional<std::int64_t> bytes = parse_byte_size(text);
  if (!bytes || *bytes < 1) {
    throw UsageError(option + " expects a size such as 64GiB or a number of bytes, got '" + text +
                     "'");
  }
  return *bytes;
}

}  // namespace

Command parse_command_line(const std::vector<std::string>& args) {
  if (args.empty()) throw UsageError("missing command: run or list");
  const std::string& command = args[0];
  if (command == "-h" || command == "--help" || command == "help") return HelpRequest{};
  if (command != "run" && command != "list") {
    throw UsageError("unknown command '" + command + "'" + did_you_mean(command, {"run", "list"}) +
                     "; commands are run and list");
  }
  const bool is_run = command == "run";
  RunOptions run;
  ListOptions list;
  const std::vector<std::string> run_options = {
      "--suite",  "--tag",    "--case",         "--backend",  "--ranks",       "--out",
      "--run-id", "--resume", "--case-timeout", "--progress", "--memory-limit"};
  const std::vector<std::string> list_options = {"--suite", "--tag", "--case", "--json",
                                                 "--memory-limit"};
  const std::vector<std::string>& allowed = is_run ? run_options : list_options;
  CaseFilter filter;
  std::vector<std::string> paths;

  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "-h" || arg == "--help") return HelpRequest{};
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      paths.push_back(arg);
      continue;
    }
    std::optional<std::string> inline_value;
    if (const std::size_t eq = arg.find('='); eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (std::find(allowed.begin(), allowed.end(), arg) == allowed.end()) {
      throw UsageError("unknown option '" + arg + "' for " + command + did_you_mean(arg, allowed));
    }
    const bool is_flag = arg == "--resume" || arg == "--progress" || arg == "--json";
    if (is_flag) {
      if (inline_value) throw UsageError(arg + " takes no value");
      if (arg == "--resume") run.resume = true;
      if (arg == "--progress") run.progress = true;
      if (arg == "--json") list.json = true;
      continue;
    }
    std::string value;
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      throw UsageError(arg + " needs a value");
    }
    if (arg == "--suite") {
      filter.suites.push_back(value);
    } else if (arg == "--tag") {
      filter.tags.push_back(value);
    } else if (arg == "--case") {
      filter.case_patterns.push_back(value);
    } else if (arg == "--backend") {
      run.backend = value;
    } else if (arg == "--ranks") {
      run.ranks = parse_int(arg, value);
      if (*run.ranks < 1) throw UsageError("--ranks must be at least 1, got " + value);
    } else if (arg == "--out") {
      run.out_dir = value;
    } else if (arg == "--run-id") {
      run.run_id = value;
    } else if (arg == "--case-timeout") {
      run.case_timeout_s = parse_seconds(arg, value);
    } else if (arg == "--memory-limit") {
      run.validation.memory_limit = list.validation.memory_limit = parse_memory_limit(arg, value);
    }
  }
  if (paths.empty()) throw UsageError(command + " needs at least one case file or directory");
  if (is_run) {
    run.paths = std::move(paths);
    run.filter = std::move(filter);
    return run;
  }
  list.paths = std::move(paths);
  list.filter = std::move(filter);
  return list;
}

}  // namespace meshgate::runner
