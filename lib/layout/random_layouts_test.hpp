#pragma once
// Seeded generators of layouts for the contract tests: nested and flat shapes of at most five
// leaves and bounded size, with arbitrary, compact, or injective (orthogonal) strides.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "layout/int_tuple.hpp"
#include "layout/layout.hpp"

namespace meshgate::testing {

class LayoutGenerator {
 public:
  explicit LayoutGenerator(std::uint64_t seed) : rng_(seed) {}

  std::int64_t pick(std::initializer_list<std::int64_t> values) {
    std::uniform_int_distribution<std::size_t> d(0, values.size() - 1);
    return *(values.begin() + static_cast<std::ptrdiff_t>(d(rng_)));
  }
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }

  // Leaf extents whose product stays <= max_size; powers of two make composition defined more
  // often, small odd factors exercise the divisibility assertions.
  std::vector<std::int64_t> extents(std::size_t max_leaves, std::int64_t max_size, bool pow2) {
    const auto count = static_cast<std::size_t>(uniform(1, static_cast<std::int64_t>(max_leaves)));
    std::vector<std::int64_t> out;
    std::int64_t total = 1;
    for (std::size_t i = 0; i < count; ++i) {
      std::int64_t e = pow2 ? pick({1, 2, 2, 4, 4, 8}) : pick({1, 2, 3, 4, 5, 6, 8});
      while (total * e > max_size) e = 1;
      total *= e;
      out.push_back(e);
    }
    return out;
  }

  // Groups `values` (in order) into a random nesting: an int when there is one leaf and the
  // coin says so, otherwise a tuple whose elements are ints or tuples of consecutive leaves.
  IntTuple nest(const std::vector<std::int64_t>& values) {
    if (values.size() == 1 && coin(0.6)) return IntTuple(values[0]);
    std::vector<IntTuple> modes;
    std::size_t i = 0;
    while (i < values.size()) {
      const std::size_t left = values.size() - i;
      const std::size_t take =
          left == 1 || coin(0.65)
              ? 1
              : static_cast<std::size_t>(uniform(2, static_cast<std::int64_t>(left)));
      if (take == 1 && coin(0.85)) {
        modes.emplace_back(values[i]);
      } else {
        std::vector<std::int64_t> part(values.begin() + static_cast<std::ptrdiff_t>(i),
                                       values.begin() + static_cast<std::ptrdiff_t>(i + take));
        std::vector<IntTuple> inner;
        for (std::int64_t v : part) inner.emplace_back(v);
        modes.push_back(IntTuple::tuple(std::move(inner)));
      }
      i += take;
    }
    return IntTuple::tuple(std::move(modes));
  }

  // Replaces the leaves of `shape` (pre-order) by `values`, keeping its nesting.
  static IntTuple with_leaves(const IntTuple& shape, const std::vector<std::int64_t>& values) {
    std::size_t next = 0;
    return rebuild(shape, values, next);
  }

  // Any non-negative strides, including 0 and overlapping ones.
  Layout arbitrary(std::size_t max_leaves = 5, std::int64_t max_size = 256) {
    const bool pow2 = coin();
    const std::vector<std::int64_t> ext = extents(max_leaves, max_size, pow2);
    std::vector<std::int64_t> strides;
    for (std::size_t i = 0; i < ext.size(); ++i) {
      strides.push_back(pow2 ? pick({0, 1, 2, 4, 8, 16, 32}) : pick({0, 1, 2, 3, 4, 5, 6, 8, 12}));
    }
    const IntTuple shape = nest(ext);
    return Layout(shape, with_leaves(shape, strides));
  }

  // Injective layouts whose modes, sorted by stride, each start at a multiple of the span of
  // the smaller ones (the layouts check_orthogonal accepts): permuted, optionally with gaps.
  Layout injective(std::size_t max_leaves = 5, std::int64_t max_size = 256, bool gaps = true) {
    const std::vector<std::int64_t> ext = extents(max_leaves, max_size, coin());
    std::vector<std::size_t> order(ext.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::shuffle(order.begin(), order.end(), rng_);
    std::vector<std::int64_t> strides(ext.size());
    std::int64_t span = 1;
    for (std::size_t k : order) {
      if (gaps && coin(0.3)) span *= pick({2, 3});
      strides[k] = span;
      span *= ext[k];
    }
    const IntTuple shape = nest(ext);
    return Layout(shape, with_leaves(shape, strides));
  }

  std::mt19937_64& engine() { return rng_; }

 private:
  static IntTuple rebuild(const IntTuple& shape, const std::vector<std::int64_t>& values,
                          std::size_t& next) {
    if (shape.is_int()) return IntTuple(values[next++]);
    std::vector<IntTuple> modes;
    for (const IntTuple& e : shape.elements()) modes.push_back(rebuild(e, values, next));
    return IntTuple::tuple(std::move(modes));
  }

  std::mt19937_64 rng_;
};

}  // namespace meshgate::testing
