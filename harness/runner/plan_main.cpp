// meshgate-plan: explains a redistribution without running it (plan_command.hpp). A binary of
// its own, linked only against the planner and the host C++ runtime, so that it starts in a few
// milliseconds: the runner loads CUDA, cuBLASLt, NCCL and MPI at start-up, which planning never
// needs.
#include <iostream>
#include <string>
#include <vector>

#include "plan_command.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return meshgate::runner::plan_command(args, std::cout, std::cerr);
}
