#include "layout/layout.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "layout/int_tuple_access.hpp"

namespace meshgate {

using Node = IntTupleAccess::Node;
using Nodes = IntTupleAccess::Nodes;

namespace {

// The flat modes of a coalesced layout as parallel shape and stride lists.
struct FlatModes {
  LeafBuffer shape;
  LeafBuffer stride;
};

// One step of pycute's coalesce, which scans leaves right to left from an accumulator 1:0:
// skip shape-1 leaves, let the first real leaf replace a shape-1 accumulator, merge when the
// accumulated mode ends where the next one starts (shape * stride == stride), else push a new
// mode. The modes land in (rs, rd) right to left, i.e. rs[0] is the innermost mode.
inline void coalesce_step(std::int64_t s, std::int64_t d, LeafBuffer& rs, LeafBuffer& rd) {
  if (s == 1) return;
  if (rs.back() == 1) {
    rs.back() = s;
    rd.back() = d;
  } else if (mul(rs.back(), rd.back(), "coalesce") == d) {
    rs.back() = mul(rs.back(), s, "coalesce");
  } else {
    rs.push_back(s);
    rd.push_back(d);
  }
}

// coalesce straight from the node lists of a layout, modes right to left into (rs, rd): equal
// nesting puts the leaves of shape and stride at the same node positions, so no leaf lists are
// gathered first.
void coalesce_layout_reversed(const Layout& l, LeafBuffer& rs, LeafBuffer& rd) {
  const Node* shape = IntTupleAccess::nodes(l.shape());
  const Node* stride = IntTupleAccess::nodes(l.stride());
  rs.clear();
  rd.clear();
  rs.push_back(1);
  rd.push_back(0);
  for (std::size_t i = IntTupleAccess::node_count(l.shape()); i-- > 0;) {
    if (shape[i].span == 0) coalesce_step(shape[i].value, stride[i].value, rs, rd);
  }
}

// Ascending lexicographic order of a handful of tuples; cheaper than std::sort at this size.
template <class Buffer>
void insertion_sort(Buffer& v) {
  for (std::size_t i = 1; i < v.size(); ++i) {
    const auto key = v[i];
    std::size_t j = i;
    for (; j > 0 && key < v[j - 1]; --j) v[j] = v[j - 1];
    v[j] = key;
  }
}

// The leaves after the reserved tuple node at `root` were written right to left: reverse them into
// a flat tuple, or replace that node by the leaf when there is only one.
void finish_mode(Nodes& out, std::size_t root) {
  const std::size_t count = out.size() - root - 1;
  if (count == 1) {
    out[root] = out[root + 1];
    out.pop_back();
    return;
  }
  std::reverse(out.begin() + root + 1, out.end());
  out[root] = Node{static_cast<std::int64_t>(count), static_cast<std::int32_t>(count + 1)};
}

struct CompositionOperands {
  const Layout& a;
  const Layout& b;
};

// a / b for a >= 0, b > 0. Mesh extents and strides are mostly powers of two and always small,
// so a shift or a 32-bit division replaces the slow 64-bit one.
inline std::int64_t div_positive(std::int64_t a, std::int64_t b) {
  const auto ub = static_cast<std::uint64_t>(b);
  if ((ub & (ub - 1)) == 0) return a >> std::countr_zero(ub);
  if ((static_cast<std::uint64_t>(a) >> 32) == 0 && (ub >> 32) == 0) {
    return static_cast<std::uint32_t>(a) / static_cast<std::uint32_t>(b);
  }
  return a / b;
}

[[noreturn]] void throw_composition_undefined(const CompositionOperands& ops, std::int64_t s,
                                              std::int64_t d, std::int64_t curr_shape,
                                              std::int64_t curr_stride, std::int64_t rest_stride) {
  throw Error(ErrorKind::assertion,
              "composition(" + to_string(ops.a) + ", " + to_string(ops.b) +
                  ") is not defined: mode " + std::to_string(curr_shape) + ":" +
                  std::to_string(curr_stride) + " of coalesce(A) = " + to_string(coalesce(ops.a)) +
                  " and the remaining stride " + std::to_string(rest_stride) + " of " +
                  std::to_string(s) + ":" + std::to_string(d) +
                  " do not divide each other (the reference asserts curr_shape % rest_stride == 0 "
                  "or rest_stride % curr_shape == 0)");
}

// composition(A, s:d) for an int-shaped mode of B, appended to (out_shape, out_stride).
// `flat_a` is coalesce(A) right to left: index 0 is A's innermost mode, the last is leaf 0.
void compose_int_mode(const FlatModes& flat_a, std::int64_t s, std::int64_t d, Nodes& out_shape,
                      Nodes& out_stride, const CompositionOperands& ops) {
  if (d == 0) {
    out_shape.push_back(Node{s, 0});
    out_stride.push_back(Node{0, 0});
    return;
  }
  // The modes are found right to left: they are written after a reserved tuple node and
  // put in order (or collapsed to a single int) at the end.
  const std::size_t shape_root = out_shape.size();
  const std::size_t stride_root = out_stride.size();
  out_shape.push_back(Node{0, 0});
  out_stride.push_back(Node{0, 0});
  std::int64_t rest_shape = s;
  std::int64_t rest_stride = d;
  constexpr std::string_view where = "composition";
  const std::size_t n = flat_a.shape.size();
  // Leaves of coalesce(A) from the rightmost down to index 1; leaf 0 is never size-checked,
  // so the outermost mode of A is treated as unbounded.
  for (std::size_t j = 0; j + 1 < n; ++j) {
    const std::int64_t curr_shape = flat_a.shape[j];
    const std::int64_t curr_stride = flat_a.stride[j];
    if (curr_shape > 0 && rest_stride > 0 && rest_shape > 0) {
      // All positive, the usual case: the same arithmetic with one division per branch.
      if (rest_stride >= curr_shape) {
        // curr_shape // rest_stride <= 1, so nothing is emitted and rest_shape stays.
        const std::int64_t q = div_positive(rest_stride, curr_shape);
        if (q * curr_shape != rest_stride) {
          throw_composition_undefined(ops, s, d, curr_shape, curr_stride, rest_stride);
        }
        rest_stride = q;
      } else {
        const std::int64_t q = div_positive(curr_shape, rest_stride);
        if (q * rest_stride != curr_shape) {
          throw_composition_undefined(ops, s, d, curr_shape, curr_stride, rest_stride);
        }
        const std::int64_t new_shape = std::min(q, rest_shape);
        if (new_shape != 1) {
          out_shape.push_back(Node{new_shape, 0});
          out_stride.push_back(Node{mul(rest_stride, curr_stride, where), 0});
          rest_shape = div_positive(rest_shape, new_shape);
        }
        rest_stride = 1;  // ceil(rest_stride / curr_shape) with rest_stride < curr_shape
      }
      continue;
    }
    if (!(floor_mod(curr_shape, rest_stride, where) == 0 ||
          floor_mod(rest_stride, curr_shape, where) == 0)) {
      throw_composition_undefined(ops, s, d, curr_shape, curr_stride, rest_stride);
    }
    const std::int64_t new_shape =
        std::min(std::max<std::int64_t>(1, floor_div(curr_shape, rest_stride, where)), rest_shape);
    if (new_shape != 1) {
      out_shape.push_back(Node{new_shape, 0});
      out_stride.push_back(Node{mul(rest_stride, curr_stride, where), 0});
    }
    rest_shape = floor_div(rest_shape, new_shape, where);
    rest_stride = ceil_div(rest_stride, curr_shape, where);
  }
  if (rest_shape != 1 || out_shape.size() == shape_root + 1) {
    out_shape.push_back(Node{rest_shape, 0});
    out_stride.push_back(Node{mul(rest_stride, flat_a.stride[n - 1], where), 0});
  }
  finish_mode(out_shape, shape_root);
  finish_mode(out_stride, stride_root);
}

// composition(A, B) distributes over B's modes, so the result nests like B with each int
// mode of B replaced by its composed mode.
void compose_nodes(const FlatModes& flat_a, const Node* bs, const Node* bd, Nodes& out_shape,
                   Nodes& out_stride, const CompositionOperands& ops) {
  if (IntTupleAccess::is_leaf(bs)) {
    compose_int_mode(flat_a, bs->value, bd->value, out_shape, out_stride, ops);
    return;
  }
  if (bs->value == 0) {
    throw Error(ErrorKind::value, "composition(" + to_string(ops.a) + ", " + to_string(ops.b) +
                                      "): B has an empty mode (); the reference's make_layout() of "
                                      "no layouts raises ValueError");
  }
  const std::size_t shape_root = out_shape.size();
  const std::size_t stride_root = out_stride.size();
  out_shape.push_back(Node{bs->value, 0});
  out_stride.push_back(Node{bs->value, 0});
  const Node* cs = bs + 1;
  const Node* cd = bd + 1;
  for (std::int64_t i = 0; i < bs->value; ++i) {
    compose_nodes(flat_a, cs, cd, out_shape, out_stride, ops);
    cs += IntTupleAccess::subtree_size(cs);
    cd += IntTupleAccess::subtree_size(cd);
  }
  out_shape[shape_root].span = static_cast<std::int32_t>(out_shape.size() - shape_root);
  out_stride[stride_root].span = static_cast<std::int32_t>(out_stride.size() - stride_root);
}

Layout make_pair_layout(const Layout& first, const Layout& second) {
  const std::array<Layout, 2> modes{first, second};
  return make_layout(modes);
}

}  // namespace

Layout::Layout(IntTuple shape, IntTuple stride)
    : shape_(std::move(shape)), stride_(std::move(stride)) {
  if (!match_structure(shape_, stride_)) {
    throw Error(ErrorKind::value, "sizes " + python_repr(shape_) + " and strides " +
                                      python_repr(stride_) + " don't match (layout " +
                                      meshgate::to_string(shape_) + ":" +
                                      meshgate::to_string(stride_) + ")");
  }
}

Layout::Layout(IntTuple shape) : shape_(std::move(shape)), stride_(suffix_product(shape_)) {}

Layout::Layout() : shape_(1), stride_(0) {}

std::size_t Layout::rank() const {
  return meshgate::rank(shape_);
}

Layout Layout::operator[](std::size_t mode) const {
  if (shape_.is_int()) {
    if (mode != 0) {
      throw Error(ErrorKind::index, "mode " + std::to_string(mode) + " out of range for layout " +
                                        meshgate::to_string(*this) + " with 1 mode");
    }
    return *this;
  }
  const std::size_t n = shape_.length();
  if (mode >= n) {
    throw Error(ErrorKind::index, "mode " + std::to_string(mode) + " out of range for layout " +
                                      meshgate::to_string(*this) + " with " + std::to_string(n) +
                                      " modes");
  }
  return Layout(shape_[mode], stride_[mode]);
}

std::int64_t Layout::operator()(std::int64_t index) const {
  return crd2idx(IntTuple(index), shape_, stride_);
}

std::int64_t Layout::operator()(const IntTuple& coord) const {
  return crd2idx(coord, shape_, stride_);
}

std::int64_t size(const Layout& l) {
  return product(l.shape());
}

std::int64_t cosize(const Layout& l) {
  // Checked: a negative shape can make size() the int64 minimum, and L(size - 1) the maximum.
  return add(l(add(size(l), -1, "cosize")), 1, "cosize");
}

Layout make_layout(std::span<const Layout> modes) {
  detail::SmallVector<const IntTuple*, 8> shapes;
  detail::SmallVector<const IntTuple*, 8> strides;
  for (const Layout& m : modes) {
    shapes.push_back(&m.shape());
    strides.push_back(&m.stride());
  }
  return Layout(IntTupleAccess::tuple_of(shapes.data(), shapes.size()),
                IntTupleAccess::tuple_of(strides.data(), strides.size()));
}

Layout flatten(const Layout& l) {
  return Layout(flatten(l.shape()), flatten(l.stride()));
}

Layout coalesce(const Layout& l) {
  LeafBuffer rs;
  LeafBuffer rd;
  coalesce_layout_reversed(l, rs, rd);
  return Layout(IntTupleAccess::flat_reversed(rs.data(), rs.size(), true),
                IntTupleAccess::flat_reversed(rd.data(), rd.size(), true));
}

Layout coalesce(const Layout& l, const IntTuple& profile) {
  if (profile.is_int()) return coalesce(l);
  const std::size_t n = profile.length();
  if (l.rank() < n) {
    throw Error(ErrorKind::assertion, "coalesce(" + to_string(l) + ", profile " +
                                          to_string(profile) + "): the layout has " +
                                          std::to_string(l.rank()) +
                                          " modes, fewer than the profile's " + std::to_string(n));
  }
  std::vector<Layout> modes;
  modes.reserve(l.rank());
  for (std::size_t i = 0; i < n; ++i) modes.push_back(coalesce(l[i], profile[i]));
  for (std::size_t i = n; i < l.rank(); ++i) modes.push_back(l[i]);
  if (modes.empty()) {
    throw Error(ErrorKind::value, "coalesce(" + to_string(l) + ", profile " + to_string(profile) +
                                      "): no modes to coalesce; the reference's make_layout() of "
                                      "no layouts raises ValueError");
  }
  return make_layout(modes);
}

Layout filter(const Layout& l) {
  // Coalescing nothing gives 1:0, which is also the reference's answer when nothing is kept.
  const Node* shape = IntTupleAccess::nodes(l.shape());
  const Node* stride = IntTupleAccess::nodes(l.stride());
  LeafBuffer rs{1};
  LeafBuffer rd{0};
  for (std::size_t i = IntTupleAccess::node_count(l.shape()); i-- > 0;) {
    if (shape[i].span != 0 || shape[i].value == 1 || stride[i].value == 0) continue;
    coalesce_step(shape[i].value, stride[i].value, rs, rd);
  }
  return Layout(IntTupleAccess::flat_reversed(rs.data(), rs.size(), true),
                IntTupleAccess::flat_reversed(rd.data(), rd.size(), true));
}

Layout composition(const Layout& a, const Layout& b) {
  FlatModes flat_a;
  coalesce_layout_reversed(a, flat_a.shape, flat_a.stride);
  // Built in place in the result's tuples so that no node list is copied afterwards.
  IntTuple shape;
  IntTuple stride;
  Nodes& out_shape = IntTupleAccess::mutable_nodes(shape);
  Nodes& out_stride = IntTupleAccess::mutable_nodes(stride);
  out_shape.clear();
  out_stride.clear();
  const CompositionOperands ops{a, b};
  compose_nodes(flat_a, IntTupleAccess::nodes(b.shape()), IntTupleAccess::nodes(b.stride()),
                out_shape, out_stride, ops);
  return Layout(std::move(shape), std::move(stride));
}

Layout complement(const Layout& l, std::int64_t cotarget) {
  // (stride, shape) leaf pairs in ascending order, ties broken by shape, as Python sorts tuples.
  detail::SmallVector<std::array<std::int64_t, 2>, 16> modes;
  const Node* shape_nodes = IntTupleAccess::nodes(l.shape());
  const Node* stride_nodes = IntTupleAccess::nodes(l.stride());
  for (std::size_t i = 0; i < IntTupleAccess::node_count(l.shape()); ++i) {
    if (shape_nodes[i].span == 0) modes.push_back({stride_nodes[i].value, shape_nodes[i].value});
  }
  insertion_sort(modes);
  // The modes come out smallest stride first, the order in which coalesce scans a result that
  // lists the largest stride first, so they go straight into coalesce's accumulator.
  LeafBuffer rs{1};
  LeafBuffer rd{0};
  std::int64_t current = 1;
  for (const auto& [stride, shape] : modes) {
    if (stride == 0 || shape == 1) continue;
    const std::int64_t end = mul(shape, stride, "complement");
    if (!(current <= end)) {
      throw Error(ErrorKind::assertion,
                  "complement(" + to_string(l) + ", " + std::to_string(cotarget) +
                      ") is not defined: mode " + std::to_string(shape) + ":" +
                      std::to_string(stride) + " ends at " + std::to_string(end) + ", before the " +
                      std::to_string(current) +
                      " already covered by the smaller strides (the reference asserts "
                      "current_idx <= shape * stride)");
    }
    coalesce_step(
        stride > 0 ? div_positive(stride, current) : floor_div(stride, current, "complement"),
        current, rs, rd);
    current = end;
  }
  const std::int64_t covered = add(cotarget, current - 1, "complement");
  coalesce_step(
      covered >= 0 ? div_positive(covered, current) : floor_div(covered, current, "complement"),
      current, rs, rd);
  return Layout(IntTupleAccess::flat_reversed(rs.data(), rs.size(), true),
                IntTupleAccess::flat_reversed(rd.data(), rd.size(), true));
}

Layout right_inverse(const Layout& l) {
  // (stride, shape, compact stride of that leaf in the domain), sorted as Python sorts tuples.
  detail::SmallVector<std::array<std::int64_t, 3>, 16> modes;
  const Node* shape_nodes = IntTupleAccess::nodes(l.shape());
  const Node* stride_nodes = IntTupleAccess::nodes(l.stride());
  std::int64_t running = 1;
  for (std::size_t i = IntTupleAccess::node_count(l.shape()); i-- > 0;) {
    if (shape_nodes[i].span != 0) continue;
    modes.push_back({stride_nodes[i].value, shape_nodes[i].value, running});
    running = mul(running, shape_nodes[i].value, "right_inverse");
  }
  insertion_sort(modes);
  LeafBuffer rs{1};
  LeafBuffer rd{0};
  std::int64_t current = 1;
  for (const auto& [stride, shape, rstride] : modes) {
    if (shape == 1) continue;
    if (current != stride) break;
    // Taken smallest stride first: the coalesce scan order of the result (largest first).
    coalesce_step(shape, rstride, rs, rd);
    current = mul(shape, stride, "right_inverse");
  }
  return Layout(IntTupleAccess::flat_reversed(rs.data(), rs.size(), true),
                IntTupleAccess::flat_reversed(rd.data(), rd.size(), true));
}

Layout left_inverse(const Layout& l) {
  return right_inverse(make_pair_layout(complement(l), l));
}

Layout logical_divide(const Layout& a, const Layout& b) {
  return composition(a, make_pair_layout(b, complement(b, size(a))));
}

Layout logical_product(const Layout& a, const Layout& b) {
  return make_pair_layout(
      a, composition(complement(a, mul(size(a), cosize(b), "logical_product")), b));
}

Layout parse_layout(std::string_view text) {
  std::size_t pos = 0;
  IntTuple shape = parse_int_tuple_at(text, pos, ':');
  ++pos;
  IntTuple stride = parse_int_tuple_at(text, pos, '\0');
  // PyTorch's layout constructor rejects the same pair in these words; a case's expect_error
  // written against them matches here too.
  if (!match_structure(shape, stride)) {
    throw Error(ErrorKind::value, "sizes " + python_repr(shape) + " and strides " +
                                      python_repr(stride) + " don't match (layout '" +
                                      std::string(text) +
                                      "': shape and stride must have the same nesting, int for "
                                      "int and tuples of equal length)");
  }
  return Layout(std::move(shape), std::move(stride));
}

std::string to_string(const Layout& l) {
  return to_string(l.shape()) + ":" + to_string(l.stride());
}

}  // namespace meshgate
