#pragma once
// The flattened-dim rule: the layout that flattening a run of mesh dims gives the new dim.
// DeviceMesh::flatten registers it on the root, and the planner looks a group of dims up in
// that registry by recomputing it (find_flattened_dim, and the merge pass for every run it
// tries to merge), so both must compute it the same way: here, once per layout model.
#include <cstdint>
#include <span>

#include "layout/layout.hpp"
#include "layout/mesh_layout.hpp"

namespace meshgate {

// One leaf of a layout: a (size, stride) mode. Trivial (no default values), so that the inline
// buffers of leaves that planning fills construct nothing first.
struct LayoutLeaf {
  std::int64_t size;
  std::int64_t stride;
  friend bool operator==(const LayoutLeaf&, const LayoutLeaf&) = default;
};

// ---- one_level (PyTorch main: _MeshLayout.coalesce in DeviceMesh._flatten) ----

// The leaves of the flattened dim of mesh dims whose leaves, outermost first, are `leaves`:
// mesh_coalesce of them, i.e. size-1 leaves dropped, a leaf merged into the one before it
// when that one's stride is its extent (size * stride), every stride 0 made 1; nothing left
// gives 1:1. Writes into `out`, which needs room for max(1, leaves.size()) leaves, and returns
// how many it wrote. Allocates nothing: the merge pass calls it for every run it considers.
std::size_t flattened_leaves(std::span<const LayoutLeaf> leaves, std::span<LayoutLeaf> out);

// The layout a flattened dim with these (flattened_leaves) leaves has: n:d for one leaf, one
// nested mode ((n0,n1,..)):((d0,d1,..)) for several (a non-contiguous flatten stays one dim,
// PR #165542).
Layout flattened_layout(std::span<const LayoutLeaf> flattened);

// Whether `layout` equals flattened_layout(flattened) (structurally, as Layout's ==), without
// building it.
bool is_flattened_layout(const Layout& layout, std::span<const LayoutLeaf> flattened);

// The layout of the flattened dim of a one_level mesh whose layout is `dims` (all its modes
// flattened together): flattened_layout(flattened_leaves(leaves of `dims`)).
Layout flattened_layout(const Layout& dims);

// ---- two_level (PR #172089) ----

// The single axis of the flattened dim of a two_level mesh whose axes are `dims`: all of them
// collapsed into one canonical flat layout.
MeshAxes flattened_axes(const MeshAxes& dims);

}  // namespace meshgate
