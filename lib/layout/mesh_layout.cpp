#include "layout/mesh_layout.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "layout/int_tuple_access.hpp"

namespace meshgate {

namespace {

std::string join(std::span<const std::int64_t> values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(values[i]);
  }
  return s + "]";
}

// Python's repr of a tuple of ints: "(2, 2)", "(4,)".
std::string python_tuple(std::span<const std::int64_t> values) {
  std::string s = "(";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(values[i]);
  }
  if (values.size() == 1) s += ',';
  return s + ")";
}

// Calls visit(offset) for every coordinate of the flat (shape, stride) in lexicographic order
// (last leaf fastest), as itertools.product over range(shape) does.
template <class Visit>
void for_each_offset(const LeafBuffer& shape, const LeafBuffer& stride, Visit&& visit) {
  const std::size_t n = shape.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (shape[i] <= 0) return;
  }
  // Every running offset lies between the sums of the negative and of the positive extremes,
  // so checking those sums once keeps the unchecked arithmetic of the loop below in range.
  std::int64_t low = 0;
  std::int64_t high = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t extreme = mul(shape[i] - 1, stride[i], "rank enumeration");
    if (extreme < 0) low = add(low, extreme, "rank enumeration");
    if (extreme > 0) high = add(high, extreme, "rank enumeration");
  }
  LeafBuffer coord;
  coord.resize(n);
  std::int64_t offset = 0;
  for (;;) {
    visit(offset);
    std::size_t i = n;
    for (;;) {
      if (i == 0) return;
      --i;
      if (++coord[i] < shape[i]) {
        offset += stride[i];
        break;
      }
      offset -= (coord[i] - 1) * stride[i];
      coord[i] = 0;
    }
  }
}

// The decimal digits of 8 * count: the bytes of `count` int64 ranks, which torch computes
// unbounded and which leave 64 bits for a view near the int64 limit.
std::string storage_bytes(std::uint64_t count) {
  std::string digits = std::to_string(count);
  int carry = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    const int product = (*it - '0') * 8 + carry;
    *it = static_cast<char>('0' + product % 10);
    carry = product / 10;
  }
  if (carry != 0) digits.insert(digits.begin(), static_cast<char>('0' + carry));
  return digits;
}

// as_strided's checks of a view of `shape` and `stride` over a storage of `storage` ranks:
// Error(runtime) in torch's words for a negative stride or a view that runs past the storage.
void check_strided(const LeafBuffer& shape, const LeafBuffer& stride, std::int64_t storage) {
  bool empty = false;
  for (std::int64_t s : shape) empty = empty || s == 0;
  for (std::int64_t d : stride) {
    if (d < 0) {
      throw Error(ErrorKind::runtime,
                  "as_strided: Negative strides are not supported at the moment, got strides: " +
                      join(std::span<const std::int64_t>(stride.data(), stride.size())));
    }
  }
  if (empty) return;
  std::int64_t last = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    last = add(last, mul(add(shape[i], -1, "remap_to_tensor"), stride[i], "remap_to_tensor"),
               "remap_to_tensor");
  }
  if (last >= storage) {
    throw Error(ErrorKind::runtime,
                "setStorage: sizes " +
                    join(std::span<const std::int64_t>(shape.data(), shape.size())) + ", strides " +
                    join(std::span<const std::int64_t>(stride.data(), stride.size())) +
                    ", storage offset 0, and itemsize 8 requiring a storage size of " +
                    storage_bytes(static_cast<std::uint64_t>(last) + 1) +
                    " are out of bounds for storage of size " +
                    storage_bytes(static_cast<std::uint64_t>(std::max<std::int64_t>(storage, 0))));
  }
}

// rank_map.as_strided(shape, stride).reshape(-1, *top_sizes), with torch's checks.
RankTensor gather_strided(const LeafBuffer& shape, const LeafBuffer& stride,
                          std::span<const std::int64_t> rank_map,
                          const std::vector<std::int64_t>& top_sizes) {
  check_strided(shape, stride, static_cast<std::int64_t>(rank_map.size()));
  std::int64_t inner = 1;
  for (std::int64_t s : top_sizes) inner = mul(inner, s, "remap_to_tensor");
  std::int64_t total = 1;
  for (std::int64_t s : shape) total = mul(total, s, "remap_to_tensor");
  if (inner == 0) {
    throw Error(ErrorKind::runtime,
                "cannot reshape tensor of " + std::to_string(total) + " elements into shape [-1, " +
                    join(top_sizes).substr(1) +
                    " because the unspecified dimension size -1 can be any value and is ambiguous");
  }
  RankTensor result;
  result.shape.push_back(total / inner);
  result.shape.insert(result.shape.end(), top_sizes.begin(), top_sizes.end());
  result.values.reserve(static_cast<std::size_t>(total));
  for_each_offset(shape, stride, [&](std::int64_t offset) {
    result.values.push_back(rank_map[static_cast<std::size_t>(offset)]);
  });
  return result;
}

// The leaves of a layout's shape and stride, for enumeration.
void append_flat(const Layout& l, LeafBuffer& shape, LeafBuffer& stride) {
  IntTupleAccess::append_leaves(l.shape(), shape);
  IntTupleAccess::append_leaves(l.stride(), stride);
}

// _FlatLayout.to_pycute: the 0-dim canonical form ():() reads as 1:0.
Layout axis_to_pycute(const Layout& axis) {
  if (!axis.shape().is_int() && axis.shape().length() == 0) return Layout();
  return axis;
}

}  // namespace

Layout mesh_mode(const Layout& l, std::int64_t dim) {
  const auto n = static_cast<std::int64_t>(l.rank());
  if (dim < -n || dim >= n) {
    // PyTorch 2.15's _MeshLayout indexes its tuple of axes; the bounds that earlier releases
    // named follow.
    throw Error(ErrorKind::index, "tuple index out of range (Dim " + std::to_string(dim) +
                                      " is out of range for layout with " + std::to_string(n) +
                                      " dimensions. Expected dim to be in range [" +
                                      std::to_string(-n) + ", " + std::to_string(n - 1) + "].)");
  }
  if (l.shape().is_int() && dim != 0) {
    // pycute's Layout.__getitem__ on an int shape asserts i == 0, so -1 fails there too.
    throw Error(ErrorKind::assertion, "layout " + to_string(l) +
                                          " has an int shape; only dim 0 can index it (got " +
                                          std::to_string(dim) + ")");
  }
  return l[static_cast<std::size_t>(dim < 0 ? dim + n : dim)];
}

std::vector<std::int64_t> top_level_sizes(const Layout& l) {
  std::vector<std::int64_t> sizes;
  const std::size_t n = l.rank();
  sizes.reserve(n);
  if (l.shape().is_int()) {
    sizes.push_back(l.shape().value());
    return sizes;
  }
  const auto* node = IntTupleAccess::nodes(l.shape()) + 1;
  for (std::size_t i = 0; i < n; ++i) {
    sizes.push_back(IntTupleAccess::subtree_product(node));
    node += IntTupleAccess::subtree_size(node);
  }
  return sizes;
}

Layout nest(const Layout& l) {
  return Layout(IntTuple::tuple({l.shape()}), IntTuple::tuple({l.stride()}));
}

Layout splice(const Layout& l, std::size_t start, std::size_t end, const Layout& insert) {
  auto as_elements = [](const IntTuple& t) {
    return t.is_int() ? std::vector<IntTuple>{t} : t.elements();
  };
  std::vector<IntTuple> shapes = as_elements(l.shape());
  std::vector<IntTuple> strides = as_elements(l.stride());
  // Python's list slice assignment: indices clamp to the list and an empty range inserts.
  const std::size_t first = std::min(start, shapes.size());
  const std::size_t last = std::max(first, std::min(end, shapes.size()));
  const std::vector<IntTuple> new_shapes = as_elements(insert.shape());
  const std::vector<IntTuple> new_strides = as_elements(insert.stride());
  shapes.erase(shapes.begin() + static_cast<std::ptrdiff_t>(first),
               shapes.begin() + static_cast<std::ptrdiff_t>(last));
  strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(first),
                strides.begin() + static_cast<std::ptrdiff_t>(last));
  shapes.insert(shapes.begin() + static_cast<std::ptrdiff_t>(first), new_shapes.begin(),
                new_shapes.end());
  strides.insert(strides.begin() + static_cast<std::ptrdiff_t>(first), new_strides.begin(),
                 new_strides.end());
  return Layout(IntTuple::tuple(std::move(shapes)), IntTuple::tuple(std::move(strides)));
}

Layout mesh_coalesce(const Layout& l) {
  const Layout c = coalesce(l);
  IntTuple stride = c.stride();
  auto& nodes = IntTupleAccess::mutable_nodes(stride);
  for (auto& n : nodes) {
    if (n.span == 0 && n.value == 0) n.value = 1;
  }
  return Layout(c.shape(), std::move(stride));
}

std::vector<std::int64_t> all_ranks_from_zero(const Layout& l) {
  LeafBuffer shape;
  LeafBuffer stride;
  append_flat(l, shape, stride);
  std::vector<std::int64_t> ranks;
  std::int64_t total = 1;
  for (std::int64_t s : shape)
    total = mul(total, std::max<std::int64_t>(s, 0), "all_ranks_from_zero");
  ranks.reserve(static_cast<std::size_t>(total));
  for_each_offset(shape, stride, [&](std::int64_t offset) { ranks.push_back(offset); });
  return ranks;
}

std::vector<std::vector<std::int64_t>> global_ranks(const Layout& l, std::int64_t world) {
  const std::vector<std::int64_t> ranks = all_ranks_from_zero(l);
  const std::vector<std::int64_t> offsets = all_ranks_from_zero(complement(l, world));
  std::vector<std::vector<std::int64_t>> groups;
  groups.reserve(offsets.size());
  for (std::int64_t offset : offsets) {
    std::vector<std::int64_t> group;
    group.reserve(ranks.size());
    for (std::int64_t r : ranks) group.push_back(add(offset, r, "global_ranks"));
    groups.push_back(std::move(group));
  }
  return groups;
}

bool check_non_overlap(const Layout& l) {
  std::vector<std::int64_t> ranks = all_ranks_from_zero(l);
  std::sort(ranks.begin(), ranks.end());
  return std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end();
}

namespace {

// The leaves of remap_to_tensor's view over a rank map of `world` entries: complement(l, world)
// first, then l. Error(assertion) when the rank map is smaller than cosize(l).
void remap_view(const Layout& l, std::int64_t world, LeafBuffer& shape, LeafBuffer& stride) {
  const std::int64_t needed = cosize(l);
  if (world < needed) {
    throw Error(ErrorKind::assertion, "remap_to_tensor: rank_map has " + std::to_string(world) +
                                          " entries but layout " + to_string(l) + " needs cosize " +
                                          std::to_string(needed));
  }
  append_flat(complement(l, world), shape, stride);
  append_flat(l, shape, stride);
}

// The same for the 2-level model: the complement of the collapsed axes, then the collapsed axes.
void remap_view(const MeshAxes& m, std::int64_t world, LeafBuffer& shape, LeafBuffer& stride) {
  const std::int64_t needed = cosize(to_layout(m));
  if (world < needed) {
    throw Error(ErrorKind::assertion, "remap_to_tensor: rank_map has " + std::to_string(world) +
                                          " entries but the mesh layout " +
                                          to_string(to_layout(m)) + " needs cosize " +
                                          std::to_string(needed));
  }
  const Layout self = collapse(m);
  append_flat(flat_canonical(complement(axis_to_pycute(self), world)), shape, stride);
  append_flat(self, shape, stride);
}

}  // namespace

RankTensor remap_to_tensor(const Layout& l, std::span<const std::int64_t> rank_map) {
  LeafBuffer shape;
  LeafBuffer stride;
  remap_view(l, static_cast<std::int64_t>(rank_map.size()), shape, stride);
  return gather_strided(shape, stride, rank_map, top_level_sizes(l));
}

void check_remap_view(const Layout& l, std::int64_t world) {
  LeafBuffer shape;
  LeafBuffer stride;
  remap_view(l, world, shape, stride);
  check_strided(shape, stride, world);
}

Layout unflatten(const Layout& l, std::int64_t dim, std::span<const std::int64_t> sizes) {
  const auto n = static_cast<std::int64_t>(l.rank());
  if (dim >= n || dim < -n) {
    throw Error(ErrorKind::value, "dim " + std::to_string(dim) +
                                      " specified in `_unflatten` is out of range " +
                                      std::to_string(n));
  }
  const std::int64_t d = dim < 0 ? dim + n : dim;
  const Layout mode = l[static_cast<std::size_t>(d)];
  std::int64_t product_of_sizes = 1;
  for (std::int64_t s : sizes) product_of_sizes = mul(product_of_sizes, s, "unflatten");
  if (product_of_sizes != size(mode)) {
    throw Error(ErrorKind::value, "The product of mesh_sizes=" + python_tuple(sizes) + " is " +
                                      std::to_string(product_of_sizes) +
                                      ", but the original dimension at dim=" + std::to_string(dim) +
                                      " has size " + std::to_string(size(mode)) + ".");
  }
  const IntTuple inner_shape = IntTupleAccess::flat(sizes.data(), sizes.size(), false);
  const Layout inner(inner_shape);
  const Layout partial = composition(mode, inner);
  return splice(l, static_cast<std::size_t>(d), static_cast<std::size_t>(d) + 1, partial);
}

Layout flat_canonical(const Layout& l) {
  const Layout c = coalesce(l);
  LeafBuffer shape;
  LeafBuffer stride;
  append_flat(c, shape, stride);
  if (shape.size() == 1 && shape[0] == 1 && stride[0] == 0) return Layout(IntTuple(), IntTuple());
  return Layout(IntTupleAccess::flat(shape.data(), shape.size(), false),
                IntTupleAccess::flat(stride.data(), stride.size(), false));
}

bool check_orthogonal(const Layout& l) {
  const Layout c = flat_canonical(l);
  LeafBuffer shape;
  LeafBuffer stride;
  append_flat(c, shape, stride);
  if (shape.size() < 2) return true;
  SmallVector<std::array<std::int64_t, 2>, 16> modes;
  for (std::size_t i = 0; i < shape.size(); ++i) modes.push_back({stride[i], shape[i]});
  std::sort(modes.begin(), modes.end(), [](const auto& a, const auto& b) { return b < a; });
  for (std::size_t i = 0; i + 1 < modes.size(); ++i) {
    const std::int64_t span = mul(modes[i + 1][0], modes[i + 1][1], "check_orthogonal");
    if (floor_mod(modes[i][0], span, "check_orthogonal") != 0) return false;
  }
  return true;
}

bool check_sorted(const Layout& l) {
  const Layout c = flat_canonical(l);
  LeafBuffer stride;
  IntTupleAccess::append_leaves(c.stride(), stride);
  for (std::size_t i = 0; i + 1 < stride.size(); ++i) {
    if (stride[i] < stride[i + 1]) return false;
  }
  return true;
}

MeshAxes mesh_axes_from_layout(const Layout& l) {
  MeshAxes m;
  const std::size_t n = l.rank();
  m.axes.reserve(n);
  for (std::size_t i = 0; i < n; ++i) m.axes.push_back(flat_canonical(l[i]));
  return m;
}

Layout collapse(const MeshAxes& m) {
  LeafBuffer shape;
  LeafBuffer stride;
  for (const Layout& axis : m.axes) append_flat(axis, shape, stride);
  return flat_canonical(Layout(IntTupleAccess::flat(shape.data(), shape.size(), false),
                               IntTupleAccess::flat(stride.data(), stride.size(), false)));
}

Layout to_layout(const MeshAxes& m) {
  if (m.axes.empty()) return Layout();
  std::vector<Layout> modes;
  modes.reserve(m.axes.size());
  for (const Layout& axis : m.axes) modes.push_back(axis_to_pycute(axis));
  return make_layout(modes);
}

RankTensor remap_to_tensor(const MeshAxes& m, std::span<const std::int64_t> rank_map) {
  LeafBuffer shape;
  LeafBuffer stride;
  remap_view(m, static_cast<std::int64_t>(rank_map.size()), shape, stride);
  std::vector<std::int64_t> top;
  top.reserve(m.axes.size());
  for (const Layout& axis : m.axes) top.push_back(size(axis));
  return gather_strided(shape, stride, rank_map, top);
}

void check_remap_view(const MeshAxes& m, std::int64_t world) {
  LeafBuffer shape;
  LeafBuffer stride;
  remap_view(m, world, shape, stride);
  check_strided(shape, stride, world);
}

}  // namespace meshgate
