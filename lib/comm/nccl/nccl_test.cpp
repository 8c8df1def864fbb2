// The NCCL backend on this process's GPU: one rank, bootstrapped over a threads world of one
// rank (NCCL refuses two ranks of one communicator on the same GPU, so more ranks need more
// GPUs and processes: the MPI test binary covers that when they exist). Without a GPU the
// tests that need one skip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm_test_support.hpp"
#include "comm/nccl_world.hpp"
#include "comm/threads_world.hpp"
#include "core/error.hpp"

namespace meshgate::comm {
namespace {

using testing::CheckSpec;
using testing::Collective;
using testing::describe;
using testing::run_and_count_wrong;

#define MESHGATE_SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible"

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                             DType::i32, DType::i64, DType::i8,  DType::u8};
constexpr ReduceOp kReduceOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min,
                                   ReduceOp::product};
constexpr Collective kCollectives[] = {Collective::all_reduce, Collective::all_gather,
                                       Collective::reduce_scatter, Collective::all_to_all,
                                       Collective::broadcast};

std::unique_ptr<Communicator> single_rank_nccl() {
  ThreadsWorld bootstrap_world(1);
  auto bootstrap = bootstrap_world.communicator(0);
  return nccl_world(*bootstrap);
}

TEST(Nccl, DeviceComesFromTheLocalRank) {
  EXPECT_EQ(device_for_rank(3, 11, 8), 3);             // rank 11 on its node's fourth slot
  EXPECT_EQ(device_for_rank(std::nullopt, 11, 8), 3);  // no launcher: global rank modulo
  EXPECT_EQ(device_for_rank(5, 5, 1), 0);              // one visible device per rank
  try {
    device_for_rank(8, 8, 8);
    FAIL() << "a ninth local rank on eight GPUs was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one rank per GPU per node"), std::string::npos)
        << e.what();
  }
}

TEST(Nccl, VersionIsTheOneBuiltAgainst) {
  EXPECT_THAT(nccl_library_version(), ::testing::MatchesRegex("2\\.[0-9]+\\.[0-9]+"));
}

TEST(Nccl, WithoutAGpuNcclWorldSaysSo) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  ThreadsWorld bootstrap_world(1);
  auto bootstrap = bootstrap_world.communicator(0);
  try {
    nccl_world(*bootstrap);
    FAIL() << "nccl_world must fail without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("no CUDA device is visible"));
  }
}

TEST(Nccl, EveryCollectiveDtypeAndReduceIsExactOnOneRank) {
  MESHGATE_SKIP_WITHOUT_GPU();
  auto comm = single_rank_nccl();
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->rank(), 0);
  std::vector<std::string> failures;
  std::uint64_t seed = 0;
  for (Collective c : kCollectives) {
    for (DType d : kDTypes) {
      for (ReduceOp op : kReduceOps) {
        if (!testing::is_reduction(c) && op != ReduceOp::sum) continue;
        if (op == ReduceOp::avg && !is_floating(d)) continue;
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{37},
                                  std::size_t{4099}, (std::size_t{1} << 20) + 1}) {
          for (bool in_place : {false, true}) {
            const CheckSpec spec{c, d, op, count, in_place, ++seed, 0};
            std::string first;
            if (const std::size_t wrong = run_and_count_wrong(*comm, spec, &first)) {
              failures.push_back(describe(spec) + ": " + std::to_string(wrong) + " wrong, " +
                                 first);
            }
          }
        }
      }
    }
  }
  EXPECT_THAT(failures, ::testing::IsEmpty());
}

TEST(Nccl, SplitKeepsTheRankOrDropsIt) {
  MESHGATE_SKIP_WITHOUT_GPU();
  auto comm = single_rank_nccl();
  auto same = comm->split({{0}});
  ASSERT_NE(same, nullptr);
  EXPECT_EQ(same->size(), 1);
  EXPECT_EQ(run_and_count_wrong(
                *same, {Collective::all_reduce, DType::bf16, ReduceOp::sum, 999, false, 5}),
            0u);
  EXPECT_EQ(comm->split({}), nullptr);
  comm->barrier();
}

TEST(Nccl, AvgOfIntegersIsRejectedNamingBackendOpAndDtype) {
  MESHGATE_SKIP_WITHOUT_GPU();
  auto comm = single_rank_nccl();
  void* buffer = comm->allocate(64);
  try {
    comm->all_reduce(buffer, buffer, 1, DType::i32, ReduceOp::avg);
    ADD_FAILURE() << "avg of int32 must be rejected";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "RuntimeError: backend 'nccl' does not support all_reduce(avg) for int32: avg is "
                 "defined for floating-point dtypes only; use sum and divide");
  }
  EXPECT_THROW(comm->reduce_scatter(buffer, buffer, 1, DType::u8, ReduceOp::avg), Error);
  comm->deallocate(buffer);
}

TEST(Nccl, EventTimerTimesTheStream) {
  MESHGATE_SKIP_WITHOUT_GPU();
  auto comm = single_rank_nccl();
  const std::size_t count = std::size_t{1} << 24;
  void* buffer = comm->allocate(count * 4);
  EventTimer timer(*comm);
  timer.start();
  for (int i = 0; i < 10; ++i) comm->all_reduce(buffer, buffer, count, DType::f32, ReduceOp::sum);
  timer.stop();
  const double seconds = timer.seconds();
  EXPECT_GT(seconds, 0.0);
  EXPECT_LT(seconds, 10.0);
  comm->deallocate(buffer);
}

TEST(Nccl, EventTimerNeedsAnNcclCommunicator) {
  ThreadsWorld world(1);
  auto comm = world.communicator(0);
  EXPECT_THROW(EventTimer timer(*comm), Error);
}

}  // namespace
}  // namespace meshgate::comm
