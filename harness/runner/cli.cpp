#include "cli.hpp"

#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "byte_size.hpp"
#include "diagnostics.hpp"
#include "host_state.hpp"
#include "timing.hpp"

namespace meshgate::runner {

namespace {

// --impl-command: a JSON list of arguments (any argument may hold blanks), or plain words.
std::vector<std::string> split_command(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first != std::string::npos && text[first] == '[') {
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      throw std::invalid_argument("is not a JSON list of strings");
    }
    std::vector<std::string> argv;
    if (!parsed.is_array()) throw std::invalid_argument("is not a JSON list of strings");
    for (const auto& arg : parsed) {
      if (!arg.is_string()) throw std::invalid_argument("is not a JSON list of strings");
      argv.push_back(arg.get<std::string>());
    }
    return argv;
  }
  std::vector<std::string> argv;
  std::istringstream words(text);
  for (std::string word; words >> word;) argv.push_back(word);
  return argv;
}

constexpr const char* kPathsHelp =
    "case files or directories (searched recursively for *.yaml, *.yml)";

// The parser with every command and option, writing into the given option structs. One
// definition serves parsing and the help text, so the two cannot drift apart.
struct Parser {
  CLI::App app{"meshgate-runner: loads meshgate case files, runs the selected cases on ranks "
               "and writes results.\nExit code: 0 all pass/skip, 1 any fail, 2 any error or "
               "unusable input.",
               "meshgate-runner"};
  CLI::App* run = nullptr;
  CLI::App* list = nullptr;
  CLI::App* version = nullptr;
  RunOptions run_options;
  ListOptions list_options;
  bool version_flag = false;
  bool version_json = false;

  Parser() {
    app.set_help_flag("-h,--help", "print this help and exit");
    app.add_flag("--version", version_flag, "print the version, commit and backends and exit");
    app.require_subcommand(0, 1);
    app.allow_windows_style_options(false);

    run = app.add_subcommand("run", "run the selected cases and write DIR/results.json");
    run->add_option("paths", run_options.paths, kPathsHelp)->required()->type_name("PATH");
    add_filters(*run, run_options.filter);
    run->add_option("--backend", run_options.backend,
                    "threads (in-process ranks), or mpi|nccl: one process per rank, started "
                    "under mpirun -np N or srun")
        ->check(CLI::IsMember({"threads", "mpi", "nccl"}))
        ->capture_default_str();
    run->add_option("--ranks", run_options.ranks,
                    "cap the world at N ranks; cases needing more are skipped (default: each "
                    "case gets the ranks it needs)")
        ->check(CLI::Validator(
            [](std::string& text) {
              return text.find_first_not_of("0123456789") == std::string::npos && !text.empty() &&
                             text.find_first_not_of('0') != std::string::npos
                         ? std::string()
                         : "must be a whole number of at least 1, got '" + text + "'";
            },
            "N >= 1"))
        ->type_name("N");
    run->add_option("--out", run_options.out_dir,
                    "folder for results.json and results.jsonl (default reports/<run id>)")
        ->type_name("DIR");
    run->add_option("--run-id", run_options.run_id,
                    "the run's id in results.json (default a fresh one)")
        ->type_name("ID");
    run->add_flag("--resume", run_options.resume,
                  "keep the rows already in DIR/results.jsonl and run only the other cases")
        ->disable_flag_override();
    run->add_option("--case-timeout", run_options.case_timeout_s,
                    "seconds a case may run before it is stopped as an error row; 0 = no limit")
        ->check(CLI::Validator(
            [](std::string& text) {
              char* end = nullptr;
              const double value = std::strtod(text.c_str(), &end);
              // strtod reads "inf" and "nan" too; neither is a number of seconds.
              return !text.empty() && *end == '\0' && std::isfinite(value) && value >= 0
                         ? std::string()
                         : "must be a finite number of seconds >= 0 (0 = no limit), got '" +
                               text + "'";
            },
            "SECONDS >= 0"))
        ->capture_default_str()
        ->type_name("SECONDS");
    add_memory_limit(*run, run_options.validation);
    run->add_option("--impl", run_options.impl,
                    "the implementation under test: meshgate (the default, this runner's library) "
                    "or the name of an external one started by --impl-command "
                    "(docs/impl-protocol.md)")
        ->type_name("NAME");
    run->add_option_function<std::string>(
           "--impl-command",
           [this](const std::string& text) { run_options.impl_command = split_command(text); },
           "the command that starts the --impl implementation: a JSON list of arguments, or "
           "words separated by blanks")
        ->check(CLI::Validator(
            [](std::string& text) {
              try {
                return split_command(text).empty() ? std::string("is empty") : std::string();
              } catch (const std::exception& e) {
                return std::string(e.what());
              }
            },
            "CMD"))
        ->type_name("CMD");
    run->add_option_function<std::string>(
           "--cpus",
           [this](const std::string& text) { run_options.cpus = parse_cpu_list(text); },
           "pin the runner, its rank threads and the processes it starts to these CPUs while the "
           "run lasts, as taskset writes them: 0, 0-3, 0,2 (results.json records the pinning)")
        ->check(CLI::Validator(
            [](std::string& text) {
              return parse_cpu_list(text) ? std::string()
                                          : "expects a CPU list such as 0, 0-3 or 0,2 (CPU "
                                            "numbers from 0, ranges low-high), got '" +
                                                text + "'";
            },
            "LIST"))
        ->type_name("LIST");
    run->add_option_function<std::string>(
           "--min-sample-time",
           [this](const std::string& text) { run_options.min_sample_time_s = *parse_duration(text); },
           "a perf case's timed sample is a batch of calls lasting at least this long, e.g. 1ms, "
           "200us or 0 (one call per sample); default 100us; a case's perf.min_sample_time wins")
        ->check(CLI::Validator(
            [](std::string& text) {
              return parse_duration(text) ? std::string()
                                          : "expects a duration >= 0 such as 1ms, 200us or 0.5s, "
                                            "got '" + text + "'";
            },
            "DURATION"))
        ->type_name("DURATION");
    run->add_flag("--progress", run_options.progress,
                  "print one JSON event per line (plan, start, end, done) instead of text")
        ->disable_flag_override();

    list = app.add_subcommand("list", "print the selected cases, validated, without running them; "
                                      "or, with --kinds, the case kinds this runner knows");
    // Required unless --kinds: checked after parsing (list_without_paths).
    list->add_option("paths", list_options.paths, kPathsHelp)->type_name("PATH");
    add_filters(*list, list_options.filter);
    add_memory_limit(*list, list_options.validation);
    list->add_flag("--json", list_options.json,
                   "print a JSON list of {id, kind, tags, ...}; with --kinds, each kind's "
                   "description")
        ->disable_flag_override();
    list->add_flag("--kinds", list_options.kinds,
                   "list the case kinds instead of cases: each kind's origin (built-in or "
                   "registered), whether --impl can run it and its signals; no PATH")
        ->disable_flag_override();

    version = app.add_subcommand("version", "print the version, commit and backends");
    version->add_flag("--json", version_json, "print them as one JSON object");
  }

  static void add_filters(CLI::App& command, CaseFilter& filter) {
    // One value per occurrence: `--suite a --suite b`, never swallowing the paths after it.
    command.add_option("--suite", filter.suites, "only this suite (repeatable)")
        ->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("S");
    command.add_option("--tag", filter.tags, "only cases with this tag (repeatable)")
        ->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("T");
    command.add_option("--case", filter.case_patterns,
                       "only case ids matching this glob, e.g. 'mesh/slice-*' (repeatable)")
        ->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("ID");
  }

  static void add_memory_limit(CLI::App& command, ValidationOptions& validation) {
    command
        .add_option_function<std::string>(
            "--memory-limit",
            [&validation](const std::string& text) { validation.memory_limit = parse_byte_size(text); },
            "reject cases whose estimated host memory is larger than SIZE, e.g. 64GiB (default "
            "16GiB); a case's memory_limit: key overrides it")
        ->check(CLI::Validator(
            [](std::string& text) {
              const std::optional<std::int64_t> bytes = parse_byte_size(text);
              return bytes && *bytes >= 1 ? std::string()
                                          : "expects a size such as 64GiB or a number of bytes, "
                                            "got '" + text + "'";
            },
            "SIZE"))
        ->type_name("SIZE");
  }

  // The option names a command accepts, for "did you mean".
  static std::vector<std::string> option_names(const CLI::App& command) {
    std::vector<std::string> names;
    for (const CLI::Option* option : command.get_options()) {
      for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    }
    return names;
  }
};

// CLI11's message for an option it does not know, in our words and with a close match.
std::string unknown_option_message(const Parser& parser, const CLI::ExtrasError&) {
  const CLI::App* command = parser.app.get_subcommands().empty()
                                ? &parser.app
                                : parser.app.get_subcommands().front();
  std::vector<std::string> extras = command->remaining();
  const std::string arg = extras.empty() ? "" : extras.front().substr(0, extras.front().find('='));
  const std::string where = command == &parser.app ? "meshgate-runner" : command->get_name();
  if (arg.rfind("-", 0) == 0) {
    return "unknown option '" + arg + "' for " + where + did_you_mean(arg, Parser::option_names(*command));
  }
  return "unexpected argument '" + arg + "' for " + where;
}

// A `list` that cannot be carried out: cases without a PATH, or kinds with a case selection.
std::optional<std::string> list_usage_error(const ListOptions& options) {
  const CaseFilter& filter = options.filter;
  const bool selects = !options.paths.empty() || !filter.suites.empty() || !filter.tags.empty() ||
                       !filter.case_patterns.empty();
  if (options.kinds && selects) {
    return "list --kinds lists the kinds this runner knows: it takes no PATH, --suite, --tag or "
           "--case";
  }
  if (!options.kinds && options.paths.empty()) {
    return "paths is required: list PATH... (or list --kinds for the case kinds)";
  }
  return std::nullopt;
}

}  // namespace

std::string usage_text() {
  Parser parser;
  std::string text = parser.app.help();
  for (const CLI::App* command : {parser.run, parser.list, parser.version}) {
    text += "\n" + command->help("meshgate-runner");
  }
  return text;
}

Command parse_command_line(const std::vector<std::string>& args) {
  Parser parser;
  if (args.empty()) throw UsageError("missing command: run, list or version");
  const std::string& first = args[0];
  if (first.rfind("-", 0) != 0 && first != "run" && first != "list" && first != "version" &&
      first != "help") {
    throw UsageError("unknown command '" + first + "'" +
                     did_you_mean(first, {"run", "list", "version"}) +
                     "; commands are run, list and version");
  }
  if (first == "help") return HelpRequest{usage_text()};
  // CLI11 wants argv from the last argument backwards.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    parser.app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    const auto used = parser.app.get_subcommands();
    return HelpRequest{used.empty() ? usage_text() : used.front()->help("meshgate-runner")};
  } catch (const CLI::ExtrasError& e) {
    throw UsageError(unknown_option_message(parser, e));
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  if (parser.version_flag || parser.version->parsed()) return VersionRequest{parser.version_json};
  if (parser.run->parsed()) return std::move(parser.run_options);
  if (parser.list->parsed()) {
    if (const std::optional<std::string> error = list_usage_error(parser.list_options)) {
      throw UsageError(*error);
    }
    return std::move(parser.list_options);
  }
  throw UsageError("missing command: run, list or version");
}

}  // namespace meshgate::runner
