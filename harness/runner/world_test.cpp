#include "world.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

namespace meshgate::runner {
namespace {

TEST(ThreadsWorld, RanksRunConcurrentlyOnDistinctThreads) {
  ThreadsWorld world(4);
  std::mutex mutex;
  std::condition_variable all_arrived;
  int arrived = 0;
  std::set<std::thread::id> threads;
  bool everyone_met = true;
  // Every rank waits until all four are inside fn: this only completes if they run at once.
  world.run_on_ranks(4, [&](int) {
    std::unique_lock<std::mutex> lock(mutex);
    threads.insert(std::this_thread::get_id());
    ++arrived;
    all_arrived.notify_all();
    if (!all_arrived.wait_for(lock, std::chrono::seconds(10), [&] { return arrived == 4; })) {
      everyone_met = false;
    }
  });
  EXPECT_TRUE(everyone_met);
  EXPECT_EQ(threads.size(), 4u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

TEST(ThreadsWorld, FirstFailureNamesItsRankAndOthersFinish) {
  ThreadsWorld world(4);
  std::atomic<int> finished{0};
  try {
    world.run_on_ranks(4, [&](int rank) {
      if (rank == 2) throw std::runtime_error("bad shard");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++finished;
    });
    FAIL() << "expected RankFailure";
  } catch (const RankFailure& e) {
    EXPECT_EQ(e.rank(), 2);
    EXPECT_STREQ(e.what(), "rank 2: bad shard");
  }
  EXPECT_EQ(finished.load(), 3);
}

TEST(ThreadsWorld, RejectsMoreRanksThanTheWorld) {
  ThreadsWorld world(2);
  EXPECT_THROW(world.run_on_ranks(3, [](int) {}), std::invalid_argument);
  EXPECT_EQ(world.world_size(), 2);
  EXPECT_EQ(world.backend(), "threads");
}

}  // namespace
}  // namespace meshgate::runner
