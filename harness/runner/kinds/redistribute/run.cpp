// The redistribute kind on meshgate's library: plan and execute on every rank, judge each rank's
// result (judge.cpp), and time the merged and unmerged plans of a performance case.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kinds/redistribute/redistribute_case.hpp"
#include "timing.hpp"

namespace meshgate::runner::redistribute_kind {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Sends `text` from `root` to every rank of `world` (its length first).
void broadcast_text(comm::Communicator& world, std::string& text, int root) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  world.broadcast(&length, &length, 1, comm::DType::i64, root);
  text.resize(static_cast<std::size_t>(length));
  if (length > 0) world.broadcast(text.data(), text.data(), text.size(), comm::DType::u8, root);
}

}  // namespace

RedistributeCase::Specs RedistributeCase::build() const {
  DeviceMesh mesh = build_mesh();
  const auto es = static_cast<std::int64_t>(comm::element_size(dtype));
  DTensorSpec src = DTensorSpec::create(mesh, parse_placements(from_text), shape, es);
  DTensorSpec dst = DTensorSpec::create(mesh, parse_placements(to_text), shape, es);
  return Specs{std::move(mesh), std::move(src), std::move(dst)};
}

DeviceMesh RedistributeCase::build_mesh() const {
  DeviceMesh mesh = mesh_spec.build();
  for (const FlattenDims& f : flatten) mesh.slice(f.dims).flatten(f.name);
  return mesh;
}

// Why meshgate's own run skips the case (its keys ask for what only another implementation
// does); nullopt when meshgate runs it.
std::optional<Outcome> RedistributeCase::skip_outcome() const {
  if (torch_cost) {
    Outcome o;
    o.status = Status::skip;
    o.message = torch_cost_skip_reason();
    return o;
  }
  if (compile) {
    Outcome o;
    o.status = Status::skip;
    o.message =
        "`compile: true` runs the redistribution under another implementation's compiler "
        "(--impl torch: torch.compile); meshgate has no compiler, and its eager answer is "
        "what the case expects";
    return o;
  }
  if (source_from_global() && !reduce) {
    Outcome o;
    o.status = Status::skip;
    o.message = std::string(strided ? "meshgate has no strided shard (PyTorch's _StridedShard, "
                                      "written SS(d,k))"
                                    : "meshgate shards a tensor dim over mesh dims in mesh-dim "
                                      "order only, not in a `shard_order`") +
                "; the case is judged on another implementation (--impl torch), which builds "
                "the source from the global tensor, by the target's shards and the "
                "collectives it issues";
    return o;
  }
  if (reduce) {
    Outcome o;
    o.status = Status::skip;
    const std::string judged =
        "; the case is judged on another implementation (--impl torch) by signals alone: "
        "its values against a single-process torch reference, the collectives it issues and "
        "its result's placements";
    if (strided) {
      o.message = "meshgate has no strided shard (PyTorch's _StridedShard, written SS(d,k)) "
                  "and does not model " + op_call(reduce->op) + judged;
    } else {
      o.message = "meshgate does not model " + op_call(reduce->op) +
                  " (it has no sharding propagation, only redistribution)" + judged;
    }
    return o;
  }
  return std::nullopt;
}

Outcome RedistributeCase::run(RunContext& ctx) {
  if (deferred_rejection) throw *deferred_rejection;
  if (std::optional<Outcome> skip = skip_outcome()) return *skip;
  const int n = ranks();
  const std::optional<PerfSpec> perf = ctx.perf();
  states_.clear();
  states_.resize(static_cast<std::size_t>(n));
  std::vector<RankResult> results(static_cast<std::size_t>(n));
  try {
    ctx.run_on_ranks(n, [&](int rank, comm::Communicator& world) {
      results[static_cast<std::size_t>(rank)] = run_rank(rank, world, perf);
    });
  } catch (...) {
    states_.clear();
    throw;
  }
  if (!perf) states_.clear();
  const RankResult& whole = results.at(static_cast<std::size_t>(ctx.lead_rank()));
  Outcome o = outcome_of(whole, perf.has_value());
  const std::vector<std::string> problems = this->problems(whole.counts, whole.report);
  if (!problems.empty()) {
    o.status = Status::fail;
    o.message = join_problems(problems);
    states_.clear();
  }
  return o;
}

// The row of a run: the reference rank's plan, its counts and costs, the unmerged plan's beside
// them, and with perf the timings.
Outcome RedistributeCase::outcome_of(const RankResult& whole, bool perf) const {
  const Report& r = whole.report;
  Outcome o;
  o.plan = r.issued;
  o.metrics["collectives"] = r.issued.size();
  o.metrics["bytes_per_rank"] = r.bytes;
  o.metrics["modeled_cost_s"] = r.cost;
  o.metrics["greedy_cost_s"] = r.greedy_cost;
  o.metrics["warnings"] = r.warnings;
  o.metrics["distinct_plans"] = r.distinct_plans;
  o.metrics["plans_differ_between_ranks"] = r.distinct_plans > 1;
  if (steps) {
    o.metrics["meshgate_plan"] = r.planned;
    o.metrics["wrong_shapes"] = whole.counts[wrong_shape];
    o.metrics["wrong_elements"] = whole.counts[wrong_values];
  }
  o.metrics["unmerged"] = {{"plan", r.issued_unmerged},
                           {"collectives", r.issued_unmerged.size()},
                           {"bytes_per_rank", r.bytes_unmerged},
                           {"modeled_cost_s", r.cost_unmerged}};
  o.metrics["merged_equals_unmerged_bitwise"] = whole.counts[merged_unmerged_differ] == 0;
  o.metrics["merged_vs_unmerged_note"] =
      "a merged sum reduces in one order and the per-dim plan in another, so float results "
      "need not agree bitwise (docs/kinds.md, The flattened-mesh merge); the integer-valued "
      "inputs here are exact in both orders";
  if (perf) {
    o.metrics["merged_time_s"] = {{"median", whole.time_merged},
                                  {"calls_per_sample", whole.calls_merged}};
    o.metrics["unmerged_time_s"] = {{"median", whole.time_unmerged},
                                    {"calls_per_sample", whole.calls_unmerged}};
  }
  return o;
}

// `calls` redistributions of the (merged) plan on every rank; the max over ranks.
double RedistributeCase::time_calls(RunContext& ctx, std::int64_t calls) {
  std::vector<double> times(static_cast<std::size_t>(ranks()), 0.0);
  ctx.run_on_ranks(ranks(), [&](int rank, comm::Communicator& world) {
    RankState& s = states_.at(static_cast<std::size_t>(rank));
    times[static_cast<std::size_t>(rank)] = timed(world, s, s.plan.steps, calls);
  });
  return times[static_cast<std::size_t>(ctx.lead_rank())];
}

// How many different comm lists the (merged) plans of all the mesh's coordinates issue.
std::size_t RedistributeCase::distinct_comm_lists(const DTensorSpec& src, const DTensorSpec& dst,
                                                  const DeviceMesh& mesh) const {
  if (steps) return 1;  // every rank replays the same text
  std::set<std::vector<std::string>> lists;
  for (int rank = 0; rank < ranks(); ++rank) {
    const auto coord = mesh.coordinate(rank);
    if (!coord) continue;
    lists.insert(comm_strings(cached_plan_redistribute(src, dst, *coord, options)->steps, mesh));
  }
  return lists.size();
}

// Seconds of `calls` redistributions back to back, the max over the ranks of `world` (a rank
// outside the mesh adds 0).
double RedistributeCase::timed(comm::Communicator& world, RankState& s,
                               std::span<const TransformStep> steps, std::int64_t calls) {
  world.barrier();
  double dt = 0;
  if (s.executor) {
    const double t0 = now_s();
    for (std::int64_t i = 0; i < calls; ++i) keep_result(s.executor->run(steps, s.source));
    dt = now_s() - t0;
  }
  world.all_reduce(&dt, &dt, 1, comm::DType::f64, comm::ReduceOp::max);
  return dt;
}

PlanOptions RedistributeCase::unmerged_options() const {
  PlanOptions plain = options;
  plain.optimize = false;
  plain.planner = Planner::greedy;
  return plain;
}

// Group splits are collective over the world and a rank's plans need only some groups: every
// rank splits the union over all coordinates and both plans (and the written-out steps, the
// same on every rank), in one order.
std::vector<std::vector<std::int64_t>> RedistributeCase::all_groups(const DTensorSpec& src,
                                                                    const DTensorSpec& dst) const {
  const std::vector<PlanOptions> both = {options, unmerged_options()};
  std::vector<std::vector<std::int64_t>> groups = groups_of_all_coordinates(src, dst, both);
  if (steps) {
    for (auto& g : collective_groups(steps_from_text(src, *steps)))
      groups.push_back(std::move(g));
  }
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  return groups;
}

RankResult RedistributeCase::run_rank(int rank, comm::Communicator& world,
                                      const std::optional<PerfSpec>& perf) {
  const Specs specs = build();
  RankState& state = states_.at(static_cast<std::size_t>(rank));
  const std::vector<std::vector<std::int64_t>> groups = all_groups(specs.src, specs.dst);
  // A rank outside the mesh holds no shard and joins only the world-wide calls below.
  const bool in_mesh = specs.mesh.coordinate(rank).has_value();

  RankResult result;
  Report& r = result.report;
  auto& c = result.counts;
  Plan unmerged;
  HostTensor out, want;
  if (in_mesh) {
    run_in_mesh(rank, world, specs, groups, result, unmerged, out, want);
  } else {
    join_group_splits(world, specs.mesh, groups);
  }

  judge_rank(world, specs.mesh, specs.dst, in_mesh, out, want, c);

  world.all_reduce(c.data(), c.data(), c.size(), comm::DType::i64, comm::ReduceOp::sum);
  std::string report = rank == reference_rank ? nlohmann::json(r).dump() : std::string();
  broadcast_text(world, report, static_cast<int>(reference_rank));
  r = nlohmann::json::parse(report).get<Report>();

  if (perf) time_rank(world, state, unmerged, *perf, result);
  return result;
}

// A rank of the mesh: plans (or the written-out steps), runs the merged and the unmerged plan,
// and counts what only this rank can see: merged against unmerged, issued against planned, and
// on the reference rank its plan against `expect`.
void RedistributeCase::run_in_mesh(int rank, comm::Communicator& world, const Specs& specs,
                                   const std::vector<std::vector<std::int64_t>>& groups,
                                   RankResult& result, Plan& unmerged, HostTensor& out,
                                   HostTensor& want) {
  const DeviceMesh& mesh = specs.mesh;
  const DTensorSpec& src = specs.src;
  const DTensorSpec& dst = specs.dst;
  RankState& state = states_.at(static_cast<std::size_t>(rank));
  const std::vector<std::int64_t> mesh_shape = mesh.shape();
  Report& r = result.report;
  auto& c = result.counts;
  state.executor = std::make_unique<Redistributor>(world, mesh);
  Redistributor& ex = *state.executor;
  const std::vector<std::int64_t> coord = ex.coordinate();
  const Plan planned = plan_redistribute(src, dst, coord, options);
  if (steps) {
    state.plan = Plan{};
    state.plan.steps = steps_from_text(src, *steps, coord);
    state.plan.unmerged = state.plan.steps;
    for (const TransformStep& s : state.plan.steps) state.plan.cost += s.modeled_time;
    state.plan.greedy_cost = state.plan.cost;
  } else {
    state.plan = planned;
  }
  unmerged = plan_redistribute(src, dst, coord, unmerged_options());
  ex.create_groups(groups);

  const HostTensor global = make_global_tensor(shape, dtype, mesh.size());
  state.source = source_local_tensor(global, mesh_shape, src.placements, coord, mesh.size());
  CommLog log, log_unmerged;
  out = ex.run(state.plan.steps, state.source, &log);
  const HostTensor out_unmerged = ex.run(unmerged.steps, state.source, &log_unmerged);

  r.issued = log.strings();
  r.issued_unmerged = log_unmerged.strings();
  r.planned = comm_strings(planned.steps, mesh);
  r.bytes = log.bytes();
  r.bytes_unmerged = log_unmerged.bytes();
  r.warnings = state.plan.warnings.size();
  r.distinct_plans = distinct_comm_lists(src, dst, mesh);
  r.cost = state.plan.cost;
  r.greedy_cost = state.plan.greedy_cost;
  for (const TransformStep& s : unmerged.steps) r.cost_unmerged += s.modeled_time;
  r.local_shape = out.shape;

  want = target_shard(global, mesh_shape, dst.placements, coord);
  if (out != out_unmerged) c[merged_unmerged_differ] = 1;
  if (r.issued != comm_strings(state.plan.steps, mesh) ||
      r.issued_unmerged != comm_strings(unmerged.steps, mesh)) {
    c[plan_mismatch] = 1;
  }
  // Checks of the reference rank's plan are counts too, so that on the mpi backend, where
  // each process reads its own rank's results, every rank reaches the same verdict.
  if (rank == reference_rank) check_reference(r, c);
}

// The merged and the unmerged plan, timed as the runner times a performance case.
void RedistributeCase::time_rank(comm::Communicator& world, RankState& state, const Plan& unmerged,
                                 const PerfSpec& perf, RankResult& result) const {
  const AgreeOnCalls agree = [&](std::int64_t calls) {
    world.all_reduce(&calls, &calls, 1, comm::DType::i64, comm::ReduceOp::max);
    return calls;
  };
  for (const Plan* p : std::initializer_list<const Plan*>{&state.plan, &unmerged}) {
    const TimedSamples samples = measure_calls(
        [&](std::int64_t calls) { return timed(world, state, p->steps, calls); }, perf,
        agree);
    const bool merged = p == &state.plan;
    (merged ? result.time_merged : result.time_unmerged) = median(samples.per_call_s);
    (merged ? result.calls_merged : result.calls_unmerged) = samples.calls_per_sample;
  }
}

}  // namespace meshgate::runner::redistribute_kind
