#pragma once
// `torch_cost:` of a redistribute case: what PyTorch's own cost model (redistribute_cost in
// torch/distributed/tensor/_collective_utils.py) must say of the case's redistribution. Only an
// implementation that has that model answers it (the torch adapter, docs/impl-protocol.md);
// meshgate's own run skips such a case. docs/cases.md lists the keys, docs/kinds.md nothing:
// the checks are all here.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_kind.hpp"

namespace meshgate::runner {

struct TorchCostSpec {
  // The intermediate spec B of the triangle check, one short-form placement per mesh dim.
  std::optional<std::vector<std::string>> via;
  // Whether cost(from -> to) <= cost(from -> via) + cost(via -> to) holds, each cost that of the
  // case's planner's plan.
  std::optional<bool> triangle;
  // Whether the min-cost planner's plan costs no more than the greedy planner's.
  std::optional<bool> min_cost_le_greedy;
  // Exactly the costs PyTorch rates infinite (names of torch_cost_names()); every other must be
  // a finite number >= 0.
  std::vector<std::string> infinite;
};

// The costs an implementation answers: direct, greedy, min_cost, plan, identity_from,
// identity_to, and with `via` via_first and via_second.
const std::vector<std::string>& torch_cost_names();

// The dotted keys under `torch_cost` (for the kind's vocabulary).
const std::vector<std::string>& torch_cost_keys();

// Reads `torch_cost` of `node` (the case). `canonical` turns a placement list as written into
// its short forms for the case's mesh and tensor, throwing meshgate::Error when they cannot hold
// it; that is a rejection at `torch_cost.via`.
TorchCostSpec parse_torch_cost(
    CaseNode& node,
    const std::function<std::vector<std::string>(const std::vector<std::string>&)>& canonical);

// The request's `torch_cost`: {"via": [..] | null}.
nlohmann::json torch_cost_request(const TorchCostSpec& spec);

// Judges an implementation's `torch_cost` observable, {"costs": {name: number | "inf"},
// "infinite": {name: why}, "errors": {name: what raised}}: the row's `torch_cost` metric goes
// into `metrics`, a broken promise of the case into `problems`. A missing or ill-formed answer
// throws ImplFailure.
void judge_torch_cost(const TorchCostSpec& spec, const nlohmann::json& observables,
                      nlohmann::json& metrics, std::vector<std::string>& problems);

// Why meshgate's own run skips a case with `torch_cost`.
std::string torch_cost_skip_reason();

}  // namespace meshgate::runner
