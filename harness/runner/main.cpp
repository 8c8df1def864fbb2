// meshgate-runner: loads case files, runs the selected cases on ranks, writes results.
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"

int main(int argc, char** argv) {
  namespace runner = meshgate::runner;
  const std::vector<std::string> args(argv + 1, argv + argc);
  runner::Command command;
  try {
    command = runner::parse_command_line(args);
  } catch (const runner::UsageError& e) {
    std::cerr << "meshgate-runner: " << e.what() << "\n\n" << runner::usage_text();
    return 2;
  }
  try {
    if (const auto* run = std::get_if<runner::RunOptions>(&command)) {
      return runner::run_command(*run, runner::case_kinds(), std::cout, std::cerr);
    }
    if (const auto* list = std::get_if<runner::ListOptions>(&command)) {
      return runner::list_command(*list, runner::case_kinds(), std::cout, std::cerr);
    }
  } catch (const std::exception& e) {
    // Results already streamed stay in results.jsonl; the driver resumes from there.
    std::cerr << "meshgate-runner: " << e.what() << '\n';
    return 2;
  }
  std::cout << runner::usage_text();
  return 0;
}
