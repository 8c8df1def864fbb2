// threads all_reduce bus bandwidth at 4 ranks, float32 sum, 1 KiB .. 64 MiB, against the
// memcpy bandwidth of the same sizes (the ceiling of any shared-memory collective). busbw uses
// nccl-tests' factor 2(n-1)/n for all_reduce, so it compares with mpi_bench's table and with
// nccl-tests. Each benchmark thread is one rank; Google Benchmark runs every thread for the
// same number of iterations, so their collectives line up.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "comm/threads_world.hpp"

namespace {

using meshgate::comm::Communicator;
using meshgate::comm::DType;
using meshgate::comm::ReduceOp;
using meshgate::comm::ThreadsWorld;

constexpr int kRanks = 4;

// One world per benchmark run, made before its threads start and dropped after they end.
std::unique_ptr<ThreadsWorld>& world() {
  static std::unique_ptr<ThreadsWorld> w;
  return w;
}
void make_world(const benchmark::State& state) {
  world() = std::make_unique<ThreadsWorld>(state.threads());
}
void drop_world(const benchmark::State&) {
  world().reset();
}

void BM_ThreadsAllReduce(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / sizeof(float);
  std::unique_ptr<Communicator> comm = world()->communicator(state.thread_index());
  void* send = comm->allocate(bytes);
  void* recv = comm->allocate(bytes);
  std::vector<float> ones(count, 1.0f);
  comm->copy_from_host(send, ones.data(), bytes);
  comm->copy_from_host(recv, ones.data(), bytes);
  for (auto _ : state) {
    comm->all_reduce(send, recv, count, DType::f32, ReduceOp::sum);
    benchmark::ClobberMemory();
  }
  const int n = comm->size();
  const double factor = 2.0 * (n - 1) / n;
  using benchmark::Counter;
  state.counters["algbw_GB"] = Counter(static_cast<double>(bytes) * 1e-9,
                                       Counter::kIsIterationInvariantRate | Counter::kAvgThreads);
  state.counters["busbw_GB"] = Counter(static_cast<double>(bytes) * factor * 1e-9,
                                       Counter::kIsIterationInvariantRate | Counter::kAvgThreads);
  comm->deallocate(send);
  comm->deallocate(recv);
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(bytes, 1);
  std::vector<char> dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.counters["bw_GB"] = benchmark::Counter(static_cast<double>(bytes) * 1e-9,
                                               benchmark::Counter::kIsIterationInvariantRate);
}

void sizes(benchmark::internal::Benchmark* b) {
  b->RangeMultiplier(4)->Range(1 << 10, 64 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(BM_ThreadsAllReduce)
    ->Apply(sizes)
    ->Threads(kRanks)
    ->Setup(make_world)
    ->Teardown(drop_world);
BENCHMARK(BM_Memcpy)->Apply(sizes);
