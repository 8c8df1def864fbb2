// ForwardingCommunicator: every call reaches the inner communicator with its arguments, and
// its answers come back; collectives forwarded to the threads backend stay exact. A call it
// failed to forward would reach Communicator's "does not support" default, or a wrong buffer.
#include "comm/forwarding_communicator.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/comm_test_support.hpp"
#include "comm/threads_world.hpp"

namespace meshgate::comm {
namespace {

// Records each call with its arguments, as one line; answers with values of its own.
class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(std::vector<std::string>* calls) : calls_(calls) {}

  std::string_view backend() const override { return "recording"; }
  int rank() const override { return 3; }
  int size() const override { return 5; }
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                  ReduceOp op) override {
    note("all_reduce", send, recv, count, dtype, static_cast<int>(op));
  }
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype) override {
    note("all_gather", send, recv, count, dtype, -1);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      ReduceOp op) override {
    note("reduce_scatter", send, recv, count, dtype, static_cast<int>(op));
  }
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype) override {
    note("all_to_all", send, recv, count, dtype, -1);
  }
  void broadcast(const void* send, void* recv, std::size_t count, DType dtype,
                 int root) override {
    note("broadcast", send, recv, count, dtype, root);
  }
  void barrier() override { calls_->push_back("barrier"); }
  std::unique_ptr<Communicator> split(const std::vector<std::vector<int>>& groups) override {
    calls_->push_back("split " + std::to_string(groups.size()));
    return std::make_unique<RecordingCommunicator>(calls_);
  }
  void* allocate(std::size_t bytes) override {
    calls_->push_back("allocate " + std::to_string(bytes));
    return &memory;
  }
  void deallocate(void* ptr) override { calls_->push_back("deallocate " + pointer(ptr)); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    calls_->push_back("copy_from_host " + pointer(dst) + " " + pointer(src) + " " +
                      std::to_string(bytes));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    calls_->push_back("copy_to_host " + pointer(dst) + " " + pointer(src) + " " +
                      std::to_string(bytes));
  }
  void synchronize() override { calls_->push_back("synchronize"); }

  int memory = 0;

 private:
  static std::string pointer(const void* p) {
    return std::to_string(reinterpret_cast<std::uintptr_t>(p));
  }
  void note(const char* name, const void* send, void* recv, std::size_t count, DType dtype,
            int extra) {
    calls_->push_back(std::string(name) + " " + pointer(send) + " " + pointer(recv) + " " +
                      std::to_string(count) + " " + std::string(to_string(dtype)) + " " +
                      std::to_string(extra));
  }

  std::vector<std::string>* calls_;
};

TEST(ForwardingCommunicator, EveryCallReachesTheInnerCommunicatorWithItsArguments) {
  std::vector<std::string> calls;
  auto inner = std::make_unique<RecordingCommunicator>(&calls);
  void* const inner_memory = &inner->memory;
  ForwardingCommunicator c(std::move(inner));
  EXPECT_EQ(c.backend(), "recording");
  EXPECT_EQ(c.rank(), 3);
  EXPECT_EQ(c.size(), 5);

  int a = 0, b = 0;
  const std::string pa = std::to_string(reinterpret_cast<std::uintptr_t>(&a));
  const std::string pb = std::to_string(reinterpret_cast<std::uintptr_t>(&b));
  c.all_reduce(&a, &b, 7, DType::f16, ReduceOp::max);
  c.all_gather(&a, &b, 8, DType::i32);
  c.reduce_scatter(&b, &a, 9, DType::bf16, ReduceOp::avg);
  c.all_to_all(&a, &b, 10, DType::u8);
  c.broadcast(&a, &b, 11, DType::f64, 4);
  c.barrier();
  const std::unique_ptr<Communicator> group = c.split({{0, 1}, {2, 3, 4}});
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->backend(), "recording");
  EXPECT_EQ(c.allocate(12), inner_memory);
  c.copy_from_host(&a, &b, 13);
  c.copy_to_host(&b, &a, 14);
  c.synchronize();
  c.deallocate(&b);

  const std::vector<std::string> expected = {
      "all_reduce " + pa + " " + pb + " 7 float16 " + std::to_string(int(ReduceOp::max)),
      "all_gather " + pa + " " + pb + " 8 int32 -1",
      "reduce_scatter " + pb + " " + pa + " 9 bfloat16 " + std::to_string(int(ReduceOp::avg)),
      "all_to_all " + pa + " " + pb + " 10 uint8 -1",
      "broadcast " + pa + " " + pb + " 11 float64 4",
      "barrier",
      "split 2",
      "allocate 12",
      "copy_from_host " + pa + " " + pb + " 13",
      "copy_to_host " + pb + " " + pa + " 14",
      "synchronize",
      "deallocate " + pb,
  };
  EXPECT_EQ(calls, expected);
}

// Every collective over forwarding communicators of a threads world, and over the groups split
// through them, gives the exact result.
TEST(ForwardingCommunicator, CollectivesOverTheThreadsBackendStayExact) {
  constexpr int kRanks = 4;
  ThreadsWorld world(kRanks);
  std::vector<std::vector<std::string>> failures(kRanks);
  std::vector<std::exception_ptr> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r, inner = world.communicator(r)]() mutable {
      try {
        ForwardingCommunicator c(std::move(inner));
        const std::unique_ptr<Communicator> pair = c.split({{0, 1}, {2, 3}});
        std::uint64_t seed = 1;
        for (Communicator* comm : {static_cast<Communicator*>(&c), pair.get()}) {
          for (const testing::Collective op :
               {testing::Collective::all_reduce, testing::Collective::all_gather,
                testing::Collective::reduce_scatter, testing::Collective::all_to_all,
                testing::Collective::broadcast}) {
            for (const bool in_place : {false, true}) {
              const testing::CheckSpec spec{op,       DType::f32, ReduceOp::sum, 37,
                                            in_place, ++seed,     comm->size() - 1};
              if (testing::run_and_count_wrong(*comm, spec) != 0) {
                failures[r].push_back(testing::describe(spec));
              }
            }
          }
        }
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    if (errors[r]) std::rethrow_exception(errors[r]);
    EXPECT_TRUE(failures[r].empty()) << "rank " << r << ": " << failures[r].front();
  }
}

}  // namespace
}  // namespace meshgate::comm
