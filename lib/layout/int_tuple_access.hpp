#pragma once
// Internal to the layout module: direct access to IntTuple's pre-order nodes, so the algebra can
// read leaves and build results without materialising intermediate IntTuples, plus the Python
// integer arithmetic (floor division, floor modulo) that the reference relies on.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "layout/int_tuple.hpp"
#include "core/small_vector.hpp"

namespace meshgate {

// The reference computes with unbounded Python ints; libmeshgate stays in int64 and reports a
// result that does not fit as Error(value) instead of wrapping around.
[[noreturn]] void throw_overflow(std::string_view op, std::int64_t a, std::int64_t b,
                                 std::string_view where);

inline std::int64_t mul(std::int64_t a, std::int64_t b, std::string_view where) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw_overflow("*", a, b, where);
  return r;
}

inline std::int64_t add(std::int64_t a, std::int64_t b, std::string_view where) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw_overflow("+", a, b, where);
  return r;
}

// Leaf values of one layout: sixteen inline covers every layout the mesh code builds.
using LeafBuffer = SmallVector<std::int64_t, 16>;

class IntTupleAccess {
 public:
  using Node = IntTuple::Node;
  using Nodes = SmallVector<Node, 8>;

  static const Node* nodes(const IntTuple& t) noexcept { return t.nodes_.data(); }
  static std::size_t node_count(const IntTuple& t) noexcept { return t.nodes_.size(); }
  static Nodes& mutable_nodes(IntTuple& t) noexcept { return t.nodes_; }

  // Nodes in the subtree rooted at `n` (1 for a leaf).
  static std::size_t subtree_size(const Node* n) noexcept {
    return n->span == 0 ? 1 : static_cast<std::size_t>(n->span);
  }
  static bool is_leaf(const Node* n) noexcept { return n->span == 0; }

  // Appends every leaf value of `t` to `out`, depth-first left to right.
  static void append_leaves(const IntTuple& t, LeafBuffer& out) {
    const Node* n = t.nodes_.data();
    const std::size_t count = t.nodes_.size();
    for (std::size_t i = 0; i < count; ++i) {
      if (n[i].span == 0) out.push_back(n[i].value);
    }
  }

  // Product of the leaves of the subtree rooted at `n`; () -> 1.
  static std::int64_t subtree_product(const Node* n) {
    const std::size_t count = subtree_size(n);
    std::int64_t p = 1;
    for (std::size_t i = 0; i < count; ++i) {
      if (n[i].span == 0) p = mul(p, n[i].value, "product");
    }
    return p;
  }

  static IntTuple leaf(std::int64_t value) { return IntTuple(value); }

  // A flat tuple (v0,...,vn-1); with as_int_when_single, a single value becomes an int.
  static IntTuple flat(const std::int64_t* values, std::size_t count, bool as_int_when_single) {
    IntTuple t;
    if (as_int_when_single && count == 1) {
      t.nodes_[0] = Node{values[0], 0};
      return t;
    }
    t.nodes_.resize_for_overwrite(count + 1);
    Node* n = t.nodes_.data();
    n[0] = Node{static_cast<std::int64_t>(count), static_cast<std::int32_t>(count + 1)};
    for (std::size_t i = 0; i < count; ++i) n[i + 1] = Node{values[i], 0};
    return t;
  }

  // A tuple whose elements are the given IntTuples, in order.
  static IntTuple tuple_of(const IntTuple* const* elements, std::size_t count) {
    IntTuple t;
    std::size_t total = 1;
    for (std::size_t i = 0; i < count; ++i) total += elements[i]->nodes_.size();
    t.nodes_.reserve(total);
    t.nodes_[0] = Node{static_cast<std::int64_t>(count), static_cast<std::int32_t>(total)};
    for (std::size_t i = 0; i < count; ++i) {
      t.nodes_.append(elements[i]->nodes_.data(), elements[i]->nodes_.size());
    }
    return t;
  }

  // The subtree rooted at `n` as its own IntTuple.
  static IntTuple from_subtree(const Node* n) {
    IntTuple t;
    t.nodes_.clear();
    t.nodes_.append(n, subtree_size(n));
    return t;
  }
};

// The reference raises ZeroDivisionError; libmeshgate reports it as Error(value) naming the
// operation. Kept out of line so the arithmetic below stays small enough to inline.
[[noreturn]] void throw_division_by_zero(std::string_view op, std::int64_t a,
                                         std::string_view where);

// Python's `a // b` (rounds toward negative infinity).
inline std::int64_t floor_div(std::int64_t a, std::int64_t b, std::string_view where) {
  if (a >= 0 && b > 0) return a / b;  // the common case needs no sign fix-up
  if (b == 0) throw_division_by_zero("//", a, where);
  // INT64_MIN / -1 traps in hardware (SIGFPE); its true quotient 2^63 does not fit anyway.
  if (b == -1) {
    if (a == INT64_MIN) throw_overflow("//", a, b, where);
    return -a;
  }
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python's `a % b` (result has the sign of b).
inline std::int64_t floor_mod(std::int64_t a, std::int64_t b, std::string_view where) {
  if (a >= 0 && b > 0) return a % b;
  if (b == 0) throw_division_by_zero("%", a, where);
  if (b == -1) return 0;  // INT64_MIN % -1 traps in hardware like the division
  std::int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Python's `-(-a // b)`, the ceiling of a / b, without negating a (which overflows at INT64_MIN).
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b, std::string_view where) {
  const std::int64_t q = floor_div(a, b, where);
  return floor_mod(a, b, where) == 0 ? q : q + 1;
}

// Python's repr of an IntTuple ("8", "(8,)", "(2, 3)", "()"), for messages that quote the
// reference's error text.
std::string python_repr(const IntTuple& t);

// Parses one IntTuple of `text` starting at `pos` and leaves `pos` on `terminator` (or at the end
// of the text when terminator is '\0'); errors name columns of the whole text.
IntTuple parse_int_tuple_at(std::string_view text, std::size_t& pos, char terminator);

}  // namespace meshgate
