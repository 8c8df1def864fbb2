#pragma once
// The collective kind's inputs and expected outputs: small integers generated from (seed, rank,
// index), exact in every dtype, and the codec that reads and writes them in a host buffer.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "core/half_float.hpp"

namespace meshgate::runner::collective_kind {

using comm::DType;
using comm::ReduceOp;

// ---- exact values -------------------------------------------------------------------------

inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The largest magnitude up to which every integer is exact in the dtype, kept small enough
// that generation stays cheap and int8/uint8 keep a value (127/255) free for the sentinel.
inline std::int64_t exact_limit(DType d) {
  switch (d) {
    case DType::f16:
      return 2048;
    case DType::bf16:
      return 256;
    case DType::i8:
      return 100;
    case DType::u8:
      return 200;
    default:
      return std::int64_t{1} << 20;
  }
}

// The largest k with 2^k <= limit: how many factors of 2 a product may hold and stay exact.
inline int exact_doublings(std::int64_t limit) {
  int k = 0;
  while ((std::int64_t{2} << k) <= limit) ++k;
  return k;
}

// The largest input magnitude of an avg on a group of n, before the multiplication by n that
// makes the average an integer: at least 1 for a case the kind accepts (n <= exact_limit).
inline std::int64_t avg_budget(DType d, int n) {
  return exact_limit(d) / n;
}

// Inputs and expected outputs of one group: element `index` of group rank `rank`. Every
// partial result of a reduction, in whatever order a backend combines the ranks, stays within
// exact_limit, so every expected value is exact. A large group leaves no room for every rank to
// add a non-zero value to every element (bfloat16 sums on 512 ranks, or an avg on 32, would
// all be 0 and nothing would be checked), so each element has a window of active ranks,
// starting at rank index % n: they contribute values that are never the op's identity (0 for
// sum and avg, 1 for product), the others the identity. Every rank is active on some elements,
// where losing or repeating its contribution changes the result.
class Values {
 public:
  Values(std::uint64_t seed, DType dtype, std::optional<ReduceOp> reduce, int n)
      : seed_(seed), reduce_(reduce), n_(n), unsigned_(dtype == DType::u8) {
    const std::int64_t limit = exact_limit(dtype);
    // Non-reducing ops, max and min: any exact value, on every rank.
    hi_ = limit;
    lo_ = unsigned_ ? 0 : -limit;
    active_ = n;
    if (reduce == ReduceOp::sum) {
      active_ = static_cast<int>(std::min<std::int64_t>(n, limit));
      magnitude_ = limit / active_;
    } else if (reduce == ReduceOp::avg) {
      const std::int64_t budget = avg_budget(dtype, n);  // inputs are n * base
      active_ = static_cast<int>(std::min<std::int64_t>(n, budget));
      magnitude_ = budget / active_;
    } else if (reduce == ReduceOp::product) {
      active_ = std::min(n, exact_doublings(limit));
      magnitude_ = 2;
    }
  }

  std::int64_t input(int rank, std::uint64_t index) const {
    const std::uint64_t h = mix(seed_ ^ mix(static_cast<std::uint64_t>(rank) * 0x100000001B3ull +
                                            index * 0x9E3779B97F4A7C15ull));
    const bool sums = reduce_ == ReduceOp::sum || reduce_ == ReduceOp::avg;
    if (!sums && reduce_ != ReduceOp::product) {
      return lo_ + static_cast<std::int64_t>(h % static_cast<std::uint64_t>(hi_ - lo_ + 1));
    }
    const std::int64_t sign = (!unsigned_ && (h & 1u)) ? -1 : 1;
    const auto first = static_cast<int>(index % static_cast<std::uint64_t>(n_));
    const bool active = (rank - first + n_) % n_ < active_;
    if (reduce_ == ReduceOp::product) return sign * (active ? 2 : 1);
    if (!active) return 0;
    const std::int64_t base =
        sign * (1 + static_cast<std::int64_t>((h >> 1) % static_cast<std::uint64_t>(magnitude_)));
    return reduce_ == ReduceOp::avg ? base * n_ : base;
  }

  std::int64_t reduced(std::uint64_t index) const {
    std::int64_t acc = input(0, index);
    for (int r = 1; r < n_; ++r) {
      const std::int64_t v = input(r, index);
      switch (*reduce_) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          acc += v;
          break;
        case ReduceOp::max:
          acc = std::max(acc, v);
          break;
        case ReduceOp::min:
          acc = std::min(acc, v);
          break;
        case ReduceOp::product:
          acc *= v;
          break;
      }
    }
    return *reduce_ == ReduceOp::avg ? acc / n_ : acc;
  }

 private:
  std::uint64_t seed_;
  std::optional<ReduceOp> reduce_;
  int n_;
  bool unsigned_;
  std::int64_t lo_ = 0;
  std::int64_t hi_ = 0;
  int active_ = 1;              // ranks with a non-identity input per element (reductions)
  std::int64_t magnitude_ = 1;  // their largest |input| (times n for avg)
};

// Reads and writes elements of one dtype in a host buffer.
struct Codec {
  DType dtype;
  std::size_t size;

  void put(std::byte* buffer, std::size_t i, std::int64_t v) const {
    std::byte* at = buffer + i * size;
    switch (dtype) {
      case DType::f32:
        store(at, static_cast<float>(v));
        break;
      case DType::f64:
        store(at, static_cast<double>(v));
        break;
      case DType::f16:
        store(at, float_to_half(static_cast<float>(v)));
        break;
      case DType::bf16:
        store(at, float_to_bf16(static_cast<float>(v)));
        break;
      case DType::i32:
        store(at, static_cast<std::int32_t>(v));
        break;
      case DType::i64:
        store(at, v);
        break;
      case DType::i8:
        store(at, static_cast<std::int8_t>(v));
        break;
      case DType::u8:
        store(at, static_cast<std::uint8_t>(v));
        break;
    }
  }
  // A value no generated input or result has: NaN, or the type's largest value.
  void put_sentinel(std::byte* buffer, std::size_t i) const {
    std::byte* at = buffer + i * size;
    switch (dtype) {
      case DType::f32:
        store(at, std::numeric_limits<float>::quiet_NaN());
        break;
      case DType::f64:
        store(at, std::numeric_limits<double>::quiet_NaN());
        break;
      case DType::f16:
        store(at, std::uint16_t{0x7E00});
        break;
      case DType::bf16:
        store(at, std::uint16_t{0x7FC0});
        break;
      case DType::i32:
        store(at, std::numeric_limits<std::int32_t>::max());
        break;
      case DType::i64:
        store(at, std::numeric_limits<std::int64_t>::max());
        break;
      case DType::i8:
        store(at, std::numeric_limits<std::int8_t>::max());
        break;
      case DType::u8:
        store(at, std::numeric_limits<std::uint8_t>::max());
        break;
    }
  }
  bool equals(const std::byte* buffer, std::size_t i, std::int64_t expected) const {
    const std::byte* at = buffer + i * size;
    switch (dtype) {
      case DType::f32:
        return load<float>(at) == static_cast<double>(expected);
      case DType::f64:
        return load<double>(at) == static_cast<double>(expected);
      case DType::f16:
        return half_to_float(load<std::uint16_t>(at)) == static_cast<float>(expected);
      case DType::bf16:
        return bf16_to_float(load<std::uint16_t>(at)) == static_cast<float>(expected);
      case DType::i32:
        return load<std::int32_t>(at) == expected;
      case DType::i64:
        return load<std::int64_t>(at) == expected;
      case DType::i8:
        return load<std::int8_t>(at) == expected;
      case DType::u8:
        return load<std::uint8_t>(at) == expected;
    }
    return false;
  }

 private:
  template <class T>
  static void store(std::byte* at, T v) {
    std::memcpy(at, &v, sizeof v);
  }
  template <class T>
  static T load(const std::byte* at) {
    T v;
    std::memcpy(&v, at, sizeof v);
    return v;
  }
};

}  // namespace meshgate::runner::collective_kind
