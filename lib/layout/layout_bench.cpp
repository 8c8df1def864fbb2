// Micro-benchmarks of the layout algebra on the small layouts DeviceMesh builds (<= 4 modes).
// Targets: coalesce, composition and complement each <= 100 ns, and every op at least 250 times
// as fast as PyTorch's _pycute on the same call. bench/vs_pytorch.py times these calls in pycute
// and compares: an input changed here must change there too.
#include <benchmark/benchmark.h>

#include <string>

#include "layout/layout.hpp"
#include "layout/mesh_layout.hpp"

namespace meshgate {
namespace {

const Layout& nested_layout() {
  static const Layout l = parse_layout("(2,(1,6)):(1,(6,2))");
  return l;
}

const Layout& four_modes() {
  static const Layout l = parse_layout("((2,2),(2,2)):((32,8),(4,1))");
  return l;
}

void BM_Coalesce(benchmark::State& state) {
  const Layout& l = four_modes();
  for (auto _ : state) benchmark::DoNotOptimize(coalesce(l));
}
BENCHMARK(BM_Coalesce);

void BM_CoalesceNested(benchmark::State& state) {
  const Layout& l = nested_layout();
  for (auto _ : state) benchmark::DoNotOptimize(coalesce(l));
}
BENCHMARK(BM_CoalesceNested);

void BM_CompositionIntB(benchmark::State& state) {
  const Layout a = parse_layout("(10,8,6,4):(7,5,3,2)");
  const Layout b = parse_layout("6:12");
  for (auto _ : state) benchmark::DoNotOptimize(composition(a, b));
}
BENCHMARK(BM_CompositionIntB);

void BM_CompositionTupleB(benchmark::State& state) {
  const Layout a = parse_layout("(4,8,2):(2,8,1)");
  const Layout b = parse_layout("(4,2,2):(2,8,1)");
  for (auto _ : state) benchmark::DoNotOptimize(composition(a, b));
}
BENCHMARK(BM_CompositionTupleB);

void BM_Complement(benchmark::State& state) {
  const Layout l = parse_layout("(2,2):(4,1)");
  for (auto _ : state) benchmark::DoNotOptimize(complement(l, 16));
}
BENCHMARK(BM_Complement);

void BM_ComplementFourModes(benchmark::State& state) {
  const Layout l = parse_layout("(2,3,2,2):(96,8,2,1)");
  for (auto _ : state) benchmark::DoNotOptimize(complement(l, 384));
}
BENCHMARK(BM_ComplementFourModes);

void BM_RightInverse(benchmark::State& state) {
  const Layout l = parse_layout("(2,3,4):(1,8,2)");
  for (auto _ : state) benchmark::DoNotOptimize(right_inverse(l));
}
BENCHMARK(BM_RightInverse);

void BM_ParseLayout(benchmark::State& state) {
  const std::string text = "(2,(1,6)):(1,(6,2))";
  for (auto _ : state) benchmark::DoNotOptimize(parse_layout(text));
}
BENCHMARK(BM_ParseLayout);

void BM_ToString(benchmark::State& state) {
  const Layout& l = nested_layout();
  for (auto _ : state) benchmark::DoNotOptimize(to_string(l));
}
BENCHMARK(BM_ToString);

void BM_AllRanksFromZero(benchmark::State& state) {
  const Layout l = parse_layout("(2,4,2):(1,4,2)");
  for (auto _ : state) benchmark::DoNotOptimize(all_ranks_from_zero(l));
}
BENCHMARK(BM_AllRanksFromZero);

void BM_EvaluateIndex(benchmark::State& state) {
  const Layout& l = four_modes();
  std::int64_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(l(i));
    i = (i + 1) & 15;
  }
}
BENCHMARK(BM_EvaluateIndex);

}  // namespace
}  // namespace meshgate
