// The Communicator's defaults: a backend that lacks a collective fails naming itself and the
// collective, as c10d's Backend does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"

namespace meshgate::comm {
namespace {

// A backend with the calls that have no default and no collective at all.
class NoCollectives final : public Communicator {
 public:
  std::string_view backend() const override { return "bare"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void* allocate(std::size_t) override { return nullptr; }
  void deallocate(void*) override {}
  void copy_from_host(void*, const void*, std::size_t) override {}
  void copy_to_host(void*, const void*, std::size_t) override {}
  void synchronize() override {}
};

// A backend with all_reduce only.
class AllReduceOnly final : public Communicator {
 public:
  int all_reduces = 0;
  std::string_view backend() const override { return "reduce-only"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce(const void*, void*, std::size_t, DType, ReduceOp) override { ++all_reduces; }
  void* allocate(std::size_t) override { return nullptr; }
  void deallocate(void*) override {}
  void copy_from_host(void*, const void*, std::size_t) override {}
  void copy_to_host(void*, const void*, std::size_t) override {}
  void synchronize() override {}
};

// The error `call` raises: a BackendError of kind runtime, or a test failure.
std::string backend_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const BackendError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    return e.what();
  }
  ADD_FAILURE() << "no BackendError";
  return "";
}

TEST(CommunicatorDefaults, EveryCollectiveNamesTheBackendAndItself) {
  NoCollectives c;
  float buf[2] = {1, 2};
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"all_reduce", [&] { c.all_reduce(buf, buf, 1, DType::f32, ReduceOp::sum); }},
      {"all_gather", [&] { c.all_gather(buf, buf, 1, DType::f32); }},
      {"reduce_scatter", [&] { c.reduce_scatter(buf, buf, 1, DType::f32, ReduceOp::sum); }},
      {"all_to_all", [&] { c.all_to_all(buf, buf, 1, DType::f32); }},
      {"broadcast", [&] { c.broadcast(buf, buf, 1, DType::f32, 0); }},
      {"barrier", [&] { c.barrier(); }},
      {"split", [&] { c.split({{0}}); }},
  };
  for (const auto& [name, call] : calls) {
    EXPECT_EQ(backend_error_of(call), "RuntimeError: backend 'bare' does not support " + name)
        << name;
  }
  // Nothing was written.
  EXPECT_EQ(buf[0], 1);
  EXPECT_EQ(buf[1], 2);
}

TEST(CommunicatorDefaults, ABackendLackingOneCollectiveRunsTheOthers) {
  AllReduceOnly c;
  Communicator& base = c;
  float buf = 1;
  base.all_reduce(&buf, &buf, 1, DType::f32, ReduceOp::sum);
  EXPECT_EQ(c.all_reduces, 1);
  EXPECT_THAT(backend_error_of([&] { base.all_to_all(&buf, &buf, 1, DType::f32); }),
              ::testing::HasSubstr("backend 'reduce-only' does not support all_to_all"));
  EXPECT_THAT(backend_error_of([&] { base.reduce_scatter(&buf, &buf, 1, DType::f32,
                                                         ReduceOp::avg); }),
              ::testing::HasSubstr("backend 'reduce-only' does not support reduce_scatter"));
}

}  // namespace
}  // namespace meshgate::comm
