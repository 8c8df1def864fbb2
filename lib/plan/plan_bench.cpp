// Plan + merge cost on 1-D..4-D meshes (targets: <= 1 us for 3-D, <= 10 us for a 16k-rank 4-D
// mesh), uncached as _gen_transform_infos_non_cached, and the cached lookup.
#include <benchmark/benchmark.h>

#include "plan/plan.hpp"

namespace meshgate {
namespace {

struct Problem {
  DTensorSpec src;
  DTensorSpec dst;
  std::vector<std::int64_t> coord;
};

Problem make_problem(std::vector<std::int64_t> shape, std::vector<std::string> names,
                     std::vector<std::vector<std::string>> flats, std::string_view from,
                     std::string_view to) {
  const DeviceMesh mesh = DeviceMesh::create(shape, names);
  for (const auto& f : flats) mesh.slice(f).flatten();
  const Shape tensor = {1 << 16, 4096};
  std::vector<std::int64_t> coord;
  for (std::int64_t s : shape) coord.push_back(s - 1);
  return {DTensorSpec::create(mesh, parse_placements(from), tensor),
          DTensorSpec::create(mesh, parse_placements(to), tensor), coord};
}

const Problem& problem(int ndim) {
  static const Problem p1 = make_problem({8}, {"A"}, {}, "S(0)", "R");
  static const Problem p2 = make_problem({4, 2}, {"A", "B"}, {{"A", "B"}}, "P(sum),P(avg)", "R,R");
  static const Problem p3 =
      make_problem({2, 2, 2}, {"A", "B", "C"}, {{"A", "C"}}, "P(sum),R,P(sum)", "R,R,R");
  static const Problem p4 = make_problem({8, 16, 8, 16}, {"pp", "dp", "cp", "tp"}, {{"dp", "cp"}},
                                         "R,P(avg),P(avg),S(1)", "R,R,R,R");
  switch (ndim) {
    case 1:
      return p1;
    case 2:
      return p2;
    case 3:
      return p3;
    default:
      return p4;
  }
}

// "<ranks> ranks, <steps> steps": bench/vs_pytorch.py checks the step count against PyTorch's
// plan of the same problem. Planned once more outside the timed loop.
void set_label(benchmark::State& state, const Problem& p, const PlanOptions& options) {
  const Plan plan = plan_redistribute(p.src, p.dst, p.coord, options);
  state.SetLabel(std::to_string(p.src.mesh.size()) + " ranks, " +
                 std::to_string(plan.steps.size()) + " steps");
}

void BM_PlanAndMerge(benchmark::State& state) {
  const Problem& p = problem(static_cast<int>(state.range(0)));
  const PlanOptions options;
  for (auto _ : state) {
    Plan plan = plan_redistribute(p.src, p.dst, p.coord);
    benchmark::DoNotOptimize(plan);
  }
  set_label(state, p, options);
}
BENCHMARK(BM_PlanAndMerge)->DenseRange(1, 4);

void BM_PlanMinCost(benchmark::State& state) {
  const Problem& p = problem(static_cast<int>(state.range(0)));
  PlanOptions options;
  options.planner = Planner::min_cost;
  for (auto _ : state) {
    Plan plan = plan_redistribute(p.src, p.dst, p.coord, options);
    benchmark::DoNotOptimize(plan);
  }
  set_label(state, p, options);
}
BENCHMARK(BM_PlanMinCost)->DenseRange(1, 4);

void BM_CachedPlan(benchmark::State& state) {
  const Problem& p = problem(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    auto plan = cached_plan_redistribute(p.src, p.dst, p.coord);
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_CachedPlan)->DenseRange(1, 4);

}  // namespace
}  // namespace meshgate
