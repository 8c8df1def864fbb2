#pragma once
// The command line of meshgate-runner (harness/README.md).
#include <stdexcept>
#include <string>
#include <variant>

#include "runner.hpp"

namespace meshgate::runner {

// A command line that cannot be used; the message says what to change.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HelpRequest {};

using Command = std::variant<RunOptions, ListOptions, HelpRequest>;

// Parses argv[1..]; throws UsageError. Options take "--opt value" or "--opt=value".
Command parse_command_line(const std::vector<std::string>& args);

std::string usage_text();

}  // namespace meshgate::runner
