#include "mesh/device_mesh.hpp"

#include <algorithm>
#include <mutex>
#include <numeric>
#include <utility>

#include "core/error.hpp"
#include "mesh/flattened_dim.hpp"

namespace meshgate {

namespace {

// DeviceMesh::single_leaf_dims of a mesh of this model and layout.
SmallVector<LayoutLeaf, 8> one_leaf_per_dim(LayoutModel model, const Layout& l) {
  SmallVector<LayoutLeaf, 8> out;
  if (model != LayoutModel::one_level) return out;
  if (l.shape().is_int()) {
    out.push_back({l.shape().value(), l.stride().value()});
    return out;
  }
  const std::size_t n = l.shape().length();
  for (std::size_t i = 0; i < n; ++i) {
    const IntTuple size = l.shape()[i];
    if (!size.is_int()) return {};
    out.push_back({size.value(), l.stride()[i].value()});
  }
  return out;
}

// Messages quote names and sizes the way the Python reference prints them, so a case written
// against PyTorch's text ("Invalid mesh_dim_names ('tp', 'dp') specified") matches here too.
std::string py_str(const std::string& s) {
  return "'" + s + "'";
}

std::string py_tuple(const std::vector<std::string>& items) {
  std::string out = "(";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + py_str(items[i]);
  return out + (items.size() == 1 ? ",)" : ")");
}

std::string py_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + py_str(items[i]);
  return out + "]";
}

std::string py_int_tuple(std::span<const std::int64_t> items) {
  std::string out = "(";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + std::to_string(items[i]);
  return out + (items.size() == 1 ? ",)" : ")");
}

std::string py_int_list(std::span<const std::int64_t> items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + std::to_string(items[i]);
  return out + "]";
}

std::string py_names(const std::vector<std::string>& names) {
  return names.empty() ? "None" : py_tuple(names);
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? std::string(sep) : "") + items[i];
  return out;
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

bool contains_rank(const std::vector<std::int64_t>& ranks, std::int64_t rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

std::size_t index_of(const std::vector<std::string>& items, const std::string& item) {
  return static_cast<std::size_t>(std::find(items.begin(), items.end(), item) - items.begin());
}

// L(size - 1) + 1 from the leaves: the image of the last coordinate. Works on the empty 0-dim
// axis ():() of the two_level model as well, where it gives 1.
// Error(value) when it leaves int64, as the layout algebra reports overflow.
std::int64_t leaf_cosize(const Layout& l) {
  const std::vector<std::int64_t> shape = leaves(l.shape());
  const std::vector<std::int64_t> stride = leaves(l.stride());
  std::int64_t last = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    std::int64_t steps = 0;
    std::int64_t extent = 0;
    if (__builtin_sub_overflow(shape[i], 1, &steps) ||
        __builtin_mul_overflow(steps, stride[i], &extent) ||
        __builtin_add_overflow(last, extent, &last) || last == INT64_MAX) {
      throw Error(ErrorKind::value, "integer overflow in cosize: the last rank of layout " +
                                        to_string(l) + " does not fit in int64");
    }
  }
  return last + 1;
}

// The span complement() ends on: shape * stride of the mode it visits last, the one with the
// largest (stride, shape). complement(l, N) closes with the mode (ceil(N / span), span), so the
// remap view of l fits every rank map whose size is a multiple of span; 0 on overflow.
std::int64_t complement_span(const Layout& l) {
  const std::vector<std::int64_t> shape = leaves(l.shape());
  const std::vector<std::int64_t> stride = leaves(l.stride());
  // complement() skips size-1 and stride-0 modes; with none left its span is 1.
  std::pair<std::int64_t, std::int64_t> last{1, 1};
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != 1 && stride[i] != 0) last = std::max(last, std::pair{stride[i], shape[i]});
  }
  std::int64_t span = 0;
  return __builtin_mul_overflow(last.first, last.second, &span) || span < 1 ? 0 : span;
}

// Least common multiple of two positive sizes; 0 when either is 0 or the result overflows.
std::int64_t checked_lcm(std::int64_t a, std::int64_t b) {
  if (a < 1 || b < 1) return 0;
  std::int64_t out = 0;
  return __builtin_mul_overflow(a / std::gcd(a, b), b, &out) ? 0 : out;
}

// "dim 1 ('tp')": a dim as messages name it.
std::string dim_label(std::size_t dim, const std::vector<std::string>& names) {
  return "dim " + std::to_string(dim) + (dim < names.size() ? " ('" + names[dim] + "')" : "");
}

bool is_empty_tuple(const IntTuple& t) {
  return !t.is_int() && t.length() == 0;
}

// _FlatLayout.to_pycute: the 0-dim axis ():() is the pycute layout 1:0.
Layout axis_to_pycute(const Layout& axis) {
  return is_empty_tuple(axis.shape()) ? Layout() : axis;
}

Layout row_major(std::span<const std::int64_t> sizes) {
  std::vector<IntTuple> elements(sizes.begin(), sizes.end());
  return Layout(IntTuple::tuple(std::move(elements)));
}

std::vector<std::vector<std::int64_t>> rows_of(const RankTensor& t) {
  std::vector<std::vector<std::int64_t>> rows;
  const auto count = static_cast<std::size_t>(t.shape.empty() ? 0 : t.shape[0]);
  if (count == 0) return rows;
  const std::size_t length = t.values.size() / count;
  rows.reserve(count);
  for (std::size_t r = 0; r < count; ++r) {
    rows.emplace_back(t.values.begin() + static_cast<std::ptrdiff_t>(r * length),
                      t.values.begin() + static_cast<std::ptrdiff_t>((r + 1) * length));
  }
  return rows;
}

std::vector<std::int64_t> arange(std::int64_t n) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  std::iota(out.begin(), out.end(), std::int64_t{0});
  return out;
}

// DeviceMesh.__repr__ without the device type, which meshgate's meshes do not have:
// "DeviceMesh((dp=2, tp=4), stride=(4, 1))", or "DeviceMesh((2, 4), stride=(4, 1))" unnamed. A
// dim whose stride is a tuple prints its leaves as a tuple, as the reference prints a
// multi-mode axis.
std::string mesh_repr(const Layout& layout, const std::vector<std::string>& names) {
  std::vector<std::string> dims;
  std::vector<std::string> strides;
  for (std::size_t d = 0; d < layout.rank(); ++d) {
    const Layout mode = mesh_mode(layout, static_cast<std::int64_t>(d));
    const std::string size = std::to_string(meshgate::size(mode));
    dims.push_back(d < names.size() ? names[d] + "=" + size : size);
    const std::vector<std::int64_t> stride = leaves(mode.stride());
    strides.push_back(stride.size() == 1 ? std::to_string(stride[0]) : py_int_tuple(stride));
  }
  const auto tuple = [](const std::vector<std::string>& items, bool trailing_comma) {
    std::string out = "(";
    for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
    return out + (trailing_comma && items.size() == 1 ? ",)" : ")");
  };
  // Named dims are joined ("(dp=8)"); sizes and strides are Python tuples ("(8,)").
  return "DeviceMesh(" + tuple(dims, names.empty()) + ", stride=" + tuple(strides, true) + ")";
}

constexpr std::string_view kSliceFlattenedFromRootWarning =
    "Slicing a flattened dim from root mesh will be deprecated in PT 2.11. Users need to "
    "bookkeep the flattened mesh directly.";

}  // namespace

void DeviceMesh::check_dim_names(const std::vector<std::string>& names, std::size_t ndim) {
  if (names.empty()) return;
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw Error(ErrorKind::runtime,
                "Each mesh_dim_name must be unique. Found repeated mesh_dim_name in "
                "mesh_dim_names " +
                    py_tuple(names));
  }
  if (names.size() != ndim) {
    throw Error(ErrorKind::runtime,
                "mesh_shape and mesh_dim_names should have same length! Found "
                "len(mesh_dim_names): " +
                    std::to_string(names.size()) + " and len(mesh_shape):" + std::to_string(ndim) +
                    ".");
  }
}

void DeviceMesh::check_distinct_ranks(const Layout& layout, std::span<const std::int64_t> rank_map,
                                      std::optional<std::int64_t> current_rank) {
  std::vector<std::int64_t> sorted(rank_map.begin(), rank_map.end());
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) return;
  const std::string repeated = "DeviceMesh cannot have duplicate values, but found " +
                               py_int_list(rank_map) + ": list every rank once";
  const std::int64_t rank = current_rank.value_or(rank_map.empty() ? 0 : rank_map[0]);
  // PyTorch meets a repeated rank when it creates each dim's process groups, dim by dim and
  // group by group: new_group rejects a (sorted) rank list holding a rank twice, and the mesh
  // rejects a rank that lands in two groups of one dim.
  for (std::size_t d = 0; d < layout.rank(); ++d) {
    std::vector<std::vector<std::int64_t>> groups;
    try {
      groups =
          rows_of(remap_to_tensor(nest(mesh_mode(layout, static_cast<std::int64_t>(d))), rank_map));
    } catch (const Error&) {
      break;  // no groups to create: the repeat is all there is to report
    }
    bool member = false;
    for (const std::vector<std::int64_t>& group : groups) {
      std::vector<std::int64_t> ranks = group;
      std::sort(ranks.begin(), ranks.end());
      if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
        throw Error(ErrorKind::value, "ranks list must not contain duplicate entries, got " +
                                          py_int_list(ranks) + " (" + repeated + ")");
      }
      if (!contains_rank(group, rank)) continue;
      if (member) {
        throw Error(ErrorKind::runtime,
                    "Each device mesh dimension should get only one process group, but got " +
                        std::to_string(rank) + " in " + py_int_list(group) + "! (" + repeated +
                        ")");
      }
      member = true;
    }
  }
  throw Error(ErrorKind::runtime, repeated);
}

std::string_view to_string(LayoutModel model) {
  return model == LayoutModel::one_level ? "one_level" : "two_level";
}

LayoutModel parse_layout_model(std::string_view text) {
  if (text == "one_level") return LayoutModel::one_level;
  if (text == "two_level") return LayoutModel::two_level;
  throw Error(ErrorKind::value, "unknown layout model '" + std::string(text) +
                                    "': expected one_level (PyTorch main) or two_level "
                                    "(PR #172089)");
}

// Python keeps `_flatten_mapping: name -> DeviceMesh` on the root mesh. Holding meshes here
// would make a shared_ptr cycle (each mesh owns its Root), so the registry keeps what is
// needed to rebuild the flattened mesh: its name and layout.
struct DeviceMesh::Root {
  LayoutModel model = LayoutModel::one_level;
  std::vector<std::int64_t> rank_map;
  std::int64_t current_rank = 0;
  std::vector<std::string> names;  // the root mesh's: flattened dims may not reuse them
  Layout layout;                   // the root mesh's, in the model's form

  struct Flattened {
    std::string name;
    Layout layout;  // one_level: the whole flattened layout, e.g. 8:1 or ((2,2)):((4,1))
    MeshAxes axes;  // two_level: its single canonical axis
  };
  // Meshes of one family may be sliced and flattened from several rank threads at once.
  std::mutex mutex;
  std::vector<Flattened> flattened;  // in registration order, like the Python dict
  std::vector<std::string> warnings;

  void warn(std::string_view text) {
    std::lock_guard lock(mutex);
    if (std::find(warnings.begin(), warnings.end(), text) == warnings.end()) {
      warnings.emplace_back(text);
    }
  }
  std::optional<Flattened> find_flattened(const std::string& name) {
    std::lock_guard lock(mutex);
    for (const Flattened& f : flattened) {
      if (f.name == name) return f;
    }
    return std::nullopt;
  }
};

void DeviceMesh::check_rank_map(LayoutModel model, const Layout& layout, const MeshAxes& axes,
                                const std::vector<std::string>& names, std::int64_t ranks) {
  const bool two_level = model == LayoutModel::two_level;
  const Layout whole = two_level ? collapse(axes) : layout;
  const std::int64_t needed = leaf_cosize(whole);
  if (ranks < needed) {
    throw Error(ErrorKind::assertion, "The rank map contains " + std::to_string(ranks) +
                                          " element, which isn't large enough for layout " +
                                          to_string(layout) + " (cosize " + std::to_string(needed) +
                                          "): give a rank map of at least " +
                                          std::to_string(needed) + " ranks.");
  }
  // The reference constructor creates every dim's process groups before it evaluates the mesh
  // tensor: one_level from layout[d].nest().remap_to_tensor(rank_map), two_level from
  // _MeshLayout([layout[d]]). A dim whose groups run past the rank map raises there, even when
  // the mesh tensor fits: (2,2):(3,1) over 5 ranks has the mesh [[0,1],[3,4]], but dim 0's groups
  // 3:1 ++ 2:3 need 6 ranks.
  const std::size_t ndim = two_level ? axes.axes.size() : layout.rank();
  for (std::size_t d = 0; d < ndim; ++d) {
    try {
      if (two_level) {
        check_remap_view(MeshAxes{{axes.axes[d]}}, ranks);
      } else {
        check_remap_view(nest(mesh_mode(layout, static_cast<std::int64_t>(d))), ranks);
      }
    } catch (const Error& e) {
      const std::string text = e.what();
      throw Error(e.kind(), text.substr(python_name(e.kind()).size() + 2) +
                                " (the process groups of " + dim_label(d, names) + " of layout " +
                                to_string(layout) + " over a rank map of " + std::to_string(ranks) +
                                " ranks)");
    }
  }
  if (two_level) {
    check_remap_view(axes, ranks);
  } else {
    check_remap_view(layout, ranks);
  }
}

void DeviceMesh::check_rank_map_size(const Layout& layout, std::int64_t ranks,
                                     const std::vector<std::string>& names) {
  check_rank_map(LayoutModel::one_level, layout, MeshAxes{}, names, ranks);
}

std::int64_t DeviceMesh::default_rank_count(const Layout& layout) {
  const std::int64_t cosize_ranks = leaf_cosize(layout);
  if (!check_non_overlap(layout)) return cosize_ranks;
  std::int64_t step = complement_span(layout);
  for (std::size_t d = 0; d < layout.rank(); ++d) {
    step = checked_lcm(step, complement_span(mesh_mode(layout, static_cast<std::int64_t>(d))));
  }
  if (step < 1) return cosize_ranks;
  // ceil(cosize / step) * step, the smallest multiple of step that covers the cosize.
  const std::int64_t steps = cosize_ranks / step + (cosize_ranks % step > 0 ? 1 : 0);
  std::int64_t ranks = 0;
  if (__builtin_mul_overflow(steps, step, &ranks)) {
    return cosize_ranks;
  }
  // A layout whose complement asserts, e.g. (5,2):(2,3), fits no rank map: creation says why.
  try {
    check_rank_map_size(layout, ranks);
  } catch (const Error&) {
    return cosize_ranks;
  }
  return ranks;
}

DeviceMesh DeviceMesh::make(std::shared_ptr<Root> root, Layout layout, MeshAxes axes,
                            std::vector<std::string> names, bool is_root) {
  const bool two_level = root->model == LayoutModel::two_level;
  // The axes side by side as they are, so a size-1 dim prints as its 0-dim canonical form ()
  // (to_layout would read it as pycute's 1:0, which is for arithmetic, not for display).
  if (two_level) layout = make_layout(axes.axes);
  // two_level checks the collapsed layout, as PR #172089's constructor does with
  // `_layout.collapse().check_non_overlap()`: the same function as the axes side by side, and
  // the same set-based check as one_level (check_orthogonal only arrived with #172343).
  const Layout whole = two_level ? collapse(axes) : layout;
  if (!check_non_overlap(whole)) {
    throw Error(ErrorKind::assertion,
                "Please use a non-overlapping layout when creating a DeviceMesh. Layout " +
                    to_string(layout) + " maps two coordinates to the same rank position.");
  }
  check_rank_map(root->model, layout, axes, names,
                 static_cast<std::int64_t>(root->rank_map.size()));
  DeviceMesh mesh;
  mesh.root_ = std::move(root);
  mesh.layout_ = std::move(layout);
  mesh.axes_ = std::move(axes);
  mesh.names_ = std::move(names);
  mesh.is_root_ = is_root;
  mesh.dim_leaves_ = one_leaf_per_dim(mesh.root_->model, mesh.layout_);
  // The reference constructor evaluates `self.mesh` for the current rank, so a mesh with several
  // rows none of which holds the rank raises at creation.
  mesh.mesh_for_rank(mesh.root_->current_rank);
  return mesh;
}

DeviceMesh DeviceMesh::make_root(LayoutModel model, const Layout& layout,
                                 std::vector<std::string> names, std::vector<std::int64_t> rank_map,
                                 std::optional<std::int64_t> current_rank) {
  auto root = std::make_shared<Root>();
  root->model = model;
  root->rank_map = std::move(rank_map);
  root->current_rank = current_rank.value_or(root->rank_map.empty() ? 0 : root->rank_map[0]);
  root->names = names;
  MeshAxes axes;
  if (model == LayoutModel::two_level) axes = mesh_axes_from_layout(layout);
  DeviceMesh mesh = make(root, layout, std::move(axes), std::move(names), true);
  // After make()'s checks, as the reference constructor checks the layout, the rank map's size
  // and the mesh tensor before it creates the process groups that meet a repeated rank.
  check_distinct_ranks(layout, root->rank_map, root->current_rank);
  root->layout = mesh.layout_;
  return mesh;
}

DeviceMesh DeviceMesh::create(std::span<const std::int64_t> shape, std::vector<std::string> names,
                              std::vector<std::int64_t> rank_map, LayoutModel model,
                              std::optional<std::int64_t> current_rank) {
  if (shape.empty()) {
    throw Error(ErrorKind::value, "mesh shape is empty: give at least one mesh dim size");
  }
  for (std::int64_t s : shape) {
    if (s < 1) {
      throw Error(ErrorKind::value, "mesh shape " + py_int_tuple(shape) +
                                        " has a size below 1: every mesh dim needs a rank");
    }
  }
  check_dim_names(names, shape.size());
  const Layout layout = row_major(shape);
  if (rank_map.empty()) rank_map = arange(meshgate::size(layout));
  return make_root(model, layout, std::move(names), std::move(rank_map), current_rank);
}

DeviceMesh DeviceMesh::from_layout(const Layout& layout, std::vector<std::string> names,
                                   std::vector<std::int64_t> rank_map, LayoutModel model,
                                   std::optional<std::int64_t> current_rank) {
  // The same sizes create() accepts: a size below 1 has no ranks to group, and a negative one
  // would make the default rank map's length negative.
  if (layout.rank() == 0) {
    throw Error(ErrorKind::value, "mesh layout " + to_string(layout) +
                                      " has no dims: give at least one mesh dim");
  }
  for (std::int64_t s : leaves(layout.shape())) {
    if (s < 1) {
      throw Error(ErrorKind::value, "mesh layout " + to_string(layout) +
                                        " has a size below 1: every mesh dim needs a rank");
    }
  }
  check_dim_names(names, layout.rank());
  if (rank_map.empty()) rank_map = arange(default_rank_count(layout));
  return make_root(model, layout, std::move(names), std::move(rank_map), current_rank);
}

const Layout& DeviceMesh::layout() const {
  return layout_;
}
LayoutModel DeviceMesh::model() const {
  return root_->model;
}

std::vector<std::int64_t> DeviceMesh::shape() const {
  if (model() == LayoutModel::one_level) return top_level_sizes(layout_);
  std::vector<std::int64_t> sizes;
  sizes.reserve(axes_.axes.size());
  for (const Layout& a : axes_.axes) sizes.push_back(meshgate::size(a));
  return sizes;
}

std::size_t DeviceMesh::ndim() const {
  return model() == LayoutModel::one_level ? layout_.rank() : axes_.axes.size();
}

std::int64_t DeviceMesh::size() const {
  const std::vector<std::int64_t> sizes = shape();
  return std::accumulate(sizes.begin(), sizes.end(), std::int64_t{1}, std::multiplies<>());
}

std::int64_t DeviceMesh::size(std::int64_t dim) const {
  return shape()[checked_dim(dim)];
}

const std::vector<std::string>& DeviceMesh::names() const {
  return names_;
}
const std::vector<std::int64_t>& DeviceMesh::rank_map() const {
  return root_->rank_map;
}

bool DeviceMesh::is_root() const {
  return is_root_;
}

std::int64_t DeviceMesh::current_rank() const {
  return root_->current_rank;
}

std::size_t DeviceMesh::checked_dim(std::int64_t dim) const {
  const auto n = static_cast<std::int64_t>(ndim());
  if (dim < -n || dim >= n) {
    // PyTorch 2.15 indexes the tuple of its dims (layout[dim]); the bounds that earlier
    // releases named follow.
    throw Error(ErrorKind::index, "tuple index out of range (Dim " + std::to_string(dim) +
                                      " is out of range for layout with " + std::to_string(n) +
                                      " dimensions. Expected dim to be in range [" +
                                      std::to_string(-n) + ", " + std::to_string(n - 1) + "].)");
  }
  return static_cast<std::size_t>(dim < 0 ? dim + n : dim);
}

std::size_t DeviceMesh::dim_by_name(const std::string& name) const {
  if (names_.empty()) throw Error(ErrorKind::key, "No `mesh_dim_names` found.");
  if (!contains(names_, name)) {
    throw Error(ErrorKind::key, "Mesh dimension '" + name +
                                    "' does not exist. Available mesh dimensions are: "
                                    "mesh_dim_names=" +
                                    py_tuple(names_));
  }
  return index_of(names_, name);
}

Layout DeviceMesh::axis(std::size_t dim) const {
  if (model() == LayoutModel::one_level) return mesh_mode(layout_, static_cast<std::int64_t>(dim));
  if (dim >= axes_.axes.size()) checked_dim(static_cast<std::int64_t>(dim));
  return axes_.axes[dim];
}

RankTensor DeviceMesh::full_tensor() const {
  if (model() == LayoutModel::one_level) return remap_to_tensor(layout_, rank_map());
  return remap_to_tensor(axes_, rank_map());
}

std::vector<std::vector<std::int64_t>> DeviceMesh::axis_groups(const Layout& one_axis) const {
  // one_level: `layout[d].nest().remap_to_tensor(rank_map)`, so a nested (non-contiguous) dim
  // still gives flat groups. two_level: `_MeshLayout([layout[d]]).remap_to_tensor(rank_map)`.
  if (model() == LayoutModel::one_level) {
    return rows_of(remap_to_tensor(nest(one_axis), rank_map()));
  }
  return rows_of(remap_to_tensor(MeshAxes{{one_axis}}, rank_map()));
}

std::vector<std::vector<std::int64_t>> DeviceMesh::groups(const MeshDim& dim) const {
  if (const auto* name = std::get_if<std::string>(&dim)) {
    // DeviceMesh.get_group looks the name up in the root's flattened dims first, from any
    // mesh of the family, and only then among this mesh's own dims.
    if (auto flat = root_->find_flattened(*name)) {
      return axis_groups(model() == LayoutModel::one_level ? mesh_mode(flat->layout, 0)
                                                           : flat->axes.axes[0]);
    }
    return axis_groups(axis(dim_by_name(*name)));
  }
  return axis_groups(axis(checked_dim(std::get<std::int64_t>(dim))));
}

std::optional<std::vector<std::int64_t>> DeviceMesh::coordinate(std::int64_t rank) const {
  const RankTensor full = full_tensor();
  const std::vector<std::vector<std::int64_t>> rows = rows_of(full);
  std::size_t row = 0;
  if (rows.size() != 1) {
    const auto it = std::find(full.values.begin(), full.values.end(), rank);
    if (it == full.values.end()) return std::nullopt;
    row = static_cast<std::size_t>(it - full.values.begin()) / rows[0].size();
  }
  const std::vector<std::int64_t>& mesh = rows[row];
  // The rank map lists every rank once and the layout does not overlap, so a rank appears in a
  // row at most once.
  if (std::find(mesh.begin(), mesh.end(), rank) == mesh.end()) return std::nullopt;
  auto position =
      static_cast<std::int64_t>(std::find(mesh.begin(), mesh.end(), rank) - mesh.begin());
  std::vector<std::int64_t> coord(full.shape.size() - 1);
  for (std::size_t i = coord.size(); i-- > 0;) {
    coord[i] = position % full.shape[i + 1];
    position /= full.shape[i + 1];
  }
  return coord;
}

RankTensor DeviceMesh::mesh_for_rank(std::int64_t rank) const {
  const RankTensor full = full_tensor();
  const std::vector<std::vector<std::int64_t>> rows = rows_of(full);
  std::size_t row = 0;
  if (rows.size() != 1) {
    const auto it = std::find(full.values.begin(), full.values.end(), rank);
    if (it == full.values.end()) {
      throw Error(ErrorKind::runtime,
                  "In order to get the mesh Tensor of a DeviceMesh it needs to either have all "
                  "its original dimensions (e.g., no slicing) or it needs to contain the local "
                  "rank: rank " +
                      std::to_string(rank) + " is in none of the " + std::to_string(rows.size()) +
                      " sub-meshes of layout " + to_string(layout_));
    }
    row = static_cast<std::size_t>(it - full.values.begin()) / rows[0].size();
  }
  return RankTensor{std::vector<std::int64_t>(full.shape.begin() + 1, full.shape.end()), rows[row]};
}

DeviceMesh DeviceMesh::slice(std::span<const std::string> names) const {
  if (names_.empty()) {
    throw Error(ErrorKind::runtime, "Cannot slice a DeviceMesh without mesh_dim_names!");
  }
  const std::vector<std::string> wanted(names.begin(), names.end());
  if (wanted == names_) return *this;

  // Flattened names are valid only when slicing from the root, which the reference tests with
  // `self != self._get_root_mesh()`: by value (rank map, layout, names), so a mesh of the family
  // equal to the root, e.g. the concatenation of all its dims in order, slices them too.
  const bool from_root = is_root() || (layout_ == root_->layout && names_ == root_->names);
  std::vector<Root::Flattened> flattened;
  if (from_root) {
    std::lock_guard lock(root_->mutex);
    flattened = root_->flattened;
  }
  std::vector<std::string> valid = names_;
  for (const Root::Flattened& f : flattened) valid.push_back(f.name);
  const bool all_valid = std::all_of(wanted.begin(), wanted.end(),
                                     [&](const std::string& n) { return contains(valid, n); });
  if (!all_valid || wanted.empty()) {
    throw Error(ErrorKind::key, "Invalid mesh_dim_names " + py_tuple(wanted) +
                                    " specified. Valid mesh_dim_names are " + py_list(valid) + ".");
  }

  std::vector<Layout> picked;
  for (const std::string& n : wanted) {
    if (contains(names_, n)) {
      picked.push_back(axis(index_of(names_, n)));
      continue;
    }
    root_->warn(kSliceFlattenedFromRootWarning);
    const Root::Flattened& f = *std::find_if(flattened.begin(), flattened.end(),
                                             [&](const Root::Flattened& e) { return e.name == n; });
    // one_level takes the flattened mesh's whole layout; two_level its single axis.
    picked.push_back(model() == LayoutModel::one_level ? f.layout : f.axes.axes[0]);
  }

  const std::string ascending_error = "Invalid mesh_dim_names " + py_tuple(wanted) +
                                      " specified. Mesh dim indices should be in ascending "
                                      "order.";
  const std::string overlap_error =
      "Slicing overlapping dim_names " + py_tuple(wanted) + " is not allowed.";

  if (model() == LayoutModel::two_level) {
    // PR #172089: the order and overlap checks run on the collapsed (canonical flat) layout,
    // so a flattened non-contiguous dim is an ordinary axis here, and size-1 dims (empty axes)
    // never break the order.
    MeshAxes sliced{picked};
    const Layout collapsed = collapse(sliced);
    if (!check_sorted(collapsed)) throw Error(ErrorKind::key, ascending_error);
    if (!check_non_overlap(collapsed)) throw Error(ErrorKind::runtime, overlap_error);
    return make(root_, Layout(), std::move(sliced), wanted, false);
  }

  // one_level: right to left, each stride must be an int and not smaller than the one after it.
  std::int64_t previous = -1;
  for (std::size_t i = picked.size(); i-- > 0;) {
    const IntTuple& stride = picked[i].stride();
    if (!stride.is_int()) {
      throw Error(ErrorKind::not_implemented,
                  "Currently, this only allows slicing out a contiguous flattened dim. Dim " +
                      py_str(wanted[i]) + " has the non-contiguous layout " + to_string(picked[i]) +
                      ": slice the dims it was flattened from, or use the two_level model.");
    }
    if (stride.value() < previous) throw Error(ErrorKind::key, ascending_error);
    previous = stride.value();
  }
  std::vector<IntTuple> sizes;
  std::vector<IntTuple> strides;
  for (const Layout& p : picked) {
    sizes.push_back(p.shape());
    strides.push_back(p.stride());
  }
  Layout sliced(IntTuple::tuple(std::move(sizes)), IntTuple::tuple(std::move(strides)));
  if (!check_non_overlap(sliced)) throw Error(ErrorKind::runtime, overlap_error);
  return make(root_, std::move(sliced), MeshAxes{}, wanted, false);
}

DeviceMesh DeviceMesh::flatten(std::optional<std::string> name) const {
  if (names_.empty()) {
    throw Error(ErrorKind::runtime, "Cannot flatten a DeviceMesh without mesh_dim_names!");
  }
  const std::string flat_name = name && !name->empty() ? *name : join(names_, "_");
  if (ndim() == 1 && contains(names_, flat_name)) return *this;
  if (contains(root_->names, flat_name)) {
    // The reference passes its two sentences to ValueError as two arguments; here they read
    // as one message.
    throw Error(ErrorKind::value, flat_name + " already exists for submesh of the " +
                                      mesh_repr(root_->layout, root_->names) +
                                      ". The mesh_dim_names of submesh and flattened "
                                      "mesh are " +
                                      py_tuple(root_->names) +
                                      ". Please specify another valid mesh_dim_name.");
  }

  Layout flat_layout;
  MeshAxes flat_axes;
  if (model() == LayoutModel::one_level) {
    flat_layout = flattened_layout(layout_);
  } else {
    flat_axes = flattened_axes(axes_);
  }
  DeviceMesh flat = make(root_, flat_layout, flat_axes, {flat_name}, false);

  std::lock_guard lock(root_->mutex);
  for (const Root::Flattened& f : root_->flattened) {
    if (f.name != flat_name) continue;
    const bool same =
        model() == LayoutModel::one_level ? f.layout == flat_layout : f.axes == flat_axes;
    if (same) return flat;
    throw Error(
        ErrorKind::value,
        "Flatten mesh with mesh_dim_name " + flat_name +
            " has been created before, Please specify another valid mesh_dim_name. "
            "(registered layout " +
            to_string(model() == LayoutModel::one_level ? f.layout : make_layout(f.axes.axes)) +
            ", this mesh flattens to " + to_string(flat.layout_) + ")");
  }
  root_->flattened.push_back(Root::Flattened{flat_name, flat_layout, flat_axes});
  return flat;
}

DeviceMesh DeviceMesh::unflatten(const MeshDim& dim, std::span<const std::int64_t> sizes,
                                 std::vector<std::string> names) const {
  const auto n = static_cast<std::int64_t>(ndim());
  std::size_t d = 0;
  if (const auto* index = std::get_if<std::int64_t>(&dim)) {
    // The reference rejects dim >= ndim with this ValueError, and dim < -ndim in layout[dim]
    // with the IndexError of checked_dim. It handles -ndim..-2 as Python list indices; -1 it
    // splices as [-1:0], inserting the new dims before the last without removing it (the mesh
    // then fails its overlap check). Here -1 means the last dim, as for every other negative.
    if (*index >= n) {
      throw Error(ErrorKind::value,
                  "dim " + std::to_string(*index) + " specified in `_unflatten` is out of range " +
                      std::to_string(n) + ": give a dim in [" + std::to_string(-n) + ", " +
                      std::to_string(n) + ") or a dim name");
    }
    d = checked_dim(*index);
  } else {
    const std::string& dim_name = std::get<std::string>(dim);
    if (names_.empty()) {
      throw Error(ErrorKind::type,
                  "Invariant encountered: value was None when it should not be: unflatten by "
                  "name '" +
                      dim_name + "' needs a mesh with mesh_dim_names");
    }
    if (!contains(names_, dim_name)) {
      throw Error(ErrorKind::value,
                  "dim " + dim_name + " specified in `_unflatten` is not in " + py_names(names_));
    }
    d = index_of(names_, dim_name);
  }
  if (sizes.size() != names.size()) {
    throw Error(ErrorKind::runtime,
                "mesh_dim_names must have same length as mesh_sizes in _unflatten! Got " +
                    std::to_string(names.size()) + " names for mesh_sizes=" + py_int_tuple(sizes) +
                    ".");
  }
  // The reference compares the product first, so a zero or an odd count of negative sizes fails
  // there, in its words.
  std::int64_t product = 1;
  bool overflow = false;
  for (std::int64_t s : sizes) {
    // A product past int64 cannot equal the dim's size; wrapping around could.
    overflow = overflow || __builtin_mul_overflow(product, s, &product);
  }
  const Layout source = axis(d);
  const std::int64_t source_size = meshgate::size(source);
  if (overflow || product != source_size) {
    throw Error(ErrorKind::value,
                "The product of mesh_sizes=" + py_int_tuple(sizes) + " is " +
                    (overflow ? "above 2^63" : std::to_string(product)) +
                    ", but the original dimension "
                    "at dim=" +
                    std::to_string(d) + " has size " + std::to_string(source_size) +
                    ". These must be equal for unflatten to work correctly." +
                    (names_.empty() ? std::string()
                                    : " (dim " + std::to_string(d) + " is " + py_str(names_[d]) +
                                          " of the mesh " + py_tuple(names_) +
                                          "; a flattened dim unflattens from "
                                          "the mesh _flatten returned)"));
  }
  // Negative sizes whose product is the dim's size: the reference builds the layout and fails
  // when the new mesh reshapes its rank map to [-1, *sizes of every dim].
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] >= 1) continue;
    std::vector<std::int64_t> view{-1};
    const std::vector<std::int64_t> before = shape();
    view.insert(view.end(), before.begin(), before.begin() + static_cast<std::ptrdiff_t>(d));
    view.insert(view.end(), sizes.begin(), sizes.end());
    view.insert(view.end(), before.begin() + static_cast<std::ptrdiff_t>(d + 1), before.end());
    throw Error(ErrorKind::runtime, "invalid shape dimension " + std::to_string(sizes[i]) +
                                        " at index " + std::to_string(d + 1 + i) + " of shape " +
                                        py_int_list(view) + " (mesh_sizes=" + py_int_tuple(sizes) +
                                        " has a size below 1: every unflattened dim needs a rank)");
  }
  if (names_.empty()) {
    throw Error(ErrorKind::type,
                "Invariant encountered: value was None when it should not be: _unflatten needs "
                "a mesh with mesh_dim_names");
  }

  std::vector<std::string> new_names = names_;
  const std::size_t at = std::min(d, new_names.size());
  new_names.erase(
      new_names.begin() + static_cast<std::ptrdiff_t>(at),
      new_names.begin() + static_cast<std::ptrdiff_t>(std::min(d + 1, new_names.size())));
  new_names.insert(new_names.begin() + static_cast<std::ptrdiff_t>(at), names.begin(), names.end());

  if (model() == LayoutModel::one_level) {
    return make(root_, meshgate::unflatten(layout_, static_cast<std::int64_t>(d), sizes),
                MeshAxes{}, std::move(new_names), false);
  }
  // _FlatLayout.composition: pycute composition of the axis with (sizes):(suffix_product), then
  // every top-level mode of the result becomes one canonical axis.
  const Layout composed = composition(axis_to_pycute(source), row_major(sizes));
  std::vector<Layout> new_axes(axes_.axes.begin(),
                               axes_.axes.begin() + static_cast<std::ptrdiff_t>(d));
  if (composed.shape().is_int()) {
    new_axes.push_back(flat_canonical(composed));
  } else {
    for (std::size_t i = 0; i < composed.rank(); ++i)
      new_axes.push_back(flat_canonical(composed[i]));
  }
  new_axes.insert(new_axes.end(), axes_.axes.begin() + static_cast<std::ptrdiff_t>(d + 1),
                  axes_.axes.end());
  return make(root_, Layout(), MeshAxes{std::move(new_axes)}, std::move(new_names), false);
}

std::vector<DeviceMesh> DeviceMesh::submeshes(const std::string& name) const {
  const std::size_t d = dim_by_name(name);
  std::vector<DeviceMesh> out;
  if (model() == LayoutModel::one_level) {
    // `layout[d].remap_to_tensor(rank_map)` without nest(): a nested (flattened non-contiguous)
    // dim gives multi-dim rows, and DeviceMesh(mesh=row) keeps that shape under one name.
    const RankTensor t = remap_to_tensor(axis(d), rank_map());
    const std::vector<std::int64_t> row_shape(t.shape.begin() + 1, t.shape.end());
    for (std::vector<std::int64_t>& row : rows_of(t)) {
      out.push_back(make_root(LayoutModel::one_level, row_major(row_shape), {name}, std::move(row),
                              current_rank()));
    }
    return out;
  }
  for (std::vector<std::int64_t>& row : axis_groups(axis(d))) {
    const std::int64_t length = static_cast<std::int64_t>(row.size());
    out.push_back(make_root(LayoutModel::two_level, row_major(std::span(&length, 1)), {name},
                            std::move(row), current_rank()));
  }
  return out;
}

DeviceMesh DeviceMesh::concatenate(std::span<const DeviceMesh> meshes) {
  if (meshes.empty()) {
    throw Error(ErrorKind::index, "list index out of range: _concatenate needs at least one mesh");
  }
  const DeviceMesh& first = meshes.front();
  std::vector<std::string> names;
  std::vector<IntTuple> sizes;
  std::vector<IntTuple> strides;
  MeshAxes axes;
  for (const DeviceMesh& m : meshes) {
    if (m.model() != first.model()) {
      throw Error(ErrorKind::value, "Cannot concatenate a " + std::string(to_string(m.model())) +
                                        " mesh with a " + std::string(to_string(first.model())) +
                                        " mesh: build all meshes with one layout model");
    }
    for (std::size_t i = 0; i < m.ndim(); ++i) {
      const Layout a = m.axis(i);
      if (first.model() == LayoutModel::one_level) {
        sizes.push_back(a.shape());
        strides.push_back(a.stride());
      } else {
        axes.axes.push_back(a);
      }
    }
    if (m.names_.empty()) {
      throw Error(ErrorKind::type,
                  "Invariant encountered: value was None when it should not be: _concatenate "
                  "needs meshes with mesh_dim_names");
    }
    names.insert(names.end(), m.names_.begin(), m.names_.end());
    if (m.rank_map() != first.rank_map()) {
      throw Error(ErrorKind::runtime,
                  "Cannot concatenate DeviceMeshes derived from different device meshs");
    }
  }
  Layout layout;
  if (first.model() == LayoutModel::one_level) {
    layout = Layout(IntTuple::tuple(std::move(sizes)), IntTuple::tuple(std::move(strides)));
  }
  const Layout whole = first.model() == LayoutModel::one_level ? layout : collapse(axes);
  if (!check_non_overlap(whole)) {
    std::string listing;
    for (const DeviceMesh& m : meshes) {
      listing += (listing.empty() ? "" : ", ") + mesh_repr(m.layout_, m.names_);
    }
    throw Error(ErrorKind::runtime, "Cannot concatenate overlapping meshes: [" + listing + "]");
  }
  return make(first.root_, std::move(layout), std::move(axes), std::move(names), false);
}

std::vector<std::pair<std::string, Layout>> DeviceMesh::flattened() const {
  std::lock_guard lock(root_->mutex);
  std::vector<std::pair<std::string, Layout>> out;
  for (const Root::Flattened& f : root_->flattened) {
    out.emplace_back(f.name,
                     model() == LayoutModel::one_level ? f.layout : make_layout(f.axes.axes));
  }
  return out;
}

bool DeviceMesh::flattened_equals(
    std::span<const std::pair<std::string, Layout>> registry) const {
  std::lock_guard lock(root_->mutex);
  if (root_->flattened.size() != registry.size()) return false;
  for (std::size_t i = 0; i < registry.size(); ++i) {
    const Root::Flattened& f = root_->flattened[i];
    if (f.name != registry[i].first) return false;
    if (model() == LayoutModel::one_level ? !(f.layout == registry[i].second)
                                          : !(make_layout(f.axes.axes) == registry[i].second)) {
      return false;
    }
  }
  return true;
}

std::optional<std::string> DeviceMesh::find_flattened(
    const std::function<bool(const Layout&)>& match) const {
  std::lock_guard lock(root_->mutex);
  for (const Root::Flattened& f : root_->flattened) {
    if (model() == LayoutModel::one_level ? match(f.layout) : match(make_layout(f.axes.axes))) {
      return f.name;
    }
  }
  return std::nullopt;
}

std::vector<std::string> DeviceMesh::warnings() const {
  std::lock_guard lock(root_->mutex);
  return root_->warnings;
}

bool operator==(const DeviceMesh& a, const DeviceMesh& b) {
  return a.model() == b.model() && a.layout_ == b.layout_ && a.names_ == b.names_ &&
         a.rank_map() == b.rank_map();
}

}  // namespace meshgate
