#pragma once
// Internal to the planner (lib/plan): the greedy planner, PyTorch's default
// (generate_greedy_transform_infos; docs/kinds.md, Redistribution: Planning). One transform per
// mesh dim whose placement changes: first, while the source is sharded, from the last mesh dim to
// the first towards the target (or Replicate where a nested shard of the same tensor dim does not
// line up), then from the first to the last whatever is left.
#include <vector>

#include "placement/placement.hpp"
#include "plan/mesh_view.hpp"
#include "plan/plan.hpp"

namespace meshgate::plan_internal {

// The greedy transforms of src -> dst on the rank of `v`, with shapes and bytes (no costs),
// appended to `out`. Errors of plan_redistribute for unsupported pairs and, under Api::public_,
// R -> P.
void greedy_steps(const DTensorSpec& src, const DTensorSpec& dst, const MeshView& v, Api api,
                  StepList& out);

}  // namespace meshgate::plan_internal
