#include "comm/host_reduce.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/half_float.hpp"

namespace meshgate::comm {
namespace {

TEST(HostReduce, Float16RoundsAfterEveryStepInSourceOrder) {
  // 2048 + 1 = 2049 is a tie between 2048 and 2050 in float16 and rounds to even (2048) at each
  // step; one rounding at the end would give 2050.
  const std::uint16_t a = float_to_half(2048.0f);
  const std::uint16_t b = float_to_half(1.0f);
  const void* srcs[] = {&a, &b, &b};
  std::uint16_t out = 0;
  reduce_sources(srcs, &out, 1, DType::f16, ReduceOp::sum);
  EXPECT_EQ(half_to_float(out), 2048.0f);
  // The other order adds 1 + 1 exactly first: 2 + 2048 = 2050.
  const void* reordered[] = {&b, &b, &a};
  reduce_sources(reordered, &out, 1, DType::f16, ReduceOp::sum);
  EXPECT_EQ(half_to_float(out), 2050.0f);
}

TEST(HostReduce, AvgIsSumThenOneDivision) {
  const std::uint16_t x[] = {float_to_bf16(1.0f), float_to_bf16(2.0f)};
  const std::uint16_t y[] = {float_to_bf16(2.0f), float_to_bf16(2.0f)};
  const std::uint16_t z[] = {float_to_bf16(4.0f), float_to_bf16(2.0f)};
  const void* srcs[] = {x, y, z};
  std::uint16_t out[2] = {};
  reduce_sources(srcs, out, 2, DType::bf16, ReduceOp::avg);
  EXPECT_EQ(out[0], float_to_bf16(7.0f / 3.0f));
  EXPECT_EQ(bf16_to_float(out[1]), 2.0f);
}

TEST(HostReduce, IntegersWrapAndDestinationMayAliasASource) {
  std::vector<std::int8_t> a = {100, -128, 16, 3};
  const std::vector<std::int8_t> b = {100, -1, 16, -7};
  const void* srcs[] = {b.data(), a.data()};
  reduce_sources(srcs, a.data(), a.size(), DType::i8, ReduceOp::sum);  // dst is the 2nd source
  EXPECT_EQ(a, (std::vector<std::int8_t>{-56, 127, 32, -4}));
  std::vector<std::int8_t> p = {16, -3, 0, 2};
  const void* prod[] = {p.data(), b.data()};
  reduce_sources(prod, p.data(), p.size(), DType::i8, ReduceOp::product);
  EXPECT_EQ(p, (std::vector<std::int8_t>{64, 3, 0, -14}));  // 16 * 100 = 1600 = 6 * 256 + 64
}

TEST(HostReduce, MaxMinAcrossBlocksOfUnsignedBytes) {
  std::vector<std::uint8_t> a(5000), b(5000);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<std::uint8_t>(i % 251);
    b[i] = static_cast<std::uint8_t>(250 - i % 251);
  }
  const void* srcs[] = {a.data(), b.data()};
  std::vector<std::uint8_t> hi(5000), lo(5000);
  reduce_sources(srcs, hi.data(), hi.size(), DType::u8, ReduceOp::max);
  reduce_sources(srcs, lo.data(), lo.size(), DType::u8, ReduceOp::min);
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(hi[i], std::max(a[i], b[i])) << i;
    ASSERT_EQ(lo[i], std::min(a[i], b[i])) << i;
  }
}

TEST(HostReduce, AvgOfIntegersIsRejected) {
  std::int32_t x = 1;
  const void* srcs[] = {&x};
  EXPECT_THROW(reduce_sources(srcs, &x, 1, DType::i32, ReduceOp::avg), Error);
  EXPECT_THROW(divide_elements(&x, 1, DType::i32, 2), Error);
}

}  // namespace
}  // namespace meshgate::comm
