// Checks of a redistribute case that need its mesh: what `reduce` asks of the tensor, what
// `expect` and `shard_order` say, and whether an integer dtype meets an avg reduction.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kinds/redistribute/redistribute_case.hpp"

namespace meshgate::runner::redistribute_kind {

// What `reduce` asks of the tensor and the mesh: t and mm take a 2-D tensor, mm's `other`
// places the tensor's transpose, `dim` is one of the tensor's. The op's result is gathered with
// full_tensor(): `to` is Replicate on every dim.
void check_reduce_case(CaseNode& node, RedistributeCase& c, const DeviceMesh& mesh) {
  const std::size_t mesh_dims = mesh.shape().size();
  c.to_text = placements_text(std::vector<std::string>(mesh_dims, "R"));
  if ((c.reduce->op == "t" || c.reduce->op == "mm") && c.shape.size() != 2) {
    CaseNode reduce = node.child("reduce");
    reduce.fail("op", c.reduce->op + " takes a 2-D tensor; tensor.shape " +
                          shape_text(c.shape) + " has " + std::to_string(c.shape.size()) +
                          " dims");
  }
  if (c.reduce->op == "mm") {
    // The second operand holds the tensor's transpose, placed as `other` says.
    CaseNode reduce = node.child("reduce");
    if (c.reduce->other.size() != mesh_dims) {
      reduce.fail("other", std::to_string(c.reduce->other.size()) + " placement(s) for a " +
                               std::to_string(mesh_dims) + "-D mesh");
    }
    std::vector<std::string> model;
    for (const std::string& item : c.reduce->other) {
      std::optional<std::pair<std::int64_t, std::int64_t>> ss;
      try {
        ss = parse_strided(item);
      } catch (const std::runtime_error& err) {
        reduce.fail("other", err.what());
      }
      if (!ss && item.rfind("P", 0) == 0) {
        reduce.fail("other", "the second operand is built from the global tensor "
                             "(distribute_tensor), which takes no Partial placement");
      }
      model.push_back(ss ? "S(" + std::to_string(ss->first) + ")" : item);
    }
    try {
      const Shape transposed = {c.shape.at(1), c.shape.at(0)};
      DTensorSpec::create(mesh, parse_placements(placements_text(model)), transposed,
                          static_cast<std::int64_t>(comm::element_size(c.dtype)));
    } catch (const meshgate::Error& err) {
      reduce.fail("other", err.what());
    }
  }
  if (c.reduce->dim && (*c.reduce->dim >= static_cast<std::int64_t>(c.shape.size()) ||
                         *c.reduce->dim < -static_cast<std::int64_t>(c.shape.size()))) {
    CaseNode reduce = node.child("reduce");
    reduce.fail("dim", "dim " + std::to_string(*c.reduce->dim) + " is outside the tensor's " +
                           std::to_string(c.shape.size()) + " dims");
  }
}

// Expectations no run can meet are input errors naming the entry: a local shape of another
// rank than the tensor's or with a size outside [0, the tensor's], more ranks with a wrong
// shape than the case runs on, and comm strings that the executor never writes (they must
// parse as steps do, name dims of the mesh and tensor dims of the tensor, be collectives, and
// be written as issued, e.g. with their dims in ascending order).
void check_expect(const RedistributeCase& c, CaseNode& expect, const DeviceMesh& mesh) {
  if (c.expect_local_shape && c.reduce) {
    // The op's result, gathered: the tensor's shape without the reduced dim (all dims: []);
    // t reverses the 2-D shape, mm of [n, k] with its transpose is [n, n], full_tensor keeps it.
    Shape reduced;
    if (c.reduce->op == "t") {
      reduced = {c.shape.at(1), c.shape.at(0)};
    } else if (c.reduce->op == "mm") {
      reduced = {c.shape.at(0), c.shape.at(0)};
    } else if (c.reduce->op == "full_tensor" || c.reduce->op == "add") {
      reduced = c.shape;
    } else if (c.reduce->dim) {
      const auto rank = static_cast<std::int64_t>(c.shape.size());
      const std::int64_t dim = *c.reduce->dim < 0 ? *c.reduce->dim + rank : *c.reduce->dim;
      for (std::int64_t d = 0; d < rank; ++d) {
        if (d != dim) reduced.push_back(c.shape[static_cast<std::size_t>(d)]);
      }
    }
    if (*c.expect_local_shape != reduced) {
      const std::string what =
          !is_reduction(c.reduce->op)
              ? op_call(c.reduce->op)
              : c.reduce->op + " over " +
                    (c.reduce->dim ? "dim " + std::to_string(*c.reduce->dim)
                                   : std::string("every dim"));
      expect.fail("local_shape", shape_text(*c.expect_local_shape) + " is not the shape of " +
                                     what + " of " + shape_text(c.shape) + ", " +
                                     shape_text(reduced));
    }
  } else if (c.expect_local_shape) {
    const Shape& want = *c.expect_local_shape;
    if (want.size() != c.shape.size()) {
      expect.fail("local_shape",
                  shape_text(want) + " has another rank than the tensor " + shape_text(c.shape));
    }
    for (std::size_t d = 0; d < want.size(); ++d) {
      if (want[d] < 0 || want[d] > c.shape[d]) {
        expect.fail_at(expect.raw("local_shape")[d], "local_shape",
                       "size " + std::to_string(want[d]) + " of dim " + std::to_string(d) +
                           " is outside [0, " + std::to_string(c.shape[d]) +
                           "], the tensor's size there");
      }
    }
  }
  if (c.expect_wrong_shapes > c.case_ranks) {
    expect.fail("wrong_shapes", std::to_string(c.expect_wrong_shapes) +
                                    " ranks, but the case runs on " + std::to_string(c.case_ranks));
  }
  if (!c.expect_comms) return;
  const auto es = static_cast<std::int64_t>(comm::element_size(c.dtype));
  const DTensorSpec src = DTensorSpec::create(mesh, parse_placements(c.from_text), c.shape, es);
  const YAML::Node items = expect.raw("comms");
  for (std::size_t i = 0; i < c.expect_comms->size(); ++i) {
    const std::string& text = (*c.expect_comms)[i];
    StepList parsed;
    try {
      parsed = steps_from_text(src, std::vector<std::string>{text});
    } catch (const meshgate::Error& err) {
      expect.fail_at(items[i], "comms", err.what());
    }
    const TransformStep& step = parsed.front();
    if (!is_collective(step.kind)) {
      expect.fail_at(items[i], "comms",
                     "'" + text + "' is a local step; comms lists the collectives issued");
    }
    const std::string issued = to_string(step, mesh);
    if (issued != text) {
      expect.fail_at(
          items[i], "comms",
          "'" + text + "' is never issued as written: the executor writes it '" + issued + "'");
    }
  }
}

// Every backend refuses an avg reduction of an integer dtype (it would have to round), so a
// case whose plans issue one can never run: a rejection of its dtype, not a failed kernel. The
// unmerged plan runs beside every case and holds each avg reduction that a merged or min_cost
// plan issues (merging turns avg into sum); its steps do not depend on the rank's coordinate.
// Plans the planner rejects (S -> P, ...) are left to the run, which reports that error.
void check_avg_dtype(const RedistributeCase& c, const CaseNode& tensor, const DeviceMesh& mesh) {
  if (comm::is_floating(c.dtype)) return;
  const auto es = static_cast<std::int64_t>(comm::element_size(c.dtype));
  const DTensorSpec src = DTensorSpec::create(mesh, parse_placements(c.from_text), c.shape, es);
  const DTensorSpec dst = DTensorSpec::create(mesh, parse_placements(c.to_text), c.shape, es);
  StepList steps;
  try {
    PlanOptions plain = c.options;
    plain.optimize = false;
    plain.planner = Planner::greedy;
    steps = plan_redistribute(src, dst, {}, plain).steps;
  } catch (const meshgate::Error&) {
  }
  if (c.steps) {
    for (TransformStep& s : steps_from_text(src, *c.steps)) steps.push_back(std::move(s));
  }
  for (const TransformStep& s : steps) {
    const bool reduces = s.kind == StepKind::all_reduce || s.kind == StepKind::reduce_scatter;
    if (!reduces || s.group_size <= 1 || s.reduce_op != ReduceOp::avg) continue;
    reject_value(tensor, "dtype",
                 "the plan issues " + to_string(s, mesh) + ", and an avg reduction of " +
                     std::string(comm::to_string(c.dtype)) +
                     " is supported by no backend (it would round): use a floating-point dtype, "
                     "or P(sum)");
  }
}

// `shard_order: [{dim: D, mesh_dims: [B, A]}, ...]`: for each tensor dim the source shards
// over more than one mesh dim, every mesh dim whose placement in `from` is S(D), in the order
// they shard it (mesh dims by name or index). Normalised to indices.
nlohmann::json parse_shard_order(CaseNode& node, const RedistributeCase& c) {
  if (c.strided) {
    node.fail("shard_order", "is given by the strided shards of `from` already (PyTorch "
                             "derives the order from _StridedShard): remove one");
  }
  if (c.steps || c.reduce) {
    node.fail("shard_order", c.steps ? "has no effect with `steps`, which replaces planning"
                                     : "orders the source of a redistribution, not of `reduce`");
  }
  const YAML::Node list = node.node()["shard_order"];
  if (!list.IsSequence() || list.size() == 0) {
    node.fail("shard_order", "must be a list of {dim: D, mesh_dims: [..]}, one per tensor dim "
                             "sharded over several mesh dims");
  }
  const std::vector<Placement> from = parse_placements(c.from_text);
  const std::vector<std::string>& names = c.mesh_spec.names;
  const auto mesh_dim = [&](const YAML::Node& item) -> std::int64_t {
    const std::string text = item.as<std::string>();
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == text) return static_cast<std::int64_t>(i);
    }
    try {
      std::size_t used = 0;
      const long long index = std::stoll(text, &used);
      if (used == text.size() && index >= 0 && index < static_cast<long long>(from.size())) {
        return index;
      }
    } catch (const std::exception&) {
    }
    node.fail("shard_order", "names mesh dim '" + text + "', which the mesh lacks");
    return -1;
  };
  nlohmann::json out = nlohmann::json::array();
  std::set<std::int64_t> dims_seen;
  for (const YAML::Node& entry : list) {
    if (!entry.IsMap() || !entry["dim"] || !entry["mesh_dims"] || !entry["mesh_dims"].IsSequence() ||
        entry.size() != 2) {
      node.fail("shard_order", "each entry is {dim: D, mesh_dims: [..]}");
    }
    std::int64_t dim = -1;
    try {
      dim = entry["dim"].as<std::int64_t>();
    } catch (const YAML::Exception&) {
      node.fail("shard_order", "an entry's dim must be a tensor dim, an integer");
    }
    if (!dims_seen.insert(dim).second) {
      node.fail("shard_order", "orders tensor dim " + std::to_string(dim) + " twice");
    }
    std::vector<std::int64_t> order;
    for (const YAML::Node& item : entry["mesh_dims"]) order.push_back(mesh_dim(item));
    std::vector<std::int64_t> sharding;
    for (std::size_t m = 0; m < from.size(); ++m) {
      if (from[m].is_shard() && from[m].dim() == dim) sharding.push_back(static_cast<std::int64_t>(m));
    }
    std::vector<std::int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != sharding) {
      node.fail("shard_order", "orders tensor dim " + std::to_string(dim) + " over mesh dims " +
                                   nlohmann::json(order).dump() + ", but `from` shards it (S(" +
                                   std::to_string(dim) + ")) on mesh dims " +
                                   nlohmann::json(sharding).dump() +
                                   ": list each of those once");
    }
    out.push_back({{"dim", dim}, {"mesh_dims", order}});
  }
  return out;
}

// `api: full_tensor` gathers to Replicate on every mesh dim.
void check_full_tensor(CaseNode& node, const RedistributeCase& c, std::size_t mesh_dims) {
  const std::vector<std::string> all_r(mesh_dims, "R");
  const std::vector<Placement> want = parse_placements(placements_text(all_r));
  std::vector<Placement> got;
  try {
    got = parse_placements(c.to_text);
  } catch (const meshgate::Error&) {
  }
  if (got != want) {
    node.fail("to", "api full_tensor gathers to Replicate on every mesh dim: `to` must be " +
                        join(all_r));
  }
}

// `from` and `to` as specs on the mesh. Partial placements of different reduce ops are a spec
// DTensor refuses, as a user would see it: a case that expects the refusal runs (and raises
// it), so that another implementation is asked too. The spec's other checks stay input errors.
void check_specs(CaseNode& node, RedistributeCase& c, const DeviceMesh& mesh, bool expect_error) {
  const auto es = static_cast<std::int64_t>(comm::element_size(c.dtype));
  for (const auto& [key, text] : {std::pair{"from", c.from_text}, std::pair{"to", c.to_text}}) {
    std::vector<Placement> placements;
    try {
      placements = parse_placements(text);
    } catch (const meshgate::Error& err) {
      reject_value(node, key, err.what());
    }
    try {
      DTensorSpec::create(mesh, placements, c.shape, es);
    } catch (const meshgate::Error& err) {
      bool mixed = false;
      try {
        check_no_mixed_partial_types(placements);
      } catch (const meshgate::Error&) {
        mixed = true;
      }
      if (!mixed || !expect_error) reject_value(node, key, err.what());
      if (!c.deferred_rejection) c.deferred_rejection = err;
    }
  }
}

void parse_compile(CaseNode& node, RedistributeCase& c) {
  c.compile = node.optional<bool>("compile").value_or(false);
  if (c.compile && (c.steps || c.reduce)) {
    node.fail("compile", c.steps ? "has no effect with `steps`, which replaces planning: remove one"
                                  : "compiles a redistribution; a `reduce` case is not compiled: "
                                    "remove one");
  }
  if (c.expect_graph_breaks && !c.compile) {
    node.child("expect").fail("graph_breaks", "counts torch.compile's graph breaks: it needs "
                                              "`compile: true`");
  }
}

void parse_case_torch_cost(CaseNode& node, RedistributeCase& c, const DeviceMesh& mesh,
                           bool expect_error) {
  const auto es = static_cast<std::int64_t>(comm::element_size(c.dtype));
  if (expect_error) {
    node.fail("torch_cost", "prices a redistribution that runs; a case that expects a "
                            "rejection has none: remove one");
  }
  c.torch_cost = parse_torch_cost(node, [&](const std::vector<std::string>& items) {
    const std::vector<Placement> via = parse_placements(placements_text(items));
    DTensorSpec::create(mesh, via, c.shape, es);
    std::vector<std::string> out;
    for (const Placement& p : via) out.push_back(to_string(p));
    return out;
  });
}

// `steps` as steps on the source spec; nothing more can be checked of a spec that does not
// exist.
void check_steps(CaseNode& node, const RedistributeCase& c, const DeviceMesh& mesh) {
  if (!c.steps || c.deferred_rejection) return;
  const auto es = static_cast<std::int64_t>(comm::element_size(c.dtype));
  const DTensorSpec src =
      DTensorSpec::create(mesh, parse_placements(c.from_text), c.shape, es);
  try {
    steps_from_text(src, *c.steps);
  } catch (const meshgate::Error& err) {
    node.fail("steps", err.what());
  }
  // A plan that pairs ranks holding different shards in one collective would hang the mpi
  // and nccl backends (the threads backend raises): a value no backend can run.
  try {
    check_steps_pair_up(src, *c.steps);
  } catch (const meshgate::Error& err) {
    reject_value(node, "steps", err.what());
  }
}

}  // namespace meshgate::runner::redistribute_kind
