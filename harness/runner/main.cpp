// meshgate-runner: loads case files, runs the selected cases on ranks, writes results.
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "provenance.hpp"

int main(int argc, char** argv) {
  namespace runner = meshgate::runner;
  const std::vector<std::string> args(argv + 1, argv + argc);
  runner::Command command;
  try {
    command = runner::parse_command_line(args);
  } catch (const runner::UsageError& e) {
    std::cerr << "meshgate-runner: " << e.what() << "\nrun 'meshgate-runner --help' for the "
              << "commands and options\n";
    return 2;
  }
  if (const auto* help = std::get_if<runner::HelpRequest>(&command)) {
    std::cout << help->text;
    return 0;
  }
  if (const auto* version = std::get_if<runner::VersionRequest>(&command)) {
    if (version->json) {
      std::cout << runner::build_info().dump() << '\n';
    } else {
      std::cout << runner::version_text() << '\n';
    }
    return 0;
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
  return 0;
}
