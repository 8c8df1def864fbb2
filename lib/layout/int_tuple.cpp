#include "layout/int_tuple.hpp"

#include <charconv>
#include <string>

#include "core/error.hpp"
#include "layout/int_tuple_access.hpp"

namespace meshgate {

using Node = IntTupleAccess::Node;

namespace {

// Pointers to the direct children of the tuple node `n`, left to right.
using ChildList = SmallVector<const Node*, 8>;

void children_of(const Node* n, ChildList& out) {
  const auto count = static_cast<std::size_t>(n->value);
  const Node* child = n + 1;
  for (std::size_t i = 0; i < count; ++i) {
    out.push_back(child);
    child += IntTupleAccess::subtree_size(child);
  }
}

// CuTe notation "(2,(1,6))", or Python's tuple repr "(2, (1, 6))" with "(8,)" for a 1-tuple
// (the form the reference's error messages quote).
enum class TupleStyle { cute, python };

void append_tuple(const Node* n, TupleStyle style, std::string& out) {
  if (IntTupleAccess::is_leaf(n)) {
    out += std::to_string(n->value);
    return;
  }
  out += '(';
  const auto count = static_cast<std::size_t>(n->value);
  const Node* child = n + 1;
  for (std::size_t i = 0; i < count; ++i) {
    if (i != 0) out += style == TupleStyle::cute ? "," : ", ";
    append_tuple(child, style, out);
    child += IntTupleAccess::subtree_size(child);
  }
  if (style == TupleStyle::python && count == 1) out += ',';
  out += ')';
}

std::string cute_of(const Node* n) {
  std::string s;
  append_tuple(n, TupleStyle::cute, s);
  return s;
}

[[noreturn]] void assertion_failed(const std::string& message) {
  throw Error(ErrorKind::assertion, message);
}

// crd2idx for an int coordinate: on a tuple shape it is split right to left, mode i > 0 taking
// crd mod size(mode i) and mode 0 keeping the unreduced remainder.
std::int64_t crd2idx_int(std::int64_t crd, const Node* shape, const Node* stride) {
  const bool shape_leaf = IntTupleAccess::is_leaf(shape);
  const bool stride_leaf = IntTupleAccess::is_leaf(stride);
  if (!shape_leaf && !stride_leaf) {
    if (shape->value != stride->value) {
      assertion_failed("crd2idx: shape " + cute_of(shape) + " and stride " + cute_of(stride) +
                       " have different lengths");
    }
    ChildList shapes;
    ChildList strides;
    children_of(shape, shapes);
    children_of(stride, strides);
    std::int64_t result = 0;
    for (std::size_t i = shapes.size(); i-- > 1;) {
      const std::int64_t mode_size = IntTupleAccess::subtree_product(shapes[i]);
      result = add(result, crd2idx_int(floor_mod(crd, mode_size, "crd2idx"), shapes[i], strides[i]),
                   "crd2idx");
      crd = floor_div(crd, mode_size, "crd2idx");
    }
    if (!shapes.empty()) result = add(result, crd2idx_int(crd, shapes[0], strides[0]), "crd2idx");
    return result;
  }
  if (!shape_leaf || !stride_leaf) {
    assertion_failed("crd2idx: shape " + cute_of(shape) + " and stride " + cute_of(stride) +
                     " differ in nesting");
  }
  return mul(crd, stride->value, "crd2idx");
}

std::int64_t crd2idx_nodes(const Node* crd, const Node* shape, const Node* stride) {
  if (IntTupleAccess::is_leaf(crd)) return crd2idx_int(crd->value, shape, stride);
  if (IntTupleAccess::is_leaf(shape) || IntTupleAccess::is_leaf(stride)) {
    assertion_failed("Invalid combination: crd=" + cute_of(crd) + ", shape=" + cute_of(shape));
  }
  if (crd->value != shape->value || stride->value != shape->value) {
    assertion_failed("crd2idx: coordinate " + cute_of(crd) + " does not have the length of shape " +
                     cute_of(shape) + " and stride " + cute_of(stride));
  }
  ChildList crds;
  ChildList shapes;
  ChildList strides;
  children_of(crd, crds);
  children_of(shape, shapes);
  children_of(stride, strides);
  std::int64_t result = 0;
  for (std::size_t i = 0; i < crds.size(); ++i) {
    result = add(result, crd2idx_nodes(crds[i], shapes[i], strides[i]), "crd2idx");
  }
  return result;
}

// idx2crd appends the coordinate's nodes to `out`.
void idx2crd_nodes(const Node* idx, const Node* shape, const Node* stride,
                   IntTupleAccess::Nodes& out) {
  const bool shape_leaf = IntTupleAccess::is_leaf(shape);
  const bool stride_leaf = IntTupleAccess::is_leaf(stride);
  if (!shape_leaf && !stride_leaf && shape->value != stride->value) {
    assertion_failed("idx2crd: shape " + cute_of(shape) + " and stride " + cute_of(stride) +
                     " have different lengths");
  }
  if (!IntTupleAccess::is_leaf(idx)) {
    if (shape_leaf || stride_leaf) {
      assertion_failed("Invalid combination: tuple with int stride (idx=" + cute_of(idx) +
                       ", shape=" + cute_of(shape) + ", stride=" + cute_of(stride) + ")");
    }
    if (idx->value != shape->value) {
      assertion_failed("idx2crd: index " + cute_of(idx) + " does not have the length of shape " +
                       cute_of(shape));
    }
  } else if (shape_leaf != stride_leaf) {
    assertion_failed("idx2crd: shape " + cute_of(shape) + " and stride " + cute_of(stride) +
                     " differ in nesting");
  }
  if (shape_leaf) {
    const std::int64_t q = floor_div(idx->value, stride->value, "idx2crd");
    out.push_back(Node{floor_mod(q, shape->value, "idx2crd"), 0});
    return;
  }
  const std::size_t root = out.size();
  out.push_back(Node{shape->value, 0});
  ChildList shapes;
  ChildList strides;
  children_of(shape, shapes);
  children_of(stride, strides);
  ChildList idxs;
  if (!IntTupleAccess::is_leaf(idx)) children_of(idx, idxs);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    idx2crd_nodes(idxs.empty() ? idx : idxs[i], shapes[i], strides[i], out);
  }
  out[root].span = static_cast<std::int32_t>(out.size() - root);
}

// Bytes in the UTF-8 sequence that `lead` starts: an error message quotes a whole character,
// never the first byte of a multi-byte one (which would make the message invalid UTF-8).
std::size_t utf8_length(char lead) {
  const auto byte = static_cast<unsigned char>(lead);
  if (byte >= 0xF0) return 4;
  if (byte >= 0xE0) return 3;
  if (byte >= 0xC0) return 2;
  return 1;
}

// Recursive-descent parser of CuTe notation that reports 0-based columns into the whole text.
class TupleParser {
 public:
  TupleParser(std::string_view text, std::size_t pos) : text_(text), pos_(pos) {}

  std::size_t position() const { return pos_; }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  [[noreturn]] void fail(std::string_view expected) const {
    std::string found = pos_ < text_.size() ? "'" + character_at(pos_) + "'" : "end of text";
    throw Error(ErrorKind::value, "expected " + std::string(expected) + " at column " +
                                      std::to_string(pos_) + " in '" + std::string(text_) +
                                      "' (found " + found + ")");
  }

  void parse_element(IntTupleAccess::Nodes& out, int depth = 0) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '(') {
      // Layouts nest a few levels; the bound keeps hostile input from exhausting the stack.
      if (depth == kMaxDepth) {
        throw Error(ErrorKind::value, "tuple nested deeper than " + std::to_string(kMaxDepth) +
                                          " levels at column " + std::to_string(pos_) + " in '" +
                                          std::string(text_) + "'");
      }
      ++pos_;
      const std::size_t root = out.size();
      out.push_back(Node{0, 0});
      std::int64_t count = 0;
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ')') {
        ++pos_;
      } else {
        for (;;) {
          parse_element(out, depth + 1);
          ++count;
          skip_space();
          if (pos_ < text_.size() && text_[pos_] == ')') {
            ++pos_;
            break;
          }
          if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            skip_space();
            // A trailing comma, as in Python's "(8,)", closes the tuple.
            if (pos_ < text_.size() && text_[pos_] == ')') {
              ++pos_;
              break;
            }
            continue;
          }
          fail("',' or ')'");
        }
      }
      out[root] = Node{count, static_cast<std::int32_t>(out.size() - root)};
      return;
    }
    out.push_back(Node{parse_int(), 0});
  }

 private:
  std::int64_t parse_int() {
    const std::size_t start = pos_;
    std::size_t end = pos_;
    if (end < text_.size() && (text_[end] == '-' || text_[end] == '+')) ++end;
    const std::size_t digits = end;
    while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9') ++end;
    if (end == digits) fail("an integer or '('");
    std::int64_t value = 0;
    const char* first = text_.data() + start + (text_[start] == '+' ? 1 : 0);
    const auto [ptr, ec] = std::from_chars(first, text_.data() + end, value);
    if (ec != std::errc() || ptr != text_.data() + end) {
      throw Error(ErrorKind::value, "integer out of the int64 range at column " +
                                        std::to_string(start) + " in '" + std::string(text_) + "'");
    }
    pos_ = end;
    return value;
  }

  // The whole UTF-8 character starting at `pos` (the message must not cut one in two): the
  // lead byte's length, ending early at the text's end or at a byte that does not continue it.
  std::string character_at(std::size_t pos) const {
    const std::size_t length = utf8_length(text_[pos]);
    std::size_t end = pos + 1;
    while (end < text_.size() && end < pos + length &&
           (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) {
      ++end;
    }
    return std::string(text_.substr(pos, end - pos));
  }

  static constexpr int kMaxDepth = 64;

  std::string_view text_;
  std::size_t pos_;
};

}  // namespace

void throw_division_by_zero(std::string_view op, std::int64_t a, std::string_view where) {
  throw Error(ErrorKind::value, "integer division by zero in " + std::string(where) + " (" +
                                    std::to_string(a) + " " + std::string(op) +
                                    " 0; the reference raises ZeroDivisionError)");
}

void throw_overflow(std::string_view op, std::int64_t a, std::int64_t b, std::string_view where) {
  throw Error(ErrorKind::value, "integer overflow in " + std::string(where) + ": " +
                                    std::to_string(a) + " " + std::string(op) + " " +
                                    std::to_string(b) + " does not fit in int64");
}

IntTuple IntTuple::tuple(std::vector<IntTuple> elements) {
  SmallVector<const IntTuple*, 8> ptrs;
  for (const auto& e : elements) ptrs.push_back(&e);
  return IntTupleAccess::tuple_of(ptrs.data(), ptrs.size());
}

IntTuple IntTuple::tuple(std::initializer_list<IntTuple> elements) {
  SmallVector<const IntTuple*, 8> ptrs;
  for (const auto& e : elements) ptrs.push_back(&e);
  return IntTupleAccess::tuple_of(ptrs.data(), ptrs.size());
}

bool IntTuple::is_int() const noexcept {
  return nodes_[0].span == 0;
}

std::int64_t IntTuple::value() const {
  if (!is_int()) {
    throw Error(ErrorKind::type, "IntTuple " + to_string(*this) + " is a tuple, not an int");
  }
  return nodes_[0].value;
}

std::size_t IntTuple::length() const {
  if (is_int()) {
    throw Error(ErrorKind::type,
                "IntTuple " + to_string(*this) + " is an int and has no length; use rank()");
  }
  return static_cast<std::size_t>(nodes_[0].value);
}

IntTuple IntTuple::operator[](std::size_t i) const {
  const std::size_t n = length();
  if (i >= n) {
    throw Error(ErrorKind::index, "tuple index " + std::to_string(i) + " out of range for " +
                                      to_string(*this) + " of length " + std::to_string(n));
  }
  const Node* child = nodes_.data() + 1;
  for (std::size_t k = 0; k < i; ++k) child += IntTupleAccess::subtree_size(child);
  return IntTupleAccess::from_subtree(child);
}

std::vector<IntTuple> IntTuple::elements() const {
  const std::size_t n = length();
  std::vector<IntTuple> result;
  result.reserve(n);
  const Node* child = nodes_.data() + 1;
  for (std::size_t k = 0; k < n; ++k) {
    result.push_back(IntTupleAccess::from_subtree(child));
    child += IntTupleAccess::subtree_size(child);
  }
  return result;
}

bool operator==(const IntTuple& a, const IntTuple& b) {
  return a.nodes_ == b.nodes_;
}

std::size_t IntTuple::hash() const noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const Node& n : nodes_) {
    h = (h ^ static_cast<std::uint64_t>(n.value)) * 0x100000001b3ULL;
    h = (h ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(n.span))) * 0x100000001b3ULL;
  }
  return static_cast<std::size_t>(h);
}

std::size_t rank(const IntTuple& t) {
  return t.is_int() ? 1 : t.length();
}

std::int64_t product(const IntTuple& t) {
  return IntTupleAccess::subtree_product(IntTupleAccess::nodes(t));
}

std::vector<std::int64_t> leaves(const IntTuple& t) {
  std::vector<std::int64_t> out;
  const Node* n = IntTupleAccess::nodes(t);
  const std::size_t count = IntTupleAccess::node_count(t);
  for (std::size_t i = 0; i < count; ++i) {
    if (n[i].span == 0) out.push_back(n[i].value);
  }
  return out;
}

IntTuple flatten(const IntTuple& t) {
  if (t.is_int()) return t;
  LeafBuffer values;
  IntTupleAccess::append_leaves(t, values);
  return IntTupleAccess::flat(values.data(), values.size(), false);
}

IntTuple suffix_product(const IntTuple& shape, std::int64_t init) {
  // Every leaf's stride is init times the product of the leaves after it in pre-order, which is
  // what the reference's right-to-left recursion over the modes computes.
  IntTuple result = shape;
  auto& nodes = IntTupleAccess::mutable_nodes(result);
  std::int64_t running = init;
  for (std::size_t i = nodes.size(); i-- > 0;) {
    if (nodes[i].span != 0) continue;
    const std::int64_t extent = nodes[i].value;
    nodes[i].value = running;
    running = mul(running, extent, "suffix_product");
  }
  return result;
}

bool match_structure(const IntTuple& a, const IntTuple& b) {
  const std::size_t n = IntTupleAccess::node_count(a);
  if (n != IntTupleAccess::node_count(b)) return false;
  const Node* x = IntTupleAccess::nodes(a);
  const Node* y = IntTupleAccess::nodes(b);
  for (std::size_t i = 0; i < n; ++i) {
    if (x[i].span != y[i].span) return false;
    if (x[i].span != 0 && x[i].value != y[i].value) return false;
  }
  return true;
}

std::int64_t crd2idx(const IntTuple& crd, const IntTuple& shape,
                     const std::optional<IntTuple>& stride) {
  if (stride) {
    return crd2idx_nodes(IntTupleAccess::nodes(crd), IntTupleAccess::nodes(shape),
                         IntTupleAccess::nodes(*stride));
  }
  const IntTuple compact = suffix_product(shape);
  return crd2idx_nodes(IntTupleAccess::nodes(crd), IntTupleAccess::nodes(shape),
                       IntTupleAccess::nodes(compact));
}

IntTuple idx2crd(const IntTuple& idx, const IntTuple& shape,
                 const std::optional<IntTuple>& stride) {
  IntTuple result;
  auto& out = IntTupleAccess::mutable_nodes(result);
  out.clear();
  if (stride) {
    idx2crd_nodes(IntTupleAccess::nodes(idx), IntTupleAccess::nodes(shape),
                  IntTupleAccess::nodes(*stride), out);
  } else {
    const IntTuple compact = suffix_product(shape);
    idx2crd_nodes(IntTupleAccess::nodes(idx), IntTupleAccess::nodes(shape),
                  IntTupleAccess::nodes(compact), out);
  }
  return result;
}

IntTuple parse_int_tuple(std::string_view text) {
  TupleParser parser(text, 0);
  IntTuple result;
  auto& out = IntTupleAccess::mutable_nodes(result);
  out.clear();
  parser.parse_element(out);
  parser.skip_space();
  if (parser.position() != text.size()) parser.fail("end of text");
  return result;
}

std::string to_string(const IntTuple& t) {
  return cute_of(IntTupleAccess::nodes(t));
}

std::string python_repr(const IntTuple& t) {
  std::string s;
  append_tuple(IntTupleAccess::nodes(t), TupleStyle::python, s);
  return s;
}

// Layout parsing reuses the tuple parser so that columns refer to the whole "shape:stride" text.
IntTuple parse_int_tuple_at(std::string_view text, std::size_t& pos, char terminator) {
  TupleParser parser(text, pos);
  IntTuple result;
  auto& out = IntTupleAccess::mutable_nodes(result);
  out.clear();
  parser.parse_element(out);
  parser.skip_space();
  pos = parser.position();
  if (terminator == '\0') {
    if (pos != text.size()) parser.fail("end of text");
  } else if (pos >= text.size() || text[pos] != terminator) {
    parser.fail(std::string("'") + terminator + "'");
  }
  return result;
}

}  // namespace meshgate
