// Run under mpirun (CTest does, at 3, 4, 5 and 8 processes): every process runs every test;
// each verification sums the wrong-element counts of all ranks, so all ranks agree on the
// verdict and rank 0's report is the job's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "comm/comm_test_support.hpp"
#include "comm/mpi_world.hpp"
#ifdef MESHGATE_HAVE_NCCL
#include "comm/nccl_world.hpp"
#endif

namespace meshgate::comm {
namespace {

using testing::CheckSpec;
using testing::Collective;
using testing::describe;
using testing::run_and_count_wrong;

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                             DType::i32, DType::i64, DType::i8,  DType::u8};
constexpr ReduceOp kReduceOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min,
                                   ReduceOp::product};
constexpr Collective kCollectives[] = {Collective::all_reduce, Collective::all_gather,
                                       Collective::reduce_scatter, Collective::all_to_all,
                                       Collective::broadcast};

// The total over every rank of `world` (a collective on it).
std::int64_t total(Communicator& world, std::int64_t mine) {
  std::int64_t sum = 0;
  world.all_reduce(&mine, &sum, 1, DType::i64, ReduceOp::sum);
  return sum;
}

// Every valid (collective, dtype, reduce) at `counts` and both placements on `comm`; returns
// this rank's failing descriptions.
std::vector<std::string> check_matrix(Communicator& comm, const std::vector<std::size_t>& counts,
                                      std::uint64_t seed) {
  std::vector<std::string> failures;
  for (Collective c : kCollectives) {
    for (DType d : kDTypes) {
      for (ReduceOp op : kReduceOps) {
        if (!testing::is_reduction(c) && op != ReduceOp::sum) continue;
        if (op == ReduceOp::avg && !is_floating(d)) continue;
        for (std::size_t count : counts) {
          for (bool in_place : {false, true}) {
            ++seed;
            const CheckSpec spec{
                c, d, op, count, in_place, seed, static_cast<int>(seed % comm.size())};
            if (const std::size_t wrong = run_and_count_wrong(comm, spec)) {
              failures.push_back(describe(spec) + ": " + std::to_string(wrong) + " wrong");
            }
          }
        }
      }
    }
  }
  return failures;
}

TEST(Mpi, EveryCollectiveDtypeAndReduceIsExactOnEveryGroupSize) {
  auto world = mpi_world();
  EXPECT_EQ(world->backend(), "mpi");
  // Groups of the first k ranks for every k up to the world size: 1..N ranks in one job.
  for (int k = 1; k <= world->size(); ++k) {
    std::vector<int> first(static_cast<std::size_t>(k));
    std::iota(first.begin(), first.end(), 0);
    auto group = world->split({first});
    ASSERT_EQ(group != nullptr, world->rank() < k);
    std::vector<std::string> failures;
    if (group) failures = check_matrix(*group, {0, 1, 2, 37, 4099}, 100 * k);
    EXPECT_THAT(failures, ::testing::IsEmpty()) << "group of " << k << " ranks";
    EXPECT_EQ(total(*world, static_cast<std::int64_t>(failures.size())), 0)
        << "failures summed over all ranks, group of " << k;
  }
}

TEST(Mpi, LargeCountsAreExact) {
  auto world = mpi_world();
  const std::size_t million = std::size_t{1} << 20;
  const std::size_t per_rank = million / static_cast<std::size_t>(world->size()) + 1;
  std::int64_t wrong = 0;
  for (bool in_place : {false, true}) {
    wrong += run_and_count_wrong(
        *world, {Collective::all_reduce, DType::f32, ReduceOp::sum, million + 1, in_place, 3});
    wrong += run_and_count_wrong(
        *world, {Collective::all_reduce, DType::bf16, ReduceOp::avg, million, in_place, 4});
    wrong += run_and_count_wrong(
        *world, {Collective::reduce_scatter, DType::f16, ReduceOp::sum, per_rank, in_place, 5});
    wrong += run_and_count_wrong(
        *world, {Collective::all_gather, DType::i32, ReduceOp::sum, per_rank, in_place, 6});
    wrong += run_and_count_wrong(
        *world, {Collective::all_to_all, DType::u8, ReduceOp::sum, per_rank, in_place, 7});
    wrong += run_and_count_wrong(*world, {Collective::broadcast, DType::f64, ReduceOp::sum,
                                          per_rank, in_place, 8, world->size() - 1});
  }
  EXPECT_EQ(total(*world, wrong), 0);
}

// NCCL's out-of-place broadcast over MPI_Bcast, which works in one buffer: the root's send
// reaches every recv, the root's own included, and no send buffer changes.
TEST(Mpi, OutOfPlaceBroadcastWritesEveryRecvAndNoSend) {
  auto world = mpi_world();
  const int me = world->rank();
  std::int64_t wrong = 0;
  for (int root = 0; root < world->size(); ++root) {
    std::vector<std::int32_t> send(7), recv(7, -1);
    for (std::size_t i = 0; i < send.size(); ++i) {
      send[i] = 100 * me + static_cast<std::int32_t>(i);
    }
    world->broadcast(send.data(), recv.data(), send.size(), DType::i32, root);
    for (std::size_t i = 0; i < send.size(); ++i) {
      const auto offset = static_cast<std::int32_t>(i);
      EXPECT_EQ(recv[i], 100 * root + offset) << "recv at " << i << ", root " << root;
      EXPECT_EQ(send[i], 100 * me + offset) << "send at " << i << ", root " << root;
      wrong += (recv[i] != 100 * root + offset) + (send[i] != 100 * me + offset);
    }
  }
  // Send is read on the root only, so the other ranks need not pass one.
  const std::vector<double> send = {1.5, -2.0};
  std::vector<double> recv(2, 0.0);
  world->broadcast(me == 0 ? send.data() : nullptr, recv.data(), 2, DType::f64, 0);
  EXPECT_EQ(recv, send);
  wrong += recv != send;
  EXPECT_EQ(total(*world, wrong), 0) << "wrong elements summed over all ranks";
}

TEST(Mpi, SplitIntoRowsAndColumns) {
  auto world = mpi_world();
  // A 2 x (N/2) grid (rank = row * width + column); an odd world leaves its last rank out.
  const int width = world->size() / 2;
  if (width == 0) GTEST_SKIP() << "needs at least 2 ranks";
  std::vector<std::vector<int>> rows(2), cols(static_cast<std::size_t>(width));
  for (int r = 0; r < 2 * width; ++r) {
    rows[r / width].push_back(r);
    cols[r % width].push_back(r);
  }
  auto row = world->split(rows);
  auto col = world->split(cols);
  const int me = world->rank();
  if (me >= 2 * width) {
    EXPECT_EQ(row, nullptr);
    EXPECT_EQ(col, nullptr);
    total(*world, 0);
    return;
  }
  ASSERT_NE(row, nullptr);
  ASSERT_NE(col, nullptr);
  EXPECT_EQ(row->size(), width);
  EXPECT_EQ(row->rank(), me % width);
  EXPECT_EQ(col->size(), 2);
  EXPECT_EQ(col->rank(), me / width);
  double mine = me, row_sum = 0, col_sum = 0;
  row->all_reduce(&mine, &row_sum, 1, DType::f64, ReduceOp::sum);
  col->all_reduce(&mine, &col_sum, 1, DType::f64, ReduceOp::sum);
  const int row0 = me / width * width;
  EXPECT_EQ(row_sum, width * row0 + width * (width - 1) / 2);
  EXPECT_EQ(col_sum, 2 * (me % width) + width);
  std::vector<std::string> failures = check_matrix(*row, {0, 1, 33}, 7);
  const auto more = check_matrix(*col, {0, 1, 33}, 9);
  failures.insert(failures.end(), more.begin(), more.end());
  EXPECT_THAT(failures, ::testing::IsEmpty());
  EXPECT_EQ(total(*world, static_cast<std::int64_t>(failures.size())), 0);
}

TEST(Mpi, AvgOfIntegersIsRejectedNamingBackendOpAndDtype) {
  auto world = mpi_world();
  for (DType d : {DType::i32, DType::i64, DType::i8, DType::u8}) {
    std::int64_t buffer[64] = {};
    try {
      world->all_reduce(buffer, buffer, 1, d, ReduceOp::avg);
      ADD_FAILURE() << "avg of " << to_string(d) << " must be rejected";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "RuntimeError: backend 'mpi' does not support all_reduce(avg) for " +
                    std::string(to_string(d)) +
                    ": avg is defined for floating-point dtypes only; use sum and divide");
    }
    EXPECT_THROW(world->reduce_scatter(buffer, buffer, 1, d, ReduceOp::avg), Error);
  }
  EXPECT_THROW(world->broadcast(nullptr, nullptr, 0, DType::f32, world->size()), Error);
  EXPECT_THROW(world->split({{0, 0}}), Error);
}

#ifdef MESHGATE_HAVE_NCCL
TEST(Mpi, NcclBootstrapsOverMpi) {
  auto world = mpi_world();
  // NCCL needs one GPU per rank; every rank must take the same branch.
  std::int64_t mine = cuda_device_count() >= world->size() ? 1 : 0;
  std::int64_t everyone = 0;
  world->all_reduce(&mine, &everyone, 1, DType::i64, ReduceOp::min);
  if (everyone == 0) GTEST_SKIP() << "needs " << world->size() << " GPUs";
  auto nccl = nccl_world(*world);
  EXPECT_EQ(nccl->size(), world->size());
  EXPECT_EQ(nccl->rank(), world->rank());
  std::vector<std::string> failures;
  std::uint64_t seed = 500;
  for (Collective c : kCollectives) {
    for (DType d : kDTypes) {
      for (ReduceOp op : kReduceOps) {
        if (!testing::is_reduction(c) && op != ReduceOp::sum) continue;
        // NCCL's float avg multiplies each input by 1/n before summing, which is exact only
        // when n is a power of two.
        const int n = nccl->size();
        if (op == ReduceOp::avg && (!is_floating(d) || (n & (n - 1)) != 0)) continue;
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4099}}) {
          for (bool in_place : {false, true}) {
            const CheckSpec spec{c, d, op, count, in_place, ++seed, 0};
            if (run_and_count_wrong(*nccl, spec)) failures.push_back(describe(spec));
          }
        }
      }
    }
  }
  EXPECT_THAT(failures, ::testing::IsEmpty());
  EXPECT_EQ(total(*world, static_cast<std::int64_t>(failures.size())), 0);
}
#endif

TEST(Mpi, LibraryVersionNamesTheImplementation) {
  EXPECT_THAT(mpi_library_version(), ::testing::StartsWith("Open MPI v"));
}

}  // namespace
}  // namespace meshgate::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  meshgate::comm::MpiSession session(&argc, &argv);
  int rank = 0;
  {
    auto world = meshgate::comm::mpi_world();
    rank = world->rank();
  }
  // One report per job: the verdicts are global (summed over ranks), so rank 0's suffices.
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
