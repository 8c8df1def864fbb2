#pragma once
// IntTuple: an integer or a (possibly empty) tuple of IntTuples, as in CuTe / PyTorch's
// _pycute. Value type: copyable, comparable, hashable. All enumeration orders are
// lexicographic (last leaf fastest), matching PyTorch rather than CUTLASS's colexicographic pycute.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/small_vector.hpp"

namespace meshgate {

class IntTuple {
 public:
  // Inline: the algebra builds its results from these, and a call per tuple would cost as much as
  // the arithmetic of a small layout.
  IntTuple() { nodes_.push_back(Node{0, 1}); }  // the empty tuple ()
  // An int leaf (implicit: `IntTuple t = 8;`).
  IntTuple(std::int64_t value) { nodes_.push_back(Node{value, 0}); }
  static IntTuple tuple(std::vector<IntTuple> elements);
  static IntTuple tuple(std::initializer_list<IntTuple> elements);

  bool is_int() const noexcept;
  std::int64_t value() const;  // the int; Error(type) when this is a tuple
  std::size_t length() const;  // top-level elements of a tuple; Error(type) on an int
  IntTuple operator[](
      std::size_t i) const;  // i-th element of a tuple; Error(index) when out of range
  std::vector<IntTuple> elements() const;  // top-level elements of a tuple; Error(type) on an int

  friend bool operator==(const IntTuple&, const IntTuple&);  // structural: 8 != (8)
  std::size_t hash() const noexcept;

 private:
  // Pre-order nodes: a leaf holds its value, a tuple node holds its child count and the number
  // of nodes in its subtree. Kept inline for small tuples so the algebra does not allocate.
  struct Node {
    std::int64_t value;  // leaf value, or the number of direct children of a tuple
    std::int32_t span;   // nodes in this subtree including itself; 0 marks a leaf
    friend bool operator==(const Node&, const Node&) = default;
  };
  // Eight nodes hold a tuple of up to seven ints, or four modes with one nested level.
  SmallVector<Node, 8> nodes_;
  friend class IntTupleAccess;
};

// rank: number of top-level modes, 1 for an int (CuTe's rank, pycute's len for layouts).
std::size_t rank(const IntTuple& t);
std::int64_t product(const IntTuple& t);              // product of all leaves; () -> 1
std::vector<std::int64_t> leaves(const IntTuple& t);  // depth-first, left to right
IntTuple flatten(const IntTuple& t);                  // a tuple of all leaves (an int stays an int)
IntTuple suffix_product(const IntTuple& shape, std::int64_t init = 1);  // lexicographic strides
bool match_structure(const IntTuple& a, const IntTuple& b);  // int<->int, tuple<->tuple same len

// crd2idx/idx2crd with pycute's lexicographic rules; stride defaults to suffix_product(shape).
// An int coordinate on a tuple shape is split right to left; mode 0 keeps the remainder.
std::int64_t crd2idx(const IntTuple& crd, const IntTuple& shape,
                     const std::optional<IntTuple>& stride = std::nullopt);
IntTuple idx2crd(const IntTuple& idx, const IntTuple& shape,
                 const std::optional<IntTuple>& stride = std::nullopt);

// CuTe notation: "8", "(2,(1,6))", "()", "(8,)" (= "(8)"). Whitespace allowed; negative ints
// allowed. Malformed text -> Error(value) naming the position and what was expected.
IntTuple parse_int_tuple(std::string_view text);
std::string to_string(const IntTuple& t);  // "8", "(8)", "(2,(1,6))", "()"

}  // namespace meshgate

template <>
struct std::hash<meshgate::IntTuple> {
  std::size_t operator()(const meshgate::IntTuple& t) const noexcept { return t.hash(); }
};
