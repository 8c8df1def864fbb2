#include "plan/min_cost.hpp"

#include <algorithm>
#include <optional>

#include "plan/merge_pass.hpp"

namespace meshgate::plan_internal {
namespace {

// A merged step over the run members `members` (indices into `run`, in their issue order), or
// nullopt when that merge is not valid (order, flattened dim, evenness).
std::optional<TransformStep> merge_members(const DeviceMesh& mesh, const MeshView& v,
                                           std::span<const TransformStep> run,
                                           std::span<const std::size_t> members, std::int64_t es,
                                           const Topology& topology) {
  if (members.size() == 1) return run[members.front()];
  StepList sub;
  sub.reserve(members.size());
  for (std::size_t k : members) sub.push_back(run[k]);
  MergeResult r = try_merge(mesh, v.dim_leaves, sub, v.shape);
  if (!r.step) return std::nullopt;
  fill_merged_shapes(*r.step, sub, es);
  fill_cost(*r.step, v, topology);
  return r.step;
}

// All-reduces of one run commute: try every partition of the run into groups (subset DP).
StepList best_all_reduce_partition(const DeviceMesh& mesh, const MeshView& v,
                                                     std::span<const TransformStep> run,
                                                     std::int64_t es, const Topology& topology) {
  const std::size_t k = run.size();
  const std::size_t full = (std::size_t{1} << k) - 1;
  std::vector<std::optional<TransformStep>> group(full + 1);
  std::vector<double> group_cost(full + 1, -1);
  for (std::size_t mask = 1; mask <= full; ++mask) {
    std::vector<std::size_t> members;
    for (std::size_t b = 0; b < k; ++b) {
      if (mask >> b & 1) members.push_back(b);
    }
    group[mask] = merge_members(mesh, v, run, members, es, topology);
    if (group[mask]) group_cost[mask] = group[mask]->modeled_time;
  }
  std::vector<double> best(full + 1, -1);
  std::vector<std::size_t> choice(full + 1, 0);
  best[0] = 0;
  for (std::size_t mask = 1; mask <= full; ++mask) {
    // The group holding the lowest member of `mask`, so each partition is counted once.
    const std::size_t low = mask & (~mask + 1);
    for (std::size_t sub = mask; sub; sub = (sub - 1) & mask) {
      if (!(sub & low) || group_cost[sub] < 0 || best[mask ^ sub] < 0) continue;
      const double c = group_cost[sub] + best[mask ^ sub];
      if (best[mask] < 0 || c < best[mask]) {
        best[mask] = c;
        choice[mask] = sub;
      }
    }
  }
  StepList out;
  for (std::size_t mask = full; mask; mask ^= choice[mask]) out.push_back(*group[choice[mask]]);
  return out;
}

// Reduce-scatters and all-gathers must keep their order: try every split into consecutive
// segments.
StepList best_segmentation(const DeviceMesh& mesh, const MeshView& v,
                                             std::span<const TransformStep> run, std::int64_t es,
                                             const Topology& topology) {
  const std::size_t k = run.size();
  std::vector<double> best(k + 1, -1);
  std::vector<std::size_t> from(k + 1, 0);
  std::vector<std::vector<std::optional<TransformStep>>> seg(k + 1);
  best[0] = 0;
  for (std::size_t end = 1; end <= k; ++end) {
    seg[end].resize(end);
    for (std::size_t start = 0; start < end; ++start) {
      std::vector<std::size_t> members;
      for (std::size_t q = start; q < end; ++q) members.push_back(q);
      seg[end][start] = merge_members(mesh, v, run, members, es, topology);
      if (!seg[end][start] || best[start] < 0) continue;
      const double c = best[start] + seg[end][start]->modeled_time;
      if (best[end] < 0 || c < best[end]) {
        best[end] = c;
        from[end] = start;
      }
    }
  }
  StepList out;
  for (std::size_t end = k; end > 0; end = from[end]) out.push_back(*seg[end][from[end]]);
  std::reverse(out.begin(), out.end());
  return out;
}

// Every rank of a group must issue the same collectives, so min_cost may only choose from
// costs that do not depend on the rank. They do not when every tensor dim divides evenly by
// the product of all mesh dims that shard it in the source or the target: then every chunk at
// every nesting level, in every intermediate placement of the plan, has the same size.
bool rank_independent_shapes(const DTensorSpec& src, const DTensorSpec& dst, const MeshView& v) {
  for (std::size_t d = 0; d < src.shape.size(); ++d) {
    std::int64_t ways = 1;
    for (std::size_t m = 0; m < v.shape.size(); ++m) {
      const auto dim = static_cast<std::int64_t>(d);
      if (src.placements[m].is_shard(dim) || dst.placements[m].is_shard(dim)) ways *= v.shape[m];
    }
    if (src.shape[d] % ways != 0) return false;
  }
  return true;
}

bool disjoint_dims(const TransformStep& a, const TransformStep& b) {
  for (std::int64_t x : a.mesh_dims) {
    if (std::find(b.mesh_dims.begin(), b.mesh_dims.end(), x) != b.mesh_dims.end()) return false;
  }
  return true;
}

// Rewrites that keep every rank's result and move fewer bytes. An all_reduce over X is an
// elementwise reduction across ranks that differ only in their X coordinate, and a step on
// another mesh dim Y does the same linear thing on each of them (same Y coordinate, same
// shapes), so the two commute:
//  - an all_reduce moves after a reduce_scatter or chunk on another dim (it then reduces the
//    smaller piece) and before an all_gather on another dim (it reduces before the growth);
//  - an all_reduce over X directly followed by a chunk over X is a reduce_scatter over X: the
//    same piece, reduced, without reducing the parts that the chunk drops.
// Shapes, bytes and costs are recomputed in the new order.
StepList reorder_and_fuse(const MeshView& v,
                                            std::span<const TransformStep> steps,
                                            std::int64_t es, const Topology& topology) {
  StepList out(steps.begin(), steps.end());
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i + 1 < out.size(); ++i) {
      TransformStep& a = out[i];
      TransformStep& b = out[i + 1];
      const bool sink = a.kind == StepKind::all_reduce &&
                        (b.kind == StepKind::reduce_scatter || b.kind == StepKind::local_chunk) &&
                        disjoint_dims(a, b);
      const bool hoist =
          a.kind == StepKind::all_gather && b.kind == StepKind::all_reduce && disjoint_dims(a, b);
      if (sink || hoist) {
        std::swap(a, b);
        changed = true;
      }
    }
  }
  for (std::size_t i = 0; i + 1 < out.size(); ++i) {
    TransformStep& a = out[i];
    const TransformStep& b = out[i + 1];
    if (a.kind == StepKind::all_reduce && b.kind == StepKind::local_chunk &&
        a.mesh_dims == b.mesh_dims && a.avg_scale == 1) {
      a.kind = StepKind::reduce_scatter;
      a.dst = b.dst;
      a.dst_tensor_dim = b.dst_tensor_dim;
      a.logical_shape = b.logical_shape;
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
  }
  StepShape local = steps.empty() ? StepShape{} : steps.front().input_shape;
  for (TransformStep& s : out) {
    const StepShape input = local;
    fill_shapes(s, v, input, es);
    fill_cost(s, v, topology);
    local = s.output_shape;
  }
  return out;
}

StepList min_cost_steps(const DeviceMesh& mesh, const MeshView& v,
                                          std::span<const TransformStep> steps, std::int64_t es,
                                          const Topology& topology) {
  StepList out;
  out.reserve(steps.size());
  for_each_run(
      steps, [&](std::size_t i) { out.push_back(steps[i]); },
      [&](std::size_t i, std::size_t j) {
        const std::span<const TransformStep> run(steps.data() + i, j - i);
        // 2^k subsets: the run is at most one step per mesh dim, so k <= ndim.
        if (run.size() >= 2 && run.front().kind == StepKind::all_reduce && run.size() <= 12) {
          const StepList best =
              best_all_reduce_partition(mesh, v, run, es, topology);
          out.append(best.begin(), best.end());
        } else if (run.size() >= 2) {
          const StepList best = best_segmentation(mesh, v, run, es, topology);
          out.append(best.begin(), best.end());
        } else {
          out.append(run.begin(), run.end());
        }
      });
  return out;
}

}  // namespace

void apply_min_cost(Plan& plan, const DTensorSpec& src, const DTensorSpec& dst, const MeshView& v,
                    const Topology& topology) {
  if (!rank_independent_shapes(src, dst, v)) return;
  // Two candidates: the greedy transforms with the cheapest merges, and the same after the
  // commuting rewrites. Keep the greedy plan on ties so min_cost only differs when strictly
  // cheaper.
  for (const StepList& start :
       {plan.unmerged, reorder_and_fuse(v, plan.unmerged, src.element_size, topology)}) {
    StepList candidate =
        min_cost_steps(src.mesh, v, start, src.element_size, topology);
    const double c = total_cost(candidate);
    if (c < plan.cost * (1 - 1e-12)) {
      plan.steps = std::move(candidate);
      plan.cost = c;
    }
  }
}

}  // namespace meshgate::plan_internal
