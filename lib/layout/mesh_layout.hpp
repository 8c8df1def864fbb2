#pragma once
// PyTorch's 1-level _MeshLayout operations (torch/distributed/_mesh_layout.py on main) and the
// 2-level model of PR #172089 (_FlatLayout / _MeshLayout of axes). See docs/kinds.md, Mesh layouts
// and The 2-level model.
#include <cstdint>
#include <span>
#include <vector>

#include "layout/layout.hpp"

namespace meshgate {

// A dense row-major int64 tensor, e.g. the result of remap_to_tensor: shape [-1, *mesh shape].
struct RankTensor {
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> values;
  friend bool operator==(const RankTensor&, const RankTensor&) = default;
};

// ---- 1-level _MeshLayout (PyTorch main) ----

// _MeshLayout.__getitem__: negative dims allowed; Error(index) "Dim {i} is out of range ...".
Layout mesh_mode(const Layout& l, std::int64_t dim);
std::vector<std::int64_t> top_level_sizes(const Layout& l);  // numel of each top-level mode
Layout nest(const Layout& l);                                // ((shape,),(stride,)): one mode
// Replace top-level modes [start, end) by the modes of `insert` (int layouts count as one mode).
Layout splice(const Layout& l, std::size_t start, std::size_t end, const Layout& insert);
// coalesce, then every stride 0 rewritten to 1.
Layout mesh_coalesce(const Layout& l);
// Images of all coordinates, lexicographic: (2,3):(1,2) -> [0,2,4,1,3,5].
std::vector<std::int64_t> all_ranks_from_zero(const Layout& l);
// For each offset of complement(l, world) (outer), the ranks offset + r (inner).
std::vector<std::vector<std::int64_t>> global_ranks(const Layout& l, std::int64_t world);
// No two coordinates map to the same rank (set-based check of the reference, O(size)).
bool check_non_overlap(const Layout& l);
// remap_to_tensor: rank_map.as_strided(complement ++ layout).reshape(-1, *top_level_sizes).
// Error(assertion) when rank_map.size() < cosize(l); Error(runtime), in as_strided's words, when
// the view runs past the rank map (the complement rounds its outer mode up to a multiple).
RankTensor remap_to_tensor(const Layout& l, std::span<const std::int64_t> rank_map);
// The checks of remap_to_tensor over a rank map of `world` entries, without reading one: the
// same errors, in O(modes), so a mesh can check every view it will need when it is created.
void check_remap_view(const Layout& l, std::int64_t world);
// _unflatten's layout step: mode `dim` composed with (sizes):(suffix_product(sizes)), spliced in.
// Error(value) when dim is out of range or the product of sizes differs from the mode's size.
Layout unflatten(const Layout& l, std::int64_t dim, std::span<const std::int64_t> sizes);

// ---- 2-level model (PR #172089) ----

// _FlatLayout's canonical form: pycute coalesce, then flattened to a tuple of leaves;
// a single size-1 mode becomes the 0-dim layout ():(). Equal functions compare equal.
Layout flat_canonical(const Layout& l);
// check_orthogonal of #172343: sort (stride, shape) descending; each stride must be a multiple
// of the next stride * next shape. Rejects (2,3):(3,2) that check_non_overlap accepts.
bool check_orthogonal(const Layout& l);
// check_sorted: strides of the canonical form are non-increasing.
bool check_sorted(const Layout& l);

// A 2-level mesh layout: one canonical flat layout per mesh dim.
struct MeshAxes {
  std::vector<Layout> axes;  // each is flat_canonical(...) of that dim
  friend bool operator==(const MeshAxes&, const MeshAxes&) = default;
};
MeshAxes mesh_axes_from_layout(const Layout& l);  // one axis per top-level mode of l
Layout collapse(const MeshAxes& m);               // all axes merged into one canonical flat layout
Layout to_layout(const MeshAxes& m);              // axes side by side as top-level modes
RankTensor remap_to_tensor(const MeshAxes& m, std::span<const std::int64_t> rank_map);
void check_remap_view(const MeshAxes& m, std::int64_t world);

}  // namespace meshgate
