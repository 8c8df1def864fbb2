#pragma once
// Redistribution planning as DTensor's _redistribute.py: the greedy planner
// (_gen_transform_infos_non_cached), the merge pass over flattened meshes
// (_optimize_transform_infos) and a min-cost search under the cost model. See docs/kinds.md,
// Redistribution: Planning and The flattened-mesh merge. Pure host code: specs in, a plan out;
// planning reads layouts and never enumerates ranks. The steps are declared in transform_step.hpp,
// their text form (comm strings) in comm_string.hpp; both come with this header.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/device_mesh.hpp"
#include "placement/placement.hpp"
#include "plan/comm_string.hpp"
#include "plan/cost_model.hpp"
#include "plan/transform_step.hpp"

namespace meshgate {

// Why a run of like-kind collectives was or was not merged (the reference's reasons, plus
// `merged` and the reasons this implementation adds).
enum class MergeReason : std::uint8_t {
  merged,
  too_few_transforms,       // a run of one: silent
  non_ascending_mesh_dims,  // reduce_scatter not ascending / all_gather not descending
  no_flattened_mesh,        // no registered flattened dim has the run's layout
  uneven_tensor_shape,      // reduce_scatter: the outermost logical size does not divide by
                            // the run's group (the reference's rule), or the local tensor's
                            // flat split differs from the nested one; all_gather: the flat
                            // split of the outermost logical size differs from the nested one
                            // (the guard #194457 proposes)
  optimization_disabled,    // kill switch or PlanOptions::optimize = false: silent
};
std::string_view to_string(MergeReason reason);

// One decision of the merge pass, for `meshgate plan` and the tests.
struct RunDecision {
  StepKind kind = StepKind::all_reduce;
  std::vector<std::int64_t> mesh_dims;  // the run's dims in plan order
  std::vector<std::size_t> steps;       // indices into Plan::unmerged
  MergeReason reason = MergeReason::merged;
  std::string flattened_name;  // when merged
  friend bool operator==(const RunDecision&, const RunDecision&) = default;
};

// A warning of _warn_flatten_optimization_not_possible: its key is (mesh, sorted dims, reason).
struct PlanWarning {
  std::vector<std::int64_t> mesh_dims;  // sorted
  MergeReason reason = MergeReason::no_flattened_mesh;
  std::string message;
  friend bool operator==(const PlanWarning&, const PlanWarning&) = default;
};

// greedy: PyTorch's default planner and merge pass, exactly. min_cost: the same greedy
// transforms, then for each run of like-kind collectives the cheapest split under the cost
// model: all_reduces (which commute, so order is free) into any groups that have a flattened
// dim, reduce_scatters / all_gathers into consecutive segments that pass the merge rules
// (order, flattened dim, evenness), also after commuting rewrites (an all_reduce after another
// dim's reduce_scatter or chunk and before another dim's all_gather; an all_reduce and a chunk
// on one dim as a reduce_scatter). The final placement is the same; the plan is never costlier
// than greedy's, and ties keep greedy's. Every rank of a group must issue the same
// collectives, so min_cost only departs from greedy when no shard is uneven (each tensor dim
// divides by all the mesh dims that shard it in source or target); otherwise it is greedy.
//
// min_cost is not PyTorch's min-cost planner (use_min_cost_redistribution_plan:
// DTensorRedistributePlanner.find_min_cost_path), and differs from it on purpose:
//  - Search space. PyTorch runs Dijkstra over distribution states (placements plus the order
//    in which mesh dims shard each tensor dim), one placement change on one mesh dim per edge,
//    so a path may pass through placements that greedy never visits (e.g. S(0) -> R -> S(1)
//    instead of an all_to_all). min_cost keeps greedy's per-dim transitions and only regroups
//    and reorders them, so every plan it returns is greedy's with merges chosen by cost. This
//    keeps min_cost a refinement of the reference's default: the same plan unless one is
//    strictly cheaper, and comparable step by step with it.
//  - Merging. PyTorch prices each per-dim transition alone and runs the merge pass afterwards
//    over the path it found, so the search cannot see that two collectives would merge into one
//    (nor that a path cannot be merged). min_cost prices merged collectives as the one
//    collective on the flattened group that will run.
//  - Costs. PyTorch's one_step_redistribute_cost prices a transition by the mesh dim's
//    bandwidth and latency (MeshTopoInfo) for the global tensor split evenly over the shards,
//    charges all_to_all as an all_gather plus a 1.0 penalty and local steps nothing. min_cost
//    uses the cost model of cost_model.hpp: the group's placement on nodes under `Topology`
//    and the bytes the rank's step really moves, padding included.
//  - Rank agreement. PyTorch's costs come from even splits, so every rank finds the same path
//    even for uneven shards. Ours are exact per rank, so min_cost falls back to greedy for
//    uneven shards rather than let ranks of one group choose different collectives.
//  - Ties. PyTorch takes the first cheapest path it pops (by insertion order); min_cost keeps
//    greedy's plan unless another is strictly cheaper.
//  - Scope. PyTorch also uses its search for non-default shard orders and _StridedShard, which
//    the greedy planner cannot handle; placements here have neither, so greedy is never
//    insufficient.
enum class Planner : std::uint8_t { greedy, min_cost };
enum class Api : std::uint8_t {
  internal,  // redistribute_local_tensor: R -> P allowed
  public_,   // DTensor.redistribute: R -> P rejected unless the dim already is that Partial
};
std::string_view to_string(Planner p);
Planner parse_planner(std::string_view text);  // "greedy" | "min_cost"; Error(value) otherwise
std::string_view to_string(Api a);
Api parse_api(std::string_view text);  // "internal" | "public"; Error(value) otherwise

struct PlanOptions {
  bool optimize = true;  // run the merge pass (also off while the kill switch is on)
  Planner planner = Planner::greedy;
  Api api = Api::internal;
  Topology topology = {};
  friend bool operator==(const PlanOptions&, const PlanOptions&) = default;
};

struct Plan {
  StepList unmerged;  // the greedy planner's steps, before the merge pass
  StepList steps;     // what runs: after the merge pass (or min_cost search)
  // Merge-pass decisions over `unmerged` (greedy), one per run of like-kind collectives; with
  // the pass off, each run of two or more is recorded as optimization_disabled.
  std::vector<RunDecision> runs;
  std::vector<PlanWarning> warnings;  // each (dims, reason) once, in plan order
  double greedy_cost = 0;             // modeled seconds of the greedy (merged) plan
  double cost = 0;                    // modeled seconds of `steps`
  friend bool operator==(const Plan&, const Plan&) = default;
};

// Plans the redistribution of the shard at mesh coordinate `coordinate` (logical shapes, hence
// padding and even-ness, depend on it; empty = all zeros) from `src` to `dst`, which must share
// mesh, shape and element size. Identical placements give an empty plan.
// Errors as the reference: Error(runtime) for S -> P, Error(assertion) for P(x) -> P(y),
// Error(runtime) "Can not redistribute" for R -> P under Api::public_, Error(value) for
// R -> P(product), mixed partial types or mismatched specs.
Plan plan_redistribute(const DTensorSpec& src, const DTensorSpec& dst,
                       std::span<const std::int64_t> coordinate = {},
                       const PlanOptions& options = {});
// The same, cached like _gen_transform_infos: equal inputs (mesh layout, names and flattened
// registry, placements, shape, element size, coordinate, options, kill switch) return the same
// object. Thread-safe.
std::shared_ptr<const Plan> cached_plan_redistribute(const DTensorSpec& src, const DTensorSpec& dst,
                                                     std::span<const std::int64_t> coordinate = {},
                                                     const PlanOptions& options = {});

// The greedy planner alone (docs/kinds.md, Planning) and the merge pass alone (The flattened-mesh
// merge), for tests and tools. `merge_flattened_runs` appends its decisions and warnings to
// `runs`/`warnings`.
StepList greedy_transforms(const DTensorSpec& src, const DTensorSpec& dst,
                           std::span<const std::int64_t> coordinate = {},
                           Api api = Api::internal);
StepList merge_flattened_runs(
    const DeviceMesh& mesh, std::span<const Placement> src, std::span<const Placement> dst,
    std::span<const TransformStep> steps, std::vector<RunDecision>* runs = nullptr,
    std::vector<PlanWarning>* warnings = nullptr, std::int64_t element_size = 4);

// A plan written out step by step in the form to_string(TransformStep) prints
// ("chunk(A, dim=0)", "reduce_scatter(B+C, sum, dim=0)", "all_reduce(A+B, avg)",
// "all_gather(A+B, dim=0)", "all_to_all(B, dim=0->1)", "partial(A, sum)"), with the shapes,
// bytes and modeled cost of the rank at `coordinate`, so that the executor can replay another
// implementation's plan, right or wrong, as issued. Dims are names (indices on an unnamed
// mesh); several dims run on their flattened group, row-major over them in ascending order,
// and an all_gather or all_to_all trims to the logical shape at the outermost of them, as the
// reference's merged step does. Nothing checks that the steps reach `src`'s target.
// Error(value) naming the step when its text does not parse or names no dim of the mesh.
StepList steps_from_text(const DTensorSpec& src, std::span<const std::string> texts,
                         std::span<const std::int64_t> coordinate = {},
                         const Topology& topology = {});

// Error(value) naming the step when the ranks of one of its collective's groups would pass
// different element counts, i.e. hold different shards there (e.g. all_reduce(A, sum) of
// S(0) over an uneven split): no backend can run such a plan, which hangs or reads past a
// buffer. Plans every coordinate of the mesh; errors of steps_from_text as well.
void check_steps_pair_up(const DTensorSpec& src, std::span<const std::string> texts);

// _get_flattened_mesh_by_layout: the name of the root's registered flattened dim whose layout
// equals the layout of `dims` of `mesh` (names do not matter, size-1 dims vanish); nullopt
// when the mesh is unnamed or nothing matches.
std::optional<std::string> find_flattened_dim(const DeviceMesh& mesh,
                                              std::span<const std::int64_t> dims);

// The kill switch (disable_redistribute_transform_optimization): while a guard lives, the
// merge pass returns its input unchanged. Process-wide, nestable.
class DisableTransformOptimization {
 public:
  DisableTransformOptimization();
  ~DisableTransformOptimization();
  DisableTransformOptimization(const DisableTransformOptimization&) = delete;
  DisableTransformOptimization& operator=(const DisableTransformOptimization&) = delete;
};
bool transform_optimization_enabled();

// Log-once filter of _warned_flatten_issues: the warnings of `plan` whose key (mesh, dims,
// reason) has not been returned before in this process. Thread-safe.
std::vector<PlanWarning> first_time_warnings(const DeviceMesh& mesh, const Plan& plan);

}  // namespace meshgate
