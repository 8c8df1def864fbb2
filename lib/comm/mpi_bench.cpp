// MPI all_reduce bus bandwidth, float32 sum, 1 KiB .. 64 MiB: the comparison for comm_bench's
// threads numbers. Run under mpirun, e.g.
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/.../meshgate_comm_mpi_bench
// Prints an nccl-tests-like table on rank 0: per iteration the slowest rank's time, per size
// the median over the timed iterations; algbw = bytes / time, busbw = algbw * 2(n-1)/n.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "comm/mpi_world.hpp"

namespace {

using meshgate::comm::Communicator;
using meshgate::comm::DType;
using meshgate::comm::ReduceOp;

double time_one(Communicator& comm, void* send, void* recv, std::size_t count) {
  const auto begin = std::chrono::steady_clock::now();
  comm.all_reduce(send, recv, count, DType::f32, ReduceOp::sum);
  const double mine =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  double slowest = 0;
  comm.all_reduce(&mine, &slowest, 1, DType::f64, ReduceOp::max);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  meshgate::comm::MpiSession session(&argc, &argv);
  auto comm = meshgate::comm::mpi_world();
  const int n = comm->size();
  const double factor = 2.0 * (n - 1) / n;
  if (comm->rank() == 0) {
    std::printf("# %s, %d ranks, all_reduce float32 sum\n",
                meshgate::comm::mpi_library_version().c_str(), n);
    std::printf("%12s %12s %12s %12s %12s\n", "bytes", "count", "time_us", "algbw_GBps",
                "busbw_GBps");
  }
  for (std::size_t bytes = 1 << 10; bytes <= (std::size_t{64} << 20); bytes *= 4) {
    const std::size_t count = bytes / sizeof(float);
    void* send = comm->allocate(bytes);
    void* recv = comm->allocate(bytes);
    std::vector<float> ones(count, 1.0f);
    comm->copy_from_host(send, ones.data(), bytes);
    comm->copy_from_host(recv, ones.data(), bytes);
    // About 256 MiB moved per size, at least 5 and at most 200 timed iterations.
    const int iterations =
        static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / bytes, 5, 200));
    for (int i = 0; i < 3; ++i) time_one(*comm, send, recv, count);
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i) times.push_back(time_one(*comm, send, recv, count));
    std::nth_element(times.begin(), times.begin() + iterations / 2, times.end());
    const double median = times[static_cast<std::size_t>(iterations / 2)];
    const double algbw = static_cast<double>(bytes) / median * 1e-9;
    if (comm->rank() == 0) {
      std::printf("%12zu %12zu %12.2f %12.3f %12.3f\n", bytes, count, median * 1e6, algbw,
                  algbw * factor);
    }
    comm->deallocate(send);
    comm->deallocate(recv);
  }
  return 0;
}
