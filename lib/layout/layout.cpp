#include "layout/layout.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <span>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "layout/int_tuple_access.hpp"

namespace meshgate {

using Node = IntTupleAccess::Node;
using Nodes = IntTupleAccess::Nodes;

// The algebra writes its results' node lists in place. Built as two IntTuples and then moved into
// a Layout, a result would copy both inline node buffers and have its nesting checked, which its
// construction already guarantees.
struct LayoutAccess {
  static Nodes& shape_nodes(Layout& l) noexcept { return IntTupleAccess::mutable_nodes(l.shape_); }
  static Nodes& stride_nodes(Layout& l) noexcept {
    return IntTupleAccess::mutable_nodes(l.stride_);
  }
};

namespace {

// Appends `count` values found innermost first the way pycute returns its reversed result list:
// one int, or the flat tuple (values[count-1],...,values[0]). The algebra keeps the modes it
// finds as plain integers until here: writing nodes and reversing them afterwards loads each node
// right after its two narrower stores, which the CPU cannot forward to that load (a stall each).
void append_reversed(Nodes& out, const std::int64_t* values, std::size_t count) {
  if (count == 1) {
    out.push_back(Node{values[0], 0});
    return;
  }
  const std::size_t at = out.size();
  out.resize_for_overwrite(at + count + 1);
  Node* n = out.data() + at;
  n[0] = Node{static_cast<std::int64_t>(count), static_cast<std::int32_t>(count + 1)};
  for (std::size_t i = 0; i < count; ++i) n[i + 1] = Node{values[count - 1 - i], 0};
}

// Makes `out` the flat layout of `count` modes given innermost first:
// (shapes[count-1],...,shapes[0]):(strides[count-1],...,strides[0]), a single mode as ints.
// append_reversed() twice would do, but the ops that end here are short enough for its two calls
// and two loops to show; this writes both node lists in one loop.
void assign_flat_reversed(Layout& out, const std::int64_t* shapes, const std::int64_t* strides,
                          std::size_t count) {
  Nodes& shape_nodes = LayoutAccess::shape_nodes(out);
  Nodes& stride_nodes = LayoutAccess::stride_nodes(out);
  if (count == 1) {
    shape_nodes.resize_for_overwrite(1);
    stride_nodes.resize_for_overwrite(1);
    shape_nodes[0] = Node{shapes[0], 0};
    stride_nodes[0] = Node{strides[0], 0};
    return;
  }
  shape_nodes.resize_for_overwrite(count + 1);
  stride_nodes.resize_for_overwrite(count + 1);
  Node* shape = shape_nodes.data();
  Node* stride = stride_nodes.data();
  const Node root{static_cast<std::int64_t>(count), static_cast<std::int32_t>(count + 1)};
  shape[0] = root;
  stride[0] = root;
  for (std::size_t i = 0; i < count; ++i) {
    shape[i + 1] = Node{shapes[count - 1 - i], 0};
    stride[i + 1] = Node{strides[count - 1 - i], 0};
  }
}

// pycute's coalesce, which scans leaves right to left from a result list [1]:[0]: skip shape-1
// leaves, let the first real leaf replace a shape-1 last mode, merge into the last mode when it
// ends where the next leaf starts (shape * stride == stride), else append a new mode.
// The last mode, the only one that can still change, is kept in registers; the modes before it
// are final and stored innermost first. Every op that ends in pycute's coalesce uses it
// (coalesce, filter, complement, right_inverse), and composition for coalesce(A).
class ModeCoalescer {
 public:
  // Room for `capacity` calls of add() is made here, once, so that add() never checks it.
  explicit ModeCoalescer(std::size_t capacity) {
    shape_buffer_.resize_for_overwrite(capacity + 1);
    stride_buffer_.resize_for_overwrite(capacity + 1);
    shapes_ = shape_buffer_.data();
    strides_ = stride_buffer_.data();
  }
  ModeCoalescer(const ModeCoalescer&) = delete;  // shapes_ and strides_ point into the buffers
  ModeCoalescer& operator=(const ModeCoalescer&) = delete;

  void add(std::int64_t s, std::int64_t d) {
    Scan scan = scan_;
    step(s, d, scan);
    scan_ = scan;
  }

  // Adds the leaves of `l` in pycute's order, right to left, straight from its node lists (equal
  // nesting puts the leaves of shape and stride at the same node positions).
  void add_leaves_of(const Layout& l) {
    const Node* shape = IntTupleAccess::nodes(l.shape());
    const Node* stride = IntTupleAccess::nodes(l.stride());
    Scan scan = scan_;
    for (std::size_t i = IntTupleAccess::node_count(l.shape()); i-- > 0;) {
      if (shape[i].span == 0) step(shape[i].value, stride[i].value, scan);
    }
    scan_ = scan;
  }

  // Ends the scan: the last mode joins the stored ones, and shapes()/strides() hold all
  // count() modes innermost first. Call once, after the last add().
  void finish() {
    shapes_[scan_.final_count] = scan_.last_shape;
    strides_[scan_.final_count] = scan_.last_stride;
    ++scan_.final_count;
  }
  std::size_t count() const noexcept { return scan_.final_count; }
  const std::int64_t* shapes() const noexcept { return shapes_; }
  const std::int64_t* strides() const noexcept { return strides_; }

  // Ends the scan and makes `out` the coalesced layout, as pycute's coalesce returns it.
  void finish_into(Layout& out) {
    finish();
    assign_flat_reversed(out, shapes_, strides_, scan_.final_count);
  }

 private:
  struct Scan {
    std::size_t final_count = 0;
    std::int64_t last_shape = 1;
    std::int64_t last_stride = 0;
  };

  // One leaf of the scan, on a copy of its state that the caller keeps in a local: a member would
  // be reloaded from memory after every store through shapes_, which may alias it as far as the
  // compiler knows, and the loop would wait on those loads.
  void step(std::int64_t s, std::int64_t d, Scan& scan) {
    if (s == 1) return;
    if (scan.last_shape == 1) {
      scan.last_shape = s;
      scan.last_stride = d;
    } else if (mul(scan.last_shape, scan.last_stride, "coalesce") == d) {
      scan.last_shape = mul(scan.last_shape, s, "coalesce");
    } else {
      shapes_[scan.final_count] = scan.last_shape;
      strides_[scan.final_count] = scan.last_stride;
      ++scan.final_count;
      scan.last_shape = s;
      scan.last_stride = d;
    }
  }

  LeafBuffer shape_buffer_;
  LeafBuffer stride_buffer_;
  std::int64_t* shapes_;
  std::int64_t* strides_;
  Scan scan_;
};

// The number of leaves of `l`, at most: a bound that needs no walk over its nodes.
std::size_t max_leaves(const Layout& l) {
  return IntTupleAccess::node_count(l.shape());
}

// Ascending lexicographic order of a handful of tuples; cheaper than std::sort at this size.
template <class Tuple>
void insertion_sort(Tuple* v, std::size_t count) {
  for (std::size_t i = 1; i < count; ++i) {
    const auto key = v[i];
    std::size_t j = i;
    for (; j > 0 && key < v[j - 1]; --j) v[j] = v[j - 1];
    v[j] = key;
  }
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

// The modes of composition(A, s:d) for one int-shaped mode s:d of B, innermost first, as
// compose_int_mode finds them: at most one per mode of coalesce(A).
class ComposedMode {
 public:
  explicit ComposedMode(std::size_t capacity) {
    shape_buffer_.resize_for_overwrite(capacity);
    stride_buffer_.resize_for_overwrite(capacity);
    shapes = shape_buffer_.data();
    strides = stride_buffer_.data();
  }
  ComposedMode(const ComposedMode&) = delete;  // shapes and strides point into the buffers
  ComposedMode& operator=(const ComposedMode&) = delete;

  std::int64_t* shapes;
  std::int64_t* strides;
  std::size_t count = 0;

 private:
  LeafBuffer shape_buffer_;
  LeafBuffer stride_buffer_;
};

// composition(A, s:d) for an int-shaped mode of B, into `out`.
// `flat_a` is coalesce(A) right to left: index 0 is A's innermost mode, the last is leaf 0.
void compose_int_mode(const ModeCoalescer& flat_a, std::int64_t s, std::int64_t d,
                      ComposedMode& out, const CompositionOperands& ops) {
  if (d == 0) {
    out.shapes[0] = s;
    out.strides[0] = 0;
    out.count = 1;
    return;
  }
  std::int64_t rest_shape = s;
  std::int64_t rest_stride = d;
  constexpr std::string_view where = "composition";
  const std::size_t n = flat_a.count();
  const std::int64_t* a_shapes = flat_a.shapes();
  const std::int64_t* a_strides = flat_a.strides();
  std::int64_t* shapes = out.shapes;
  std::int64_t* strides = out.strides;
  std::size_t count = 0;  // out.count is set at the end: kept local, it stays in a register
  // Leaves of coalesce(A) from the rightmost down to index 1; leaf 0 is never size-checked,
  // so the outermost mode of A is treated as unbounded.
  for (std::size_t j = 0; j + 1 < n; ++j) {
    const std::int64_t curr_shape = a_shapes[j];
    const std::int64_t curr_stride = a_strides[j];
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
          shapes[count] = new_shape;
          strides[count] = mul(rest_stride, curr_stride, where);
          ++count;
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
      shapes[count] = new_shape;
      strides[count] = mul(rest_stride, curr_stride, where);
      ++count;
    }
    rest_shape = floor_div(rest_shape, new_shape, where);
    rest_stride = ceil_div(rest_stride, curr_shape, where);
  }
  if (rest_shape != 1 || count == 0) {
    shapes[count] = rest_shape;
    strides[count] = mul(rest_stride, a_strides[n - 1], where);
    ++count;
  }
  out.count = count;
}

// composition(A, B) distributes over B's modes, so the result nests like B with each int
// mode of B replaced by its composed mode.
// `scratch` holds each int mode's result until it is appended.
void compose_nodes(const ModeCoalescer& flat_a, const Node* bs, const Node* bd,
                   ComposedMode& scratch, Nodes& out_shape, Nodes& out_stride,
                   const CompositionOperands& ops) {
  if (IntTupleAccess::is_leaf(bs)) {
    compose_int_mode(flat_a, bs->value, bd->value, scratch, ops);
    append_reversed(out_shape, scratch.shapes, scratch.count);
    append_reversed(out_stride, scratch.strides, scratch.count);
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
    compose_nodes(flat_a, cs, cd, scratch, out_shape, out_stride, ops);
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
  SmallVector<const IntTuple*, 8> shapes;
  SmallVector<const IntTuple*, 8> strides;
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
  ModeCoalescer modes(max_leaves(l));
  modes.add_leaves_of(l);
  Layout result;
  modes.finish_into(result);
  return result;
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
  ModeCoalescer modes(max_leaves(l));
  for (std::size_t i = IntTupleAccess::node_count(l.shape()); i-- > 0;) {
    if (shape[i].span != 0 || shape[i].value == 1 || stride[i].value == 0) continue;
    modes.add(shape[i].value, stride[i].value);
  }
  Layout result;
  modes.finish_into(result);
  return result;
}

Layout composition(const Layout& a, const Layout& b) {
  ModeCoalescer flat_a(max_leaves(a));
  flat_a.add_leaves_of(a);
  flat_a.finish();
  const CompositionOperands ops{a, b};
  ComposedMode scratch(flat_a.count());
  Layout result;
  const Node* b_shape = IntTupleAccess::nodes(b.shape());
  const Node* b_stride = IntTupleAccess::nodes(b.stride());
  if (IntTupleAccess::is_leaf(b_shape)) {
    // An int B, the common case, gives a flat layout: written in one go.
    compose_int_mode(flat_a, b_shape->value, b_stride->value, scratch, ops);
    assign_flat_reversed(result, scratch.shapes, scratch.strides, scratch.count);
    return result;
  }
  Nodes& out_shape = LayoutAccess::shape_nodes(result);
  Nodes& out_stride = LayoutAccess::stride_nodes(result);
  out_shape.clear();
  out_stride.clear();
  compose_nodes(flat_a, b_shape, b_stride, scratch, out_shape, out_stride, ops);
  return result;
}

Layout complement(const Layout& l, std::int64_t cotarget) {
  // (stride, shape) leaf pairs in ascending order, ties broken by shape, as Python sorts tuples.
  // Gathered right to left, so that a row-major layout (the usual mesh) arrives sorted and the
  // sort moves nothing; equal pairs are equal values, so their order cannot change the result.
  SmallVector<std::array<std::int64_t, 2>, 16> mode_buffer;
  mode_buffer.resize_for_overwrite(max_leaves(l));
  std::array<std::int64_t, 2>* modes = mode_buffer.data();
  std::size_t count = 0;
  const Node* shape_nodes = IntTupleAccess::nodes(l.shape());
  const Node* stride_nodes = IntTupleAccess::nodes(l.stride());
  for (std::size_t i = IntTupleAccess::node_count(l.shape()); i-- > 0;) {
    if (shape_nodes[i].span == 0) modes[count++] = {stride_nodes[i].value, shape_nodes[i].value};
  }
  insertion_sort(modes, count);
  // The modes come out smallest stride first, the order in which coalesce scans a result that
  // lists the largest stride first, so they go straight into coalesce's scan.
  ModeCoalescer result_modes(count + 1);
  std::int64_t current = 1;
  for (const auto& [stride, shape] : std::span(modes, count)) {
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
    result_modes.add(
        stride > 0 ? div_positive(stride, current) : floor_div(stride, current, "complement"),
        current);
    current = end;
  }
  const std::int64_t covered = add(cotarget, current - 1, "complement");
  result_modes.add(
      covered >= 0 ? div_positive(covered, current) : floor_div(covered, current, "complement"),
      current);
  Layout result;
  result_modes.finish_into(result);
  return result;
}

Layout right_inverse(const Layout& l) {
  // (stride, shape, compact stride of that leaf in the domain), sorted as Python sorts tuples.
  SmallVector<std::array<std::int64_t, 3>, 16> mode_buffer;
  mode_buffer.resize_for_overwrite(max_leaves(l));
  std::array<std::int64_t, 3>* modes = mode_buffer.data();
  std::size_t count = 0;
  const Node* shape_nodes = IntTupleAccess::nodes(l.shape());
  const Node* stride_nodes = IntTupleAccess::nodes(l.stride());
  std::int64_t running = 1;
  for (std::size_t i = IntTupleAccess::node_count(l.shape()); i-- > 0;) {
    if (shape_nodes[i].span != 0) continue;
    modes[count++] = {stride_nodes[i].value, shape_nodes[i].value, running};
    running = mul(running, shape_nodes[i].value, "right_inverse");
  }
  insertion_sort(modes, count);
  ModeCoalescer result_modes(count);
  std::int64_t current = 1;
  for (const auto& [stride, shape, rstride] : std::span(modes, count)) {
    if (shape == 1) continue;
    if (current != stride) break;
    // Taken smallest stride first: the coalesce scan order of the result (largest first).
    result_modes.add(shape, rstride);
    current = mul(shape, stride, "right_inverse");
  }
  Layout result;
  result_modes.finish_into(result);
  return result;
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
