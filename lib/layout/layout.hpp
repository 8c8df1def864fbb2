#pragma once
// Layout = (shape, stride), two IntTuples of identical nesting; a function from coordinates
// (or linear indices, split lexicographically) to integers. The CuTe algebra as free functions,
// following PyTorch's _pycute (lexicographic variant). See docs/kinds.md, Layouts.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "layout/int_tuple.hpp"

namespace meshgate {

class Layout {
 public:
  Layout(IntTuple shape, IntTuple stride);  // Error(value) unless match_structure(shape, stride)
  explicit Layout(IntTuple shape);          // strides = suffix_product(shape) (row-major)
  Layout() : shape_(1), stride_(0) {}       // 1:0

  const IntTuple& shape() const noexcept { return shape_; }
  const IntTuple& stride() const noexcept { return stride_; }

  std::size_t rank() const;                   // len(L): top-level modes, 1 for an int shape
  Layout operator[](std::size_t mode) const;  // i-th top-level mode; Error(index) out of range
  std::int64_t operator()(std::int64_t index) const;     // L(i), index split lexicographically
  std::int64_t operator()(const IntTuple& coord) const;  // L(c) = crd2idx(c, shape, stride)

  friend bool operator==(const Layout&, const Layout&) = default;  // structural, no normalisation

 private:
  IntTuple shape_;
  IntTuple stride_;
  // The algebra (layout.cpp) writes its results' nodes in place, nesting equal by construction.
  friend struct LayoutAccess;
};

std::int64_t size(const Layout& l);    // product of shape leaves
std::int64_t cosize(const Layout& l);  // L(size - 1) + 1
// Modes side by side: (s0,s1,..):(d0,d1,..); no modes gives ():().
Layout make_layout(std::span<const Layout> modes);
Layout flatten(const Layout& l);  // all leaves as top-level modes

// @post coalesce(L)(i) == L(i) for all i < size(L); shape-1 leaves dropped; all-1 -> 1:0.
Layout coalesce(const Layout& l);
// Coalesce each mode of `profile`-shaped top level separately (pycute's profile argument).
Layout coalesce(const Layout& l, const IntTuple& profile);
// Drop shape-1 and stride-0 leaves, then coalesce; nothing left -> 1:0.
Layout filter(const Layout& l);
// @post composition(A,B)(i) == A(B(i)) for all i < size(B). Error(assertion) when the
// divisibility condition of the reference fails (e.g. (4,6,8,10):(2,3,5,7) o 6:12).
// As in the reference, the postcondition needs more than "no assertion": a mode of B whose
// shape does not divide A's modes is silently truncated ((3,4):(1,3) o 6:1 = 4:3); the result
// distributes over B's modes, so it is exact for all of B only when those modes do not overlap;
// and past size(A) it follows coalesce(A), whose outermost mode is unbounded.
// Error(value) when B contains an empty mode () (the reference's make_layout of nothing).
Layout composition(const Layout& a, const Layout& b);
// Error(assertion) on inputs the reference asserts against (e.g. (8,2):(1,2)). Overlapping or
// non-dividing strides are not rejected and give the reference's result: 0-size modes
// ((2,2):(1,1), 8 -> (4,0):(2,2)) or holes.
// @post for L injective with dividing strides, complement(L, c) and L are disjoint and
// make_layout(complement(L, c), L) covers [0, c).
Layout complement(const Layout& l, std::int64_t cotarget = 1);
// @post L(right_inverse(L)(i)) == i for all i < size(right_inverse(L)).
Layout right_inverse(const Layout& l);
// @post left_inverse(L)(L(i)) == i for all i < size(L), for injective L whose strides divide
// (sorted by stride, each starts at a multiple of where the smaller ones end); others such as
// (2,3):(3,2) get the reference's answer, (3,2):(1,6), which is not a left inverse.
Layout left_inverse(const Layout& l);
// composition(A, make_layout(B, complement(B, size(A)))).
Layout logical_divide(const Layout& a, const Layout& b);
// make_layout(A, composition(complement(A, size(A) * cosize(B)), B)), for int-shaped B too
// (the reference sends an int B to logical_divide by mistake).
Layout logical_product(const Layout& a, const Layout& b);

// CuTe notation "shape:stride", e.g. "(2,(1,6)):(1,(6,2))", "8:1", "(8):(1)".
// Malformed text or mismatched nesting -> Error(value) that quotes the text and the position.
Layout parse_layout(std::string_view text);
std::string to_string(const Layout& l);

}  // namespace meshgate

template <>
struct std::hash<meshgate::Layout> {
  std::size_t operator()(const meshgate::Layout& l) const noexcept {
    return l.shape().hash() * 31 + l.stride().hash();
  }
};
