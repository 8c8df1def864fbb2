#pragma once
// The command line of meshgate-runner (harness/README.md), parsed with CLI11.
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "runner.hpp"

namespace meshgate::runner {

// A command line that cannot be used; the message says what to change.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --help: `text` is the help of the command asked about (or of the runner).
struct HelpRequest {
  std::string text;
};

// --version (or `version`): what the runner is and what it was built with.
struct VersionRequest {
  bool json = false;
};

using Command = std::variant<RunOptions, ListOptions, HelpRequest, VersionRequest>;

// Parses argv[1..]; throws UsageError. Options take "--opt value" or "--opt=value".
Command parse_command_line(const std::vector<std::string>& args);

// The runner's help: its commands and every option of each.
std::string usage_text();

}  // namespace meshgate::runner
