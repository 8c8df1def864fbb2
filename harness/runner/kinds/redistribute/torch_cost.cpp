// `torch_cost:` of a redistribute case (torch_cost.hpp). PyTorch's redistribute_cost prices a
// plan step by step (all_gather, all_to_all, all_reduce and reduce_scatter by an alpha-beta
// model of the mesh dim; a chunk is free) and rates a step it will not let sharding propagation
// choose, Shard -> Partial or one Partial to another, at inf. Infinite costs are therefore
// answers, not errors, and a case says which of its costs are infinite.
#include "kinds/redistribute/torch_cost.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "core/error.hpp"
#include "external_impl.hpp"

namespace meshgate::runner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string number(double v) {
  if (std::isinf(v)) return "inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

// a <= b, with inf <= inf; sums of the same steps in another order differ in the last bits.
bool at_most(double a, double b) {
  if (std::isinf(b)) return true;
  if (std::isinf(a)) return false;
  return a <= b + 1e-9 * std::max(1.0, std::abs(b));
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

}  // namespace

const std::vector<std::string>& torch_cost_names() {
  static const std::vector<std::string> names = {"direct",        "greedy",      "min_cost",
                                                 "plan",          "identity_from", "identity_to",
                                                 "via_first",     "via_second"};
  return names;
}

const std::vector<std::string>& torch_cost_keys() {
  static const std::vector<std::string> keys = {
      "torch_cost", "torch_cost.via", "torch_cost.triangle", "torch_cost.min_cost_le_greedy",
      "torch_cost.infinite"};
  return keys;
}

TorchCostSpec parse_torch_cost(
    CaseNode& node,
    const std::function<std::vector<std::string>(const std::vector<std::string>&)>& canonical) {
  TorchCostSpec spec;
  CaseNode cost = node.child("torch_cost");
  if (YAML::Node via = cost.raw("via"); via && !via.IsNull()) {
    std::vector<std::string> items;
    if (via.IsScalar()) {
      items.push_back(via.Scalar());
    } else if (via.IsSequence()) {
      for (const auto& item : via) {
        if (!item.IsScalar())
          cost.fail_at(item, "via", "each placement is a string such as S(0), R, P(sum)");
        items.push_back(item.Scalar());
      }
    } else {
      cost.fail_at(via, "via", "expected a list of placements such as [R, P(sum)]");
    }
    try {
      spec.via = canonical(items);
    } catch (const meshgate::Error& err) {
      reject_value(cost, "via", err.what());
    }
  }
  spec.triangle = cost.optional<bool>("triangle");
  if (spec.via && !spec.triangle) {
    cost.fail("via", "needs `triangle: true` or `triangle: false`: whether cost(from -> to) <= "
                     "cost(from -> via) + cost(via -> to) holds");
  }
  if (spec.triangle && !spec.via) {
    cost.fail("triangle", "needs `via`: the intermediate placements the triangle goes through");
  }
  spec.min_cost_le_greedy = cost.optional<bool>("min_cost_le_greedy");
  spec.infinite = cost.optional<std::vector<std::string>>("infinite").value_or(
      std::vector<std::string>{});
  std::set<std::string> seen;
  for (const std::string& name : spec.infinite) {
    const std::vector<std::string>& names = torch_cost_names();
    if (std::find(names.begin(), names.end(), name) == names.end() ||
        name.rfind("identity_", 0) == 0) {
      cost.fail("infinite", "unknown cost '" + name +
                                "' (known: direct, greedy, min_cost, plan, via_first, "
                                "via_second; an identity costs 0)");
    }
    if (name.rfind("via_", 0) == 0 && !spec.via) {
      cost.fail("infinite", "'" + name + "' is a cost of the triangle through `via`, which the "
                                         "case does not give");
    }
    if (!seen.insert(name).second) cost.fail("infinite", "lists '" + name + "' twice");
  }
  for (const char* key : {"reduce", "steps"}) {
    if (node.has(key)) {
      node.fail("torch_cost", std::string("prices a planned redistribution; a case with `") + key +
                                  "` has none: remove one");
    }
  }
  return spec;
}

nlohmann::json torch_cost_request(const TorchCostSpec& spec) {
  return {{"via", spec.via ? nlohmann::json(*spec.via) : nlohmann::json()}};
}

namespace {

// The costs the answer gives, by name: each number or "inf" (every name of `wanted` that
// PyTorch did not fail to price); a missing or ill-formed one throws ImplFailure.
std::map<std::string, double> read_costs(const nlohmann::json& answer,
                                         const std::vector<std::string>& wanted) {
  std::map<std::string, double> costs;
  for (const std::string& name : wanted) {
    if (answer["errors"].contains(name)) continue;
    const nlohmann::json& costs_json = answer["costs"];
    if (!costs_json.contains(name)) {
      throw ImplFailure("answered no torch_cost.costs." + name);
    }
    const nlohmann::json& v = costs_json[name];
    if (v.is_number()) {
      costs[name] = v.get<double>();
    } else if (v == "inf") {
      costs[name] = kInf;
    } else {
      throw ImplFailure("answered torch_cost.costs." + name + " = " + v.dump() +
                        ", neither a number nor \"inf\"");
    }
  }
  return costs;
}

// The rules every answer keeps: costs >= 0, identities 0, the infinite costs exactly those the
// case lists.
void judge_cost_rules(const TorchCostSpec& spec, const nlohmann::json& answer,
                      std::map<std::string, double>& costs, std::vector<std::string>& problems) {
  for (const auto& [name, value] : costs) {
    if (value < 0) problems.push_back("torch_cost." + name + " is negative: " + number(value));
  }
  for (const char* name : {"identity_from", "identity_to"}) {
    if (costs.count(name) && costs[name] != 0) {
      problems.push_back(std::string("torch_cost.") + name + " (the cost of a spec to itself) is " +
                         number(costs[name]) + ", not 0");
    }
  }
  // The infinite costs, exactly as the case lists them.
  for (const auto& [name, value] : costs) {
    const bool listed =
        std::find(spec.infinite.begin(), spec.infinite.end(), name) != spec.infinite.end();
    if (std::isinf(value) && !listed && name.rfind("identity_", 0) != 0) {
      const nlohmann::json& why = answer["infinite"].value(name, nlohmann::json("no reason given"));
      problems.push_back("torch_cost." + name + " is inf (" +
                         (why.is_string() ? why.get<std::string>() : why.dump()) +
                         ") but torch_cost.infinite does not list it");
    } else if (!std::isinf(value) && listed) {
      problems.push_back("torch_cost.infinite lists " + name + ", which costs " + number(value));
    }
  }
}

// What the case promises of the costs: min_cost <= greedy, and the triangle through `via`.
void judge_cost_promises(const TorchCostSpec& spec, const nlohmann::json& answer,
                         std::map<std::string, double>& costs, nlohmann::json& metric,
                         std::vector<std::string>& problems) {
  if (costs.count("greedy") && costs.count("min_cost")) {
    const bool holds = at_most(costs["min_cost"], costs["greedy"]);
    metric["min_cost_le_greedy"] = holds;
    if (spec.min_cost_le_greedy && *spec.min_cost_le_greedy != holds) {
      problems.push_back(std::string("torch_cost.min_cost_le_greedy ") +
                         (holds ? "false" : "true") + " but the min-cost plan costs " +
                         number(costs["min_cost"]) + " and the greedy plan " +
                         number(costs["greedy"]));
    }
  }
  if (spec.via && costs.count("plan") && costs.count("via_first") && costs.count("via_second")) {
    const double two_hop = costs["via_first"] + costs["via_second"];
    const bool holds = at_most(costs["plan"], two_hop);
    metric["triangle"] = {{"via", *spec.via},
                          {"holds", holds},
                          {"direct", answer["costs"]["plan"]},
                          {"through_via", std::isinf(two_hop) ? nlohmann::json("inf")
                                                              : nlohmann::json(two_hop)}};
    if (spec.triangle && *spec.triangle != holds) {
      problems.push_back(std::string("torch_cost.triangle ") + (holds ? "false" : "true") +
                         " but cost(from -> to) = " + number(costs["plan"]) +
                         (holds ? " <= " : " > ") + "cost(from -> via) + cost(via -> to) = " +
                         number(costs["via_first"]) + " + " + number(costs["via_second"]) +
                         " = " + number(two_hop) + " (via " + join(*spec.via) + ")");
    }
  }
}

}  // namespace

void judge_torch_cost(const TorchCostSpec& spec, const nlohmann::json& observables,
                      nlohmann::json& metrics, std::vector<std::string>& problems) {
  if (!observables.contains("torch_cost") || !observables["torch_cost"].is_object()) {
    throw ImplFailure("answered no 'torch_cost' object, which the case's torch_cost asks for");
  }
  const nlohmann::json& answer = observables["torch_cost"];
  for (const char* key : {"costs", "infinite", "errors"}) {
    if (!answer.contains(key) || !answer[key].is_object()) {
      throw ImplFailure(std::string("answered torch_cost without a '") + key + "' object");
    }
  }
  std::vector<std::string> wanted = {"direct", "greedy", "min_cost", "plan", "identity_from",
                                     "identity_to"};
  if (spec.via) {
    wanted.push_back("via_first");
    wanted.push_back("via_second");
  }
  std::vector<std::string> errors;
  for (const auto& [name, what] : answer["errors"].items()) {
    errors.push_back(name + " (" + (what.is_string() ? what.get<std::string>() : what.dump()) +
                     ")");
  }
  if (!errors.empty()) {
    problems.push_back("PyTorch failed to price " + join(errors));
  }
  std::map<std::string, double> costs = read_costs(answer, wanted);
  nlohmann::json metric = {{"costs", answer["costs"]}, {"infinite", answer["infinite"]}};
  if (!answer["errors"].empty()) metric["errors"] = answer["errors"];
  judge_cost_rules(spec, answer, costs, problems);
  judge_cost_promises(spec, answer, costs, metric, problems);
  metrics["torch_cost"] = metric;
}

std::string torch_cost_skip_reason() {
  return "meshgate has no model of PyTorch's redistribute_cost; the case's torch_cost (PyTorch's "
         "price of the greedy and min-cost plans, identity, non-negativity, the triangle through "
         "`via`) is judged on another implementation (--impl torch), together with its values "
         "and collectives";
}

}  // namespace meshgate::runner
