#pragma once
// Internal to the planner (lib/plan): Planner::min_cost. It is not PyTorch's min-cost planner
// (use_min_cost_redistribution_plan: DTensorRedistributePlanner.find_min_cost_path, Dijkstra
// over placement states, one per-dim transition per edge, priced one transition at a time
// before the merge pass runs). It refines the greedy plan instead: it keeps greedy's per-dim
// transitions, so every plan is greedy's with merges chosen by cost, and it prices merged
// collectives as the one flattened collective that will run, which PyTorch's search cannot
// see; for uneven shards it stays greedy so that all ranks of a group agree (plan.hpp, at
// Planner, lists every difference):
//  - every run of like-kind collectives of the greedy transforms is split into the cheapest
//    set of merged collectives under the cost model: all_reduces, which commute, into any
//    partition whose groups have a flattened dim (a DP over subsets, runs of up to 12);
//    reduce_scatters and all_gathers into consecutive segments that pass the merge pass's rules
//    (order, flattened dim, evenness);
//  - the same again after commuting rewrites of the greedy transforms (an all_reduce moved
//    past a reduce_scatter or chunk on another dim and before an all_gather on another dim; an
//    all_reduce followed by a chunk on the same dim fused into a reduce_scatter);
//  - the cheaper of the two replaces the merged greedy plan only when strictly cheaper.
#include "placement/placement.hpp"
#include "plan/mesh_view.hpp"
#include "plan/plan.hpp"

namespace meshgate::plan_internal {

// Replaces plan.steps and plan.cost (set to the merged greedy plan and its cost, with
// plan.unmerged its unmerged transforms) by a strictly cheaper plan under `topology` with the
// same result, if there is one. Keeps the greedy plan when a shard of src or dst is uneven:
// costs then depend on the rank, and ranks that chose differently would issue different
// collectives in one group.
void apply_min_cost(Plan& plan, const DTensorSpec& src, const DTensorSpec& dst, const MeshView& v,
                    const Topology& topology);

}  // namespace meshgate::plan_internal
