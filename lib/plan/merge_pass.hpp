#pragma once
// Internal to the planner (lib/plan): the merge pass, PyTorch's _optimize_transform_infos
// (docs/kinds.md, The flattened-mesh merge). A run of consecutive like-kind collectives
// (all_reduce, reduce_scatter or all_gather, with mergeable placements) becomes one collective on
// the registered flattened dim of its mesh dims when the reference's rules allow it and the flat
// collective moves the same elements; otherwise the run stays as it is and the reason becomes a
// warning (_warn_flatten_optimization_not_possible). min_cost merges with the same rules.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "mesh/device_mesh.hpp"
#include "mesh/flattened_dim.hpp"
#include "plan/plan.hpp"

namespace meshgate::plan_internal {

// The kinds the merge pass merges: all_reduce, reduce_scatter, all_gather.
bool mergeable_kind(StepKind kind);
// The end (one past) of the run of like-kind collectives that starts at steps[begin], which
// must be of a mergeable kind: the steps after it of a mergeable kind whose placements merge
// with its own (equal, or sum/avg partials to the same target).
std::size_t run_end(std::span<const TransformStep> steps, std::size_t begin);

// The one walk over `steps` that the merge pass, record_unmerged_runs and min_cost share, so
// that all three see the same runs: on_other(i) for each step i of a kind that never merges,
// on_run(begin, end) for each run [begin, end) of like-kind collectives (see run_end), in plan
// order. A run may hold a single step.
template <class OnOther, class OnRun>
void for_each_run(std::span<const TransformStep> steps, OnOther&& on_other, OnRun&& on_run) {
  std::size_t i = 0;
  while (i < steps.size()) {
    if (!mergeable_kind(steps[i].kind)) {
      on_other(i++);
      continue;
    }
    const std::size_t end = run_end(steps, i);
    on_run(i, end);
    i = end;
  }
}

struct MergeResult {
  std::optional<TransformStep> step;  // the merged step (shapes and bytes not yet filled)
  MergeReason reason = MergeReason::merged;
};
// try_create_flattened for a run of two or more steps on a mesh of sizes `mesh_shape` whose
// dims' leaves are `dim_leaves` (MeshView): the merged step, or why the run cannot merge.
MergeResult try_merge(const DeviceMesh& mesh, std::span<const LayoutLeaf> dim_leaves,
                      std::span<const TransformStep> run,
                      std::span<const std::int64_t> mesh_shape);
// A merged step's shapes and bytes: the run's input, its last output, the collective's buffer.
void fill_merged_shapes(TransformStep& merged, std::span<const TransformStep> run,
                        std::int64_t element_size);

// The merge pass over `steps` (the greedy transforms of src -> dst), appending to `out`: each
// run merged where it can be, its decision appended to `runs` and its warning, once per (dims,
// reason), to `warnings` (either may be null). While the kill switch is on, it appends `steps`
// and records each run as optimization_disabled (record_unmerged_runs).
void merge_runs(const DeviceMesh& mesh, std::span<const LayoutLeaf> dim_leaves,
                std::span<const std::int64_t> mesh_shape, std::span<const Placement> src,
                std::span<const Placement> dst, std::span<const TransformStep> steps,
                std::int64_t element_size, std::vector<RunDecision>* runs,
                std::vector<PlanWarning>* warnings, StepList& out);
// The runs the merge pass would consider, appended to `runs` (if not null) as
// optimization_disabled (two or more steps) or too_few_transforms: the pass is off.
void record_unmerged_runs(std::span<const TransformStep> steps, std::vector<RunDecision>* runs);

}  // namespace meshgate::plan_internal
