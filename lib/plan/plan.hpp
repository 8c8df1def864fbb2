#pragma once
// Redistribution planning as DTensor's _redistribute.py: the greedy planner
// (_gen_transform_infos_non_cached), the merge pass over flattened meshes
// (_optimize_transform_infos) and a min-cost search under the cost model. See
// spec/redistribute.md sections 2-4 and 8. Pure host code: specs in, a plan out; planning
// reads layouts and never enumerates ranks.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/device_mesh.hpp"
#include "placement/placement.hpp"
#include "plan/cost_model.hpp"

namespace meshgate {

// What a step does. Collectives are the reference's _comm_type_key; the rest are local.
enum class StepKind : std::uint8_t {
  all_reduce,      // P(op) -> R
  reduce_scatter,  // P(op) -> S(d)
  all_gather,      // S(d) -> R
  all_to_all,      // S(a) -> S(b)
  local_chunk,     // R -> S(d): take this rank's torch.chunk piece
  local_partial,   // R -> P(op): divide by the group size for sum, identity otherwise
};
std::string_view to_string(StepKind kind);
bool is_collective(StepKind kind);

// One transform: one collective or local op on one mesh dim, or, after the merge pass, one
// collective on the flattened group of a run of dims.
struct TransformStep {
  StepKind kind = StepKind::local_chunk;
  // Mesh dims of the current mesh. One dim, or a merged run's dims in ascending order (the
  // reference's original_mesh_dims); the flattened group is row-major over them.
  std::vector<std::int64_t> mesh_dims;
  Placement src = Placement::replicate();  // per-dim placements; a merged sum/avg run: P(sum)
  Placement dst = Placement::replicate();
  // The reduce op the collective performs (reductions only; sum for a merged sum/avg mix).
  ReduceOp reduce_op = ReduceOp::sum;
  // After a merged reduction: divide the result by this (the product of its avg dims' sizes).
  // A merged run with any avg member reduces with sum (unlike the reference, also when its avg
  // dims all have size 1, where an avg over the group would divide by the sum dims' size).
  std::int64_t avg_scale = 1;
  // Tensor dims: the gathered dim (all_gather), the scattered dim (reduce_scatter,
  // local_chunk), src -> dst dims (all_to_all); -1 when unused.
  std::int64_t src_tensor_dim = -1;
  std::int64_t dst_tensor_dim = -1;
  std::int64_t group_size = 1;  // product of the sizes of mesh_dims
  // The tensor shape as seen at this mesh dim (the outermost run member's for a merged step),
  // which says how much to pad and trim for uneven shards.
  Shape logical_shape;
  Shape input_shape;   // this rank's local shape before the step
  Shape output_shape;  // and after it
  // Bytes of the collective's full buffer on this rank in the nccl-tests convention, padding
  // included (all_gather: gathered output, reduce_scatter: input); 0 for local steps.
  std::int64_t bytes = 0;
  std::string flattened_name;  // the registered flattened dim a merged step runs on
  double modeled_time = 0;     // seconds under PlanOptions::topology (0 for local steps)

  bool merged() const { return mesh_dims.size() > 1; }
  friend bool operator==(const TransformStep&, const TransformStep&) = default;
};

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
  std::vector<TransformStep> unmerged;  // the greedy planner's steps, before the merge pass
  std::vector<TransformStep> steps;     // what runs: after the merge pass (or min_cost search)
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

// The greedy planner alone (spec section 2) and the merge pass alone (section 4), for tests
// and tools. `merge_flattened_runs` appends its decisions and warnings to `runs`/`warnings`.
std::vector<TransformStep> greedy_transforms(const DTensorSpec& src, const DTensorSpec& dst,
                                             std::span<const std::int64_t> coordinate = {},
                                             Api api = Api::internal);
std::vector<TransformStep> merge_flattened_runs(
    const DeviceMesh& mesh, std::span<const Placement> src, std::span<const Placement> dst,
    const std::vector<TransformStep>& steps, std::vector<RunDecision>* runs = nullptr,
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
std::vector<TransformStep> steps_from_text(const DTensorSpec& src,
                                           std::span<const std::string> texts,
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

// The CONTRACT comm-string of a collective step: "all_reduce(A+C, sum)",
// "reduce_scatter(B, avg, dim=0)", "all_gather(B+C, dim=1)", "all_to_all(B, dim=0->1)"; mesh
// dims by name (by index on an unnamed mesh). Local steps: "chunk(B, dim=0)",
// "partial(B, sum)" (not part of comm lists). A merged step's division by avg_scale is a
// local step and not part of the string.
std::string to_string(const TransformStep& step, const DeviceMesh& mesh);
// The comm strings of the collective steps with group size > 1, in issue order: what the
// executor issues and `expect.comms` lists.
std::vector<std::string> comm_strings(const std::vector<TransformStep>& steps,
                                      const DeviceMesh& mesh);
// Error(value) naming the dim when a mesh dim name cannot stand in a comm string: an empty
// name, one with '+', ',', '(' or ')' (which would read as another group or another argument:
// a dim "A+B" prints like the merged group of A and B) or with blanks at either end.
void check_comm_string_names(std::span<const std::string> names);

}  // namespace meshgate
