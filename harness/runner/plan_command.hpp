#pragma once
// `meshgate-plan ...` (what `meshgate plan` runs): explains a redistribution without running it
// (harness/README.md): the greedy transforms, the merge pass's decision for each run and why,
// warnings, bytes and modeled cost per step, and the min_cost plan when asked. The planner reads
// layouts only, but the mesh is built as PyTorch builds it, rank map and all, so meshes are limited
// to 2^22 ranks (a usage error above that).
#include <ostream>
#include <span>
#include <string>

namespace meshgate::runner {

// args: the command line after the program name. Returns the exit code: 0 planned, 2 for a
// usage error or an input the planner rejects (the message says which and why).
int plan_command(std::span<const std::string> args, std::ostream& out, std::ostream& err);

std::string plan_usage_text();

}  // namespace meshgate::runner
