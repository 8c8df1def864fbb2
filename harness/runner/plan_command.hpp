#pragma once
// `meshgate-plan ...` (what `meshgate plan` runs): explains a redistribution without running it
// (DESIGN.md, command line): the greedy transforms, the merge pass's decision for each run and why, warnings,
// bytes and modeled cost per step, and the min_cost plan when asked. Plans any mesh size: it
// reads layouts and never enumerates ranks.
#include <ostream>
#include <span>
#include <string>

namespace meshgate::runner {

// args: the command line after the program name. Returns the exit code: 0 planned, 2 for a
// usage error or an input the planner rejects (the message says which and why).
int plan_command(std::span<const std::string> args, std::ostream& out, std::ostream& err);

std::string plan_usage_text();

}  // namespace meshgate::runner
