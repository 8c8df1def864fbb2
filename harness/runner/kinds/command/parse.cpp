// Reading a command case: its keys, the program and its arguments, ranks, timeout and the
// variables of `env`; its params.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "diagnostics.hpp"
#include "kinds/command/command_case.hpp"

namespace meshgate::runner::command_kind {
namespace {

// Set by the runner for each rank; a case's `env` may not set them.
const std::vector<std::string>& runner_variables() {
  static const std::vector<std::string> names = {
      "RANK",        "WORLD_SIZE",  "LOCAL_RANK",     "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "MESHGATE_RESULT"};
  return names;
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

// A command case's program judges itself and times itself: neither expect_error nor the
// runner's own warm-up and iterations apply to it.
void reject_keys_the_program_owns(CaseNode& node, bool expect_error) {
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
}

// `command`: the program and its arguments, as a list the runner never splits.
std::vector<std::string> read_command(CaseNode& node) {
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
  std::vector<std::string> argv;
  for (const YAML::Node& item : command) {
    if (!item.IsScalar()) {
      node.fail_at(item, "command",
                   "expected a string for each argument, got " + describe_node(item));
    }
    argv.push_back(item.Scalar());
  }
  if (argv[0].empty()) {
    node.fail_at(command[0], "command", "the program's name is empty");
  }
  return argv;
}

// `ranks` and `timeout`, into `c` when given.
void read_limits(CaseNode& node, CommandCase& c) {
  if (const std::optional<int> ranks = node.optional<int>("ranks")) {
    if (*ranks < 1 || *ranks > kMaxRanks) {
      reject_value(node, "ranks",
                   "must be 1 to " + std::to_string(kMaxRanks) + " (one process each), got " +
                       std::to_string(*ranks));
    }
    c.rank_count = *ranks;
  }
  if (const std::optional<double> timeout = node.optional<double>("timeout")) {
    if (!std::isfinite(*timeout) || *timeout <= 0) {
      reject_value(node, "timeout",
                   "must be a number of seconds above 0, got " + node.raw("timeout").Scalar());
    }
    c.timeout_s = *timeout;
  }
}

// One name of `env`: a variable name the runner does not set itself.
void check_variable_name(CaseNode& node, const YAML::Node& key) {
  const std::string name = key.Scalar();
  if (!is_variable_name(name)) {
    node.fail_at(key, "env",
                 quote_value(name) +
                     " is not a variable name (letters, digits and '_', "
                     "not starting with a digit)");
  }
  const auto& reserved = runner_variables();
  if (std::find(reserved.begin(), reserved.end(), name) != reserved.end()) {
    node.fail_at(key, "env",
                 quote_value(name) +
                     " is set by the runner for each rank (RANK, WORLD_SIZE, "
                     "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, MESHGATE_RESULT)");
  }
}

// `env`: variables set on top of the runner's environment, in the case's order.
std::vector<std::pair<std::string, std::string>> read_env(CaseNode& node) {
  std::vector<std::pair<std::string, std::string>> variables;
  const YAML::Node env = node.raw("env");
  if (!env || env.IsNull()) return variables;
  if (!env.IsMap()) {
    node.fail_at(env, "env",
                 "expected a mapping of variable names to values, e.g. {NCCL_DEBUG: WARN}, "
                 "got " +
                     describe_node(env));
  }
  for (auto it = env.begin(); it != env.end(); ++it) {
    check_variable_name(node, it->first);
    const std::string name = it->first.Scalar();
    if (!it->second.IsScalar()) {
      node.fail_at(it->second, "env",
                   "the value of " + quote_value(name) + ": expected a string, got " +
                       describe_node(it->second) + " (write '' for an empty value)");
    }
    variables.emplace_back(name, it->second.Scalar());
  }
  return variables;
}

}  // namespace

nlohmann::json CommandCase::params() const {
  nlohmann::json p = {{"command", command}, {"ranks", rank_count}};
  if (timeout_s) p["timeout"] = *timeout_s;
  if (!env.empty()) {
    nlohmann::json variables = nlohmann::json::object();
    for (const auto& [name, value] : env) variables[name] = value;
    p["env"] = std::move(variables);
  }
  return p;
}

}  // namespace meshgate::runner::command_kind

namespace meshgate::runner {

const std::vector<std::string>& command_case_keys() {
  static const std::vector<std::string> keys = {"command", "ranks", "timeout", "env"};
  return keys;
}

std::unique_ptr<PreparedCase> parse_command_case(CaseNode& node, bool expect_error) {
  using command_kind::CommandCase;
  auto c = std::make_unique<CommandCase>();
  command_kind::reject_keys_the_program_owns(node, expect_error);
  c->command = command_kind::read_command(node);
  command_kind::read_limits(node, *c);
  c->env = command_kind::read_env(node);
  return c;
}

}  // namespace meshgate::runner
