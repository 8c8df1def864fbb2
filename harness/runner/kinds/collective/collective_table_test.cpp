// The collective kind's table alone: each entry's bus factor, buffers, in-place pointers,
// inputs, expected outputs and call, against nccl-tests' and NCCL's definitions.
#include "kinds/collective/collective_table.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace meshgate::runner {
namespace {

const CollectiveEntry& entry(std::string_view name) {
  const CollectiveEntry* e = find_collective(name);
  if (e == nullptr) throw std::logic_error("no collective " + std::string(name));
  return *e;
}

TEST(CollectiveTable, ListsEveryCollectiveOnceInItsOrder) {
  std::vector<std::string_view> names;
  for (const CollectiveEntry& e : collective_table()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string_view>{"all_reduce", "all_gather", "reduce_scatter",
                                                  "all_to_all", "broadcast"}));
  EXPECT_EQ(find_collective("allreduce"), nullptr);
  EXPECT_EQ(collective_names([](const CollectiveEntry&) { return true; }, " or "),
            "all_reduce, all_gather, reduce_scatter, all_to_all or broadcast");
  EXPECT_EQ(collective_names([](const CollectiveEntry& e) { return e.reduces; }, " and "),
            "all_reduce and reduce_scatter");
  EXPECT_EQ(collective_names([](const CollectiveEntry& e) { return e.has_root; }, " and "),
            "broadcast");
}

// nccl-tests' factors (PERFORMANCE.md): all_reduce 2(n-1)/n; all_gather, reduce_scatter and
// all_to_all (n-1)/n; broadcast 1.
TEST(CollectiveTable, BusBandwidthFactorsAreNcclTests) {
  for (int n : {1, 2, 4, 8, 512}) {
    const double chunk = static_cast<double>(n - 1) / n;
    EXPECT_DOUBLE_EQ(entry("all_reduce").bus_factor(n), 2 * chunk) << n;
    EXPECT_DOUBLE_EQ(entry("all_gather").bus_factor(n), chunk) << n;
    EXPECT_DOUBLE_EQ(entry("reduce_scatter").bus_factor(n), chunk) << n;
    EXPECT_DOUBLE_EQ(entry("all_to_all").bus_factor(n), chunk) << n;
    EXPECT_DOUBLE_EQ(entry("broadcast").bus_factor(n), 1.0) << n;
  }
  EXPECT_DOUBLE_EQ(entry("all_reduce").bus_factor(4), 1.5);
}

// A size is the larger buffer; the chunked ops move one chunk per rank (communicator.hpp).
TEST(CollectiveTable, BuffersOfASize) {
  const auto buffers = [](std::string_view name) {
    const CollectiveBuffers b = entry(name).buffers(4096, 4, 4);
    return std::vector<std::size_t>{b.count, b.send_bytes, b.recv_bytes};
  };
  EXPECT_EQ(buffers("all_reduce"), (std::vector<std::size_t>{1024, 4096, 4096}));
  EXPECT_EQ(buffers("all_gather"), (std::vector<std::size_t>{256, 1024, 4096}));
  EXPECT_EQ(buffers("reduce_scatter"), (std::vector<std::size_t>{256, 4096, 1024}));
  EXPECT_EQ(buffers("all_to_all"), (std::vector<std::size_t>{256, 4096, 4096}));
  EXPECT_EQ(buffers("broadcast"), (std::vector<std::size_t>{1024, 4096, 4096}));
  EXPECT_TRUE(entry("all_gather").chunked);
  EXPECT_FALSE(entry("broadcast").chunked);
}

// In place as NCCL: all_gather sends from its block of recv, reduce_scatter receives into its
// block of send, the others use recv for both.
TEST(CollectiveTable, InPlacePointers) {
  std::byte send[64];
  std::byte recv[64];
  const auto at = [&](std::string_view name) {
    const CollectiveEntry::Pointers p = entry(name).in_place(send, recv, 8, 3);
    return std::pair{p.send, p.recv};
  };
  EXPECT_EQ(at("all_gather"), (std::pair{recv + 24, recv}));
  EXPECT_EQ(at("reduce_scatter"), (std::pair{send, send + 24}));
  for (const char* name : {"all_reduce", "all_to_all", "broadcast"}) {
    EXPECT_EQ(at(name), (std::pair{recv, recv})) << name;
  }
  EXPECT_TRUE(entry("all_to_all").in_place_scratch);
  EXPECT_FALSE(entry("all_gather").in_place_scratch);
}

TEST(CollectiveTable, InputsAndExpectedValues) {
  // Only a broadcast's root sends its input.
  for (const CollectiveEntry& e : collective_table()) {
    EXPECT_EQ(e.sends_input(1, 2), e.name != "broadcast") << e.name;
    EXPECT_TRUE(e.sends_input(2, 2)) << e.name;
  }
  // Output element 5 of group rank 2, calls of 4 elements (root 1).
  const auto expected = [](std::string_view name) { return entry(name).expected(5, 4, 2, 1); };
  EXPECT_EQ(expected("all_reduce"), (ExpectedValue{true, 0, 5}));
  EXPECT_EQ(expected("all_gather"), (ExpectedValue{false, 1, 1}));      // block 1: rank 1's
  EXPECT_EQ(expected("reduce_scatter"), (ExpectedValue{true, 0, 13}));  // rank 2's block
  EXPECT_EQ(expected("all_to_all"), (ExpectedValue{false, 1, 9}));      // rank 1's block 2
  EXPECT_EQ(expected("broadcast"), (ExpectedValue{false, 1, 5}));       // the root's
}

// A communicator that records which call it got, with what arguments.
class RecordingCommunicator final : public comm::Communicator {
 public:
  std::string calls;
  std::string_view backend() const override { return "recording"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce(const void*, void*, std::size_t count, comm::DType, comm::ReduceOp op) override {
    note("all_reduce", count, std::string(to_string(op)));
  }
  void all_gather(const void*, void*, std::size_t count, comm::DType) override {
    note("all_gather", count, "");
  }
  void reduce_scatter(const void*, void*, std::size_t count, comm::DType,
                      comm::ReduceOp op) override {
    note("reduce_scatter", count, std::string(to_string(op)));
  }
  void all_to_all(const void*, void*, std::size_t count, comm::DType) override {
    note("all_to_all", count, "");
  }
  void broadcast(const void*, void*, std::size_t count, comm::DType, int root) override {
    note("broadcast", count, "root=" + std::to_string(root));
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(const std::vector<std::vector<int>>&) override {
    return nullptr;
  }
  void* allocate(std::size_t) override { return nullptr; }
  void deallocate(void*) override {}
  void copy_from_host(void*, const void*, std::size_t) override {}
  void copy_to_host(void*, const void*, std::size_t) override {}
  void synchronize() override {}

 private:
  void note(std::string_view name, std::size_t count, const std::string& extra) {
    calls += std::string(name) + "(" + std::to_string(count) + (extra.empty() ? "" : ", ") + extra +
             ") ";
  }
};

TEST(CollectiveTable, EachEntryMakesItsOwnCall) {
  RecordingCommunicator group;
  const CallArgs args{7, comm::DType::f32, comm::ReduceOp::max, 3};
  for (const CollectiveEntry& e : collective_table()) e.call(group, nullptr, nullptr, args);
  EXPECT_EQ(group.calls,
            "all_reduce(7, max) all_gather(7) reduce_scatter(7, max) all_to_all(7) "
            "broadcast(7, root=3) ");
}

}  // namespace
}  // namespace meshgate::runner
