#pragma once
// Internal to the planner (lib/plan): the mesh as a plan reads it, once per plan, and what the
// passes compute from it for one step: its shapes and bytes, its modeled time, and the
// registered flattened dim of a group of dims. Planning runs before every redistribution, so
// none of this enumerates ranks or slices layouts per step.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/small_vector.hpp"
#include "mesh/device_mesh.hpp"
#include "mesh/flattened_dim.hpp"
#include "placement/placement.hpp"
#include "plan/cost_model.hpp"
#include "plan/transform_step.hpp"

namespace meshgate::plan_internal {

// What the planner knows about the mesh: sizes, the rank's coordinate and, when every dim of a
// one_level layout is a single leaf (the usual case), each dim's (size, stride) leaf, so that
// the merge lookup and the cost model read no layout again for every run and step. Inline for
// meshes of up to 8 dims, as every plan builds one; valid while the mesh lives.
struct MeshView {
  const DeviceMesh* mesh = nullptr;
  SmallVector<std::int64_t, 8> shape;
  SmallVector<std::int64_t, 8> coord;
  // DeviceMesh::single_leaf_dims: one per dim, or empty (then layouts are read)
  std::span<const LayoutLeaf> dim_leaves;
};

// The checks plan_redistribute makes of its arguments, and the view of their mesh from
// `coordinate` (empty = all zeros). Error(value) for specs on different meshes or of different
// tensors, placements of the wrong length, mixed partial types or a coordinate off the mesh.
MeshView check_and_view(const DTensorSpec& src, const DTensorSpec& dst,
                        std::span<const std::int64_t> coordinate);

// find_flattened_dim, with the dims' leaves read once per plan (`dim_leaves` as in MeshView;
// empty: read from the mesh's layout).
std::optional<std::string> find_flattened(const DeviceMesh& mesh,
                                          std::span<const LayoutLeaf> dim_leaves,
                                          std::span<const std::int64_t> dims);

std::int64_t numel(std::span<const std::int64_t> shape);
CollectiveOp collective_of(StepKind kind);  // of a collective kind

// Fills the shapes and bytes of a step whose kind, dims and tensor dims are set, on the rank
// of `v` whose local tensor has shape `input` before it, for elements of `element_size` bytes.
void fill_shapes(TransformStep& step, const MeshView& v, std::span<const std::int64_t> input,
                 std::int64_t element_size);
// Fills the modeled time of a step whose kind, dims and bytes are set (0 for local steps and
// size-1 groups).
void fill_cost(TransformStep& step, const MeshView& v, const Topology& topology);
// The modeled seconds of `steps`, summed.
double total_cost(std::span<const TransformStep> steps);

}  // namespace meshgate::plan_internal
