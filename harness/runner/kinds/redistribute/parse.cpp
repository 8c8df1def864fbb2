// Reading a redistribute case: its keys, their checks before anything runs, its params and
// memory estimate. The checks against the built mesh are in parse_checks.cpp.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "byte_size.hpp"
#include "kinds/case_values.hpp"
#include "kinds/memory_estimates.hpp"
#include "kinds/redistribute/redistribute_case.hpp"

namespace meshgate::runner {
namespace redistribute_kind {
namespace {

// `reduce:`, an op on the source DTensor.
ReduceSpec parse_reduce(CaseNode& node) {
  CaseNode reduce = node.child("reduce");
  ReduceSpec spec;
  spec.op = reduce.required<std::string>("op");
  const std::vector<std::string>& ops = reduce_ops();
  if (std::find(ops.begin(), ops.end(), spec.op) == ops.end()) {
    reduce.fail("op", "unknown reduction '" + spec.op + "' (known: " + join(ops) + ")");
  }
  spec.dim = reduce.optional<std::int64_t>("dim");
  if (spec.dim && !is_reduction(spec.op)) {
    std::string reductions;  // named from the op list, so that a new reduction is named too
    for (const std::string& op : ops) {
      if (is_reduction(op)) reductions += (reductions.empty() ? "" : ", ") + op;
    }
    reduce.fail("dim", "applies to a reduction (" + reductions + "), not to " + spec.op +
                           ": remove it");
  }
  if (!spec.dim && needs_dim(spec.op)) {
    reduce.fail("op", spec.op + " needs `dim`: the dim torch." + spec.op.substr(0, 3) +
                          " reduces, whose indices it answers");
  }
  spec.scalar = reduce.optional<double>("scalar");
  if (spec.op == "add" && !spec.scalar) {
    reduce.fail("op", "add needs `scalar`: the number added to the tensor, e.g. scalar: 10");
  }
  if (spec.op != "add" && spec.scalar) {
    reduce.fail("scalar", "is what add adds, not an argument of " + spec.op + ": remove it");
  }
  if (spec.op == "mm") {
    if (!reduce.has("other")) {
      reduce.fail("op", "mm needs `other`: the placements of its second operand, the "
                        "tensor's transpose, e.g. other: [S(0), R]");
    }
    spec.other = split_placement_items(read_placements_text(reduce.raw("other"), reduce,
                                                            "other"));
  } else if (reduce.has("other")) {
    reduce.fail("other", "is the second operand of mm, not of " + spec.op + ": remove it");
  }
  for (const char* key : {"to", "api", "steps", "perf"}) {
    if (node.has(key)) {
      node.fail(key, "does not apply to a `reduce` case, whose result is gathered with "
                     "full_tensor(): remove it");
    }
  }
  return spec;
}

// `flatten:`, the mesh dims flattened before the redistribution.
std::vector<FlattenDims> parse_flatten(CaseNode& node) {
  std::vector<FlattenDims> out;
  if (YAML::Node v = node.raw("flatten"); v && !v.IsNull()) {
    if (!v.IsSequence())
      node.fail_at(v, "flatten", "expected a list of dim-name lists such as [[A, C]]");
    for (const auto& item : v) {
      FlattenDims f;
      if (item.IsMap()) {
        for (const auto& kv : item) {
          const std::string k = kv.first.Scalar();
          if (k != "dims" && k != "name") {
            node.fail_at(kv.first, "flatten", "unknown key '" + k + "' (known: dims, name)");
          }
        }
        if (!item["dims"])
          node.fail_at(item, "flatten", "a {dims: [..], name: ..} entry needs dims");
        f.dims = read_dim_names(item["dims"], node, "flatten");
        if (item["name"]) f.name = item["name"].Scalar();
      } else {
        f.dims = read_dim_names(item, node, "flatten");
      }
      out.push_back(std::move(f));
    }
  }
  return out;
}

void parse_tensor(CaseNode& tensor, RedistributeCase& c) {
  c.shape = tensor.required<std::vector<std::int64_t>>("shape");
  for (std::int64_t s : c.shape) {
    if (s < 0) {
      reject_value(tensor, "shape", "tensor sizes must be non-negative, got " + std::to_string(s));
    }
  }
  const std::string dtype = tensor.optional<std::string>("dtype").value_or("float32");
  try {
    c.dtype = parse_tensor_dtype(dtype);
  } catch (const meshgate::Error& err) {
    reject_value(tensor, "dtype", err.what());
  }
}

// `from` (a strided shard stands as S(d) in from_text) and `to`.
void parse_from_to(CaseNode& node, RedistributeCase& c) {
  YAML::Node from = node.raw("from");
  YAML::Node to = node.raw("to");
  if (!from) node.fail("from", "is required (a list of placements)");
  if (!to && !c.reduce) node.fail("to", "is required (a list of placements)");
  c.from_written = split_placement_items(read_placements_text(from, node, "from"));
  {
    // A strided shard stands as S(d) in from_text, for the checks meshgate can make.
    std::vector<std::string> model;
    for (const std::string& item : c.from_written) {
      std::optional<std::pair<std::int64_t, std::int64_t>> ss;
      try {
        ss = parse_strided(item);
      } catch (const std::runtime_error& err) {
        reject_value(node, "from", err.what());
      }
      c.strided = c.strided || ss.has_value();
      model.push_back(ss ? "S(" + std::to_string(ss->first) + ")" : item);
    }
    c.from_text = placements_text(model);
    if (c.strided) {
      for (const std::string& item : model) {
        if (item.rfind("P", 0) == 0) {
          node.fail("from", "a source with a strided shard is built from the global tensor "
                            "(distribute_tensor), which takes no Partial placement");
        }
      }
    }
  }
  if (to) {
    const std::vector<std::string> items = read_placements_text(to, node, "to");
    for (const std::string& item : split_placement_items(items)) {
      if (item.rfind("SS", 0) == 0) {
        node.fail("to", "meshgate has no strided shard (SS(d,k)) to redistribute to, so nothing "
                        "could judge the target's shards; a strided shard is a source only");
      }
    }
    c.to_text = placements_text(items);
  }
}

void parse_api_planner(CaseNode& node, RedistributeCase& c) {
  c.options.optimize = node.optional<bool>("optimize").value_or(true);
  if (auto api = node.optional<std::string>("api")) {
    if (*api == "full_tensor") {
      // DTensor.full_tensor(): redistribute to Replicate on every dim through the public api.
      c.full_tensor = true;
      c.options.api = Api::public_;
    } else {
      try {
        c.options.api = parse_api(*api);
      } catch (const meshgate::Error& err) {
        reject_value(node, "api",
                     std::string(err.what()) + "; or full_tensor (DTensor.full_tensor())");
      }
    }
  }
  if (auto planner = node.optional<std::string>("planner")) {
    try {
      c.options.planner = parse_planner(*planner);
    } catch (const meshgate::Error& err) {
      reject_value(node, "planner", err.what());
    }
  }
}

void parse_expect(CaseNode& expect, RedistributeCase& c) {
  c.expect_comms = expect.optional<std::vector<std::string>>("comms");
  c.expect_local_shape = expect.optional<std::vector<std::int64_t>>("local_shape");
  c.expect_warnings = expect.optional<std::int64_t>("warnings");
  c.expect_wrong_shapes = expect.optional<std::int64_t>("wrong_shapes").value_or(0);
  c.expect_wrong_elements = expect.optional<std::int64_t>("wrong_elements").value_or(0);
  for (const auto& [key, value] : {std::pair{"wrong_shapes", c.expect_wrong_shapes},
                                   std::pair{"wrong_elements", c.expect_wrong_elements}}) {
    if (value < 0) expect.fail(key, "must be a count >= 0, got " + std::to_string(value));
  }
  if (c.expect_warnings && *c.expect_warnings < 0) {
    expect.fail("warnings", "must be a count >= 0, got " + std::to_string(*c.expect_warnings));
  }
  c.expect_placements = expect.optional<std::vector<std::string>>("placements");
  if (c.expect_placements && !c.reduce) {
    expect.fail("placements", "describes the result of `reduce`; a redistribution ends at "
                              "`to`");
  }
  c.expect_graph_breaks = expect.optional<std::int64_t>("graph_breaks");
  if (c.expect_graph_breaks && *c.expect_graph_breaks < 0) {
    expect.fail("graph_breaks",
                "must be a count >= 0, got " + std::to_string(*c.expect_graph_breaks));
  }
  c.expect_distinct_plans = expect.optional<std::int64_t>("distinct_plans");
  if (c.expect_distinct_plans && *c.expect_distinct_plans < 1) {
    expect.fail("distinct_plans",
                "must be a count >= 1 (1: every rank issues the same collectives), got " +
                    std::to_string(*c.expect_distinct_plans));
  }
}

void parse_steps(CaseNode& node, RedistributeCase& c) {
  c.steps = node.optional<std::vector<std::string>>("steps");
  if (c.steps) {
    for (const char* key : {"optimize", "planner"}) {
      if (node.has(key)) {
        node.fail(key, "has no effect with `steps`, which replaces planning: remove one");
      }
    }
  } else if (c.expect_wrong_shapes || c.expect_wrong_elements) {
    node.fail("expect", "wrong_shapes / wrong_elements describe a plan written out in `steps`; "
                        "a planned redistribution must be right");
  }
}

// The mesh, with its flattened dims, and the ranks the case runs on. The mesh, flattens and
// placements must make sense before anything runs; what only the planner or the executor can
// reject (e.g. S(0) -> P(sum)) is rejected when the case runs.
DeviceMesh build_checked_mesh(CaseNode& node, RedistributeCase& c) {
  check_runnable_mesh(node, c.mesh_spec);
  try {
    check_comm_string_names(c.mesh_spec.names);
  } catch (const meshgate::Error& err) {
    CaseNode mesh_node = node.child("mesh");
    reject_value(mesh_node, "names", err.what());
  }
  std::optional<DeviceMesh> mesh;
  try {
    mesh = c.mesh_spec.build();
  } catch (const meshgate::Error& err) {
    reject_value(node, "mesh", err.what());
  }
  try {
    for (const FlattenDims& f : c.flatten) mesh->slice(f.dims).flatten(f.name);
  } catch (const meshgate::Error& err) {
    reject_value(node, "flatten", err.what());
  }
  // The world runs up to the mesh's highest rank, over every row of the mesh (dim 0's groups
  // hold every rank of every row).
  std::int64_t lowest = std::numeric_limits<std::int64_t>::max();
  std::int64_t highest = 0;
  for (const auto& group : mesh->groups(std::int64_t{0})) {
    for (std::int64_t r : group) {
      lowest = std::min(lowest, r);
      highest = std::max(highest, r);
    }
  }
  c.case_ranks = case_world_size(node, highest);
  c.reference_rank = lowest;
  return std::move(*mesh);
}

nlohmann::json case_params(CaseNode& node, const RedistributeCase& c) {
  nlohmann::json flat = nlohmann::json::array();
  for (const FlattenDims& f : c.flatten) flat.push_back(f.dims);
  nlohmann::json params = {
      {"mesh", yaml_to_json(node.node()["mesh"])},
      {"flatten", flat},
      {"tensor", {{"shape", c.shape}, {"dtype", std::string(comm::to_string(c.dtype))}}},
      {"from", c.strided ? placements_text(c.from_written) : c.from_text},
      {"to", c.to_text},
      {"optimize", c.options.optimize},
      {"api", c.api_name()},
      {"planner", std::string(to_string(c.options.planner))}};
  if (c.steps) params["steps"] = *c.steps;
  if (c.torch_cost) params["torch_cost"] = torch_cost_request(*c.torch_cost);
  if (c.compile) params["compile"] = true;
  if (c.shard_order) params["shard_order"] = *c.shard_order;
  if (c.reduce) {
    params["reduce"] = {
        {"op", c.reduce->op},
        {"dim", c.reduce->dim ? nlohmann::json(*c.reduce->dim) : nlohmann::json()}};
    if (c.reduce->op == "mm") params["reduce"]["other"] = c.reduce->other;
    if (c.reduce->scalar) params["reduce"]["scalar"] = scalar_json(*c.reduce->scalar);
  }
  return params;
}

}  // namespace

// Every rank builds the whole global tensor and holds up to its size in each of: its source
// shard, the merged and the unmerged results, the target shard to compare with, the
// executor's gathered intermediate, and the float64 copy the check reduces; the replica check
// gathers the result from every rank of the Replicate target dims. Shards count as the whole
// tensor: an upper bound, exact for replicated placements.
MemoryEstimate RedistributeCase::memory_estimate() const {
  constexpr double kCopies = 6;  // global, source, merged, unmerged, target, intermediate
  double elements = 1;
  for (std::int64_t s : shape) elements *= static_cast<double>(s);
  const double tensor = elements * static_cast<double>(comm::element_size(dtype));
  double replicas = 1;
  const std::vector<double> dims = mesh_dim_sizes(mesh_spec);
  const std::vector<Placement> to = parse_placements(to_text);
  for (std::size_t m = 0; m < to.size() && m < dims.size(); ++m) {
    if (to[m].is_replicate()) replicas *= dims[m];
  }
  const double per_rank = tensor * (kCopies + replicas) + elements * 8;
  // Every row of a mesh whose layout leaves ranks of its rank map to other rows runs.
  const double n = rank_map_estimate(mesh_spec);
  char ranks_text[32];
  std::snprintf(ranks_text, sizeof ranks_text, "%.4g", n);
  return {per_rank * n, "tensor.shape",
          std::string(ranks_text) + " ranks x " + format_byte_size(per_rank) + ": a " +
              format_byte_size(tensor) + " tensor held " +
              std::to_string(static_cast<int>(kCopies + replicas)) +
              " times (global, shards, results, replicas) and once as float64"};
}

}  // namespace redistribute_kind

using namespace redistribute_kind;

const std::vector<std::string>& redistribute_case_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = mesh_spec_keys("mesh");
    for (std::string key :
         {"flatten", "tensor", "tensor.shape", "tensor.dtype", "from", "to", "optimize", "api",
          "compile", "expect.graph_breaks", "shard_order",
          "planner", "expect", "expect.comms", "expect.local_shape", "expect.warnings",
          "expect.distinct_plans", "expect.wrong_shapes", "expect.wrong_elements", "steps",
          "reduce", "reduce.op", "reduce.dim", "reduce.other", "reduce.scalar",
          "expect.placements"})
      k.push_back(std::move(key));
    for (const std::string& key : torch_cost_keys()) k.push_back(key);
    return k;
  }();
  return keys;
}

std::unique_ptr<PreparedCase> parse_redistribute_case(CaseNode& node, bool expect_error) {
  auto c = std::make_unique<RedistributeCase>();
  c->mesh_spec = read_mesh_spec(node);
  if (node.has("reduce")) c->reduce = parse_reduce(node);
  c->flatten = parse_flatten(node);
  CaseNode tensor = node.child("tensor");
  parse_tensor(tensor, *c);
  parse_from_to(node, *c);
  parse_api_planner(node, *c);
  std::optional<CaseNode> expect_node;
  if (node.has("expect")) parse_expect(expect_node.emplace(node.child("expect")), *c);
  parse_steps(node, *c);

  const DeviceMesh mesh = build_checked_mesh(node, *c);
  const std::size_t mesh_dims = mesh.shape().size();
  if (c->reduce) check_reduce_case(node, *c, mesh);
  if (c->full_tensor) check_full_tensor(node, *c, mesh_dims);
  check_specs(node, *c, mesh, expect_error);
  if (node.has("shard_order")) c->shard_order = parse_shard_order(node, *c);
  parse_compile(node, *c);
  if (node.has("torch_cost")) parse_case_torch_cost(node, *c, mesh, expect_error);
  check_steps(node, *c, mesh);
  try {
    if (!c->deferred_rejection) check_avg_dtype(*c, tensor, mesh);
  } catch (const ValueRejection& rejection) {
    // A case that expects the rejection runs, and raises it then, so that another
    // implementation is asked whether it refuses too; otherwise the case cannot run.
    if (!expect_error) throw;
    c->deferred_rejection = Error(ErrorKind::runtime, rejection.what());
  }
  if (expect_node && !c->deferred_rejection) check_expect(*c, *expect_node, mesh);
  c->params_json = case_params(node, *c);
  return c;
}

}  // namespace meshgate::runner
