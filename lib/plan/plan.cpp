// plan_redistribute: the planner's passes chained (greedy.cpp, merge_pass.cpp, min_cost.cpp on
// the view of mesh_view.cpp), and the names of the planner's options.
#include "plan/plan.hpp"

#include <string>

#include "core/error.hpp"
#include "plan/greedy.hpp"
#include "plan/merge_pass.hpp"
#include "plan/mesh_view.hpp"
#include "plan/min_cost.hpp"

namespace meshgate {

bool is_collective(StepKind kind) {
  return kind == StepKind::all_reduce || kind == StepKind::reduce_scatter ||
         kind == StepKind::all_gather || kind == StepKind::all_to_all;
}

std::string_view to_string(Planner p) {
  return p == Planner::greedy ? "greedy" : "min_cost";
}
Planner parse_planner(std::string_view text) {
  if (text == "greedy") return Planner::greedy;
  if (text == "min_cost") return Planner::min_cost;
  throw Error(ErrorKind::value,
              "unknown planner '" + std::string(text) + "': use greedy or min_cost");
}
std::string_view to_string(Api a) {
  return a == Api::internal ? "internal" : "public";
}
Api parse_api(std::string_view text) {
  if (text == "internal") return Api::internal;
  if (text == "public") return Api::public_;
  throw Error(ErrorKind::value, "unknown api '" + std::string(text) + "': use internal or public");
}

Plan plan_redistribute(const DTensorSpec& src, const DTensorSpec& dst,
                       std::span<const std::int64_t> coordinate, const PlanOptions& options) {
  using namespace plan_internal;
  const MeshView v = check_and_view(src, dst, coordinate);
  Plan plan;
  greedy_steps(src, dst, v, options.api, plan.unmerged);
  for (TransformStep& s : plan.unmerged) fill_cost(s, v, options.topology);
  const bool optimize = options.optimize && transform_optimization_enabled();
  if (optimize) {
    merge_runs(src.mesh, v.dim_leaves, v.shape, src.placements, dst.placements, plan.unmerged,
               src.element_size, &plan.runs, &plan.warnings, plan.steps);
    for (TransformStep& s : plan.steps) {
      if (s.merged()) fill_cost(s, v, options.topology);
    }
  } else {
    plan.steps = plan.unmerged;
    record_unmerged_runs(plan.unmerged, &plan.runs);
  }
  plan.greedy_cost = total_cost(plan.steps);
  plan.cost = plan.greedy_cost;
  if (options.planner == Planner::min_cost && optimize) {
    apply_min_cost(plan, src, dst, v, options.topology);
  }
  return plan;
}

}  // namespace meshgate
