#pragma once
// DeviceMesh on layouts, as PyTorch's torch/distributed/device_mesh.py: a layout over the
// positions of a rank map, optional dim names, and (on the root) the registry of flattened
// dims. Two layout models side by side: one_level (PyTorch main) and two_level (PR #172089).
// See docs/kinds.md, DeviceMesh. Nothing here talks to other ranks.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/small_vector.hpp"
#include "layout/layout.hpp"
#include "layout/mesh_layout.hpp"
#include "mesh/flattened_dim.hpp"

namespace meshgate {

enum class LayoutModel { one_level, two_level };
std::string_view to_string(LayoutModel model);
LayoutModel parse_layout_model(std::string_view text);  // Error(value) on anything else

// A mesh dim given by position (negative allowed where the reference allows it) or by name.
using MeshDim = std::variant<std::int64_t, std::string>;

class DeviceMesh {
 public:
  // init_device_mesh(shape, names): row-major layout over rank_map (default 0..numel-1).
  // Empty `names` = an unnamed mesh. Errors as the reference constructor.
  // `current_rank` is the rank this process runs as (the reference's get_rank()), default the
  // first rank of the rank map. Like the reference constructor, which creates every dim's
  // process groups and evaluates the mesh tensor, every mesh of the family is checked at
  // creation: Error(runtime) when a dim's groups or the mesh tensor (remap views) are out of
  // bounds of the rank map, or when the mesh has several rows and none holds current_rank;
  // Error(runtime) as well when the rank map repeats a rank.
  static DeviceMesh create(std::span<const std::int64_t> shape, std::vector<std::string> names = {},
                           std::vector<std::int64_t> rank_map = {},
                           LayoutModel model = LayoutModel::one_level,
                           std::optional<std::int64_t> current_rank = std::nullopt);
  // DeviceMesh from an explicit layout over rank_map (default 0..N-1, N = default_rank_count).
  static DeviceMesh from_layout(const Layout& layout, std::vector<std::string> names = {},
                                std::vector<std::int64_t> rank_map = {},
                                LayoutModel model = LayoutModel::one_level,
                                std::optional<std::int64_t> current_rank = std::nullopt);

  // The size checks the constructor makes of a rank map of `ranks` entries for `layout`
  // (one_level), without a rank map: Error(assertion) below cosize(layout); Error(runtime), in
  // as_strided's words, when the process groups of a dim (layout[d].nest().remap_to_tensor) or
  // the mesh tensor (layout.remap_to_tensor) run past it. `names` only label the dims in messages.
  static void check_rank_map_size(const Layout& layout, std::int64_t ranks,
                                  const std::vector<std::string>& names = {});
  // The rank count from_layout gives `layout` when no rank map is given: the smallest multiple of
  // the span of every dim's complement and of the whole layout's that covers cosize(layout), so
  // that the mesh tensor and every dim's groups fit ((2,2):(3,1): 6; (2,2):(4,1): 8). Any multiple
  // of it fits too. cosize(layout) when no rank map fits the layout; creation then says why.
  static std::int64_t default_rank_count(const Layout& layout);
  // init_device_mesh's checks of mesh_dim_names against a mesh of `ndim` dims, in its order and
  // words: Error(runtime) for a repeated name, then for a count other than ndim. Empty = unnamed.
  static void check_dim_names(const std::vector<std::string>& names, std::size_t ndim);
  // The constructor's check that the mesh tensor (layout over rank_map) names every rank once,
  // seen from current_rank (default the rank map's first rank). Error in the words of the
  // reference's process-group creation, which is where PyTorch meets a repeated rank:
  // Error(value) "ranks list must not contain duplicate entries, got [..]" for a dim group that
  // holds a rank twice, Error(runtime) "Each device mesh dimension should get only one process
  // group, ..." when current_rank is in two groups of one dim, and Error(runtime) "DeviceMesh
  // cannot have duplicate values, ..." for any other repeat. Expects a rank map that the layout
  // and its dims' groups fit (check_rank_map_size).
  static void check_distinct_ranks(const Layout& layout, std::span<const std::int64_t> rank_map,
                                   std::optional<std::int64_t> current_rank = std::nullopt);

  // The layout in the model's own form: one_level as stored; two_level with every top-level mode in
  // its canonical flat form (docs/kinds.md, The 2-level model), so equal meshes print equally.
  const Layout& layout() const;
  LayoutModel model() const;
  std::vector<std::int64_t> shape() const;  // top_level_sizes
  // Each dim's (size, stride) when the mesh is one_level and every dim is a single leaf of its
  // layout (the usual mesh); empty otherwise. Read once, at construction: the planner and the
  // cost model look at it for every plan.
  std::span<const LayoutLeaf> single_leaf_dims() const { return dim_leaves_; }
  std::size_t ndim() const;
  std::int64_t size() const;  // numel
  std::int64_t size(std::int64_t dim) const;
  const std::vector<std::string>& names() const;  // empty when unnamed
  const std::vector<std::int64_t>& rank_map() const;
  // The root of its family itself (the mesh init_device_mesh returned, or a slice naming all
  // its dims, which returns it). A mesh equal to the root by value but built from it, e.g. by
  // concatenate, is not the root; it still slices the root's flattened dims, as the reference
  // decides that by value.
  bool is_root() const;
  std::int64_t current_rank() const;

  // Rank groups of one dim, one group per complement offset in lexicographic order (the rows
  // of remap_to_tensor of that dim): (2,4) mesh dim 0 -> [[0,4],[1,5],[2,6],[3,7]]. A name is
  // looked up among the root's flattened dims first, then this mesh's dims (as get_group).
  std::vector<std::vector<std::int64_t>> groups(const MeshDim& dim) const;
  // The rank's coordinate in this mesh (index inside mesh_for_rank), nullopt when absent;
  // Error(assertion) when the rank appears twice in its row.
  std::optional<std::vector<std::int64_t>> coordinate(std::int64_t rank) const;
  // DeviceMesh.mesh as `rank` sees it: the remap_to_tensor row that contains it (shape =
  // mesh shape). Error(runtime) when the rank is in no row and there is more than one row.
  RankTensor mesh_for_rank(std::int64_t rank) const;

  // mesh[names]: own names, or flattened names registered on the root (from a mesh equal to the
  // root only).
  DeviceMesh slice(std::span<const std::string> names) const;
  // _flatten(name): default name joins dim names with "_"; registered on the root.
  DeviceMesh flatten(std::optional<std::string> name = std::nullopt) const;
  // _unflatten(dim, sizes, names). A negative dim counts from the end, -1 included (the
  // reference splices -1 as [-1:0] and inserts without removing; see cases/mesh/unflatten.yaml).
  DeviceMesh unflatten(const MeshDim& dim, std::span<const std::int64_t> sizes,
                       std::vector<std::string> names) const;
  // _get_all_submeshes(name): one 1-D mesh per group of that dim.
  std::vector<DeviceMesh> submeshes(const std::string& name) const;
  // _concatenate: top-level modes side by side; shared rank map and non-overlap required.
  static DeviceMesh concatenate(std::span<const DeviceMesh> meshes);

  // Flattened dims registered on the root, by name, with their layouts (in this model's form).
  std::vector<std::pair<std::string, Layout>> flattened() const;
  // Whether flattened() equals `registry`, without copying the registry.
  bool flattened_equals(std::span<const std::pair<std::string, Layout>> registry) const;
  // The name of the oldest registered flattened dim whose layout (in this model's form)
  // satisfies `match`, or nullopt: what flattened() answers, without copying the registry's
  // names and layouts (the planner asks this for every run it may merge).
  std::optional<std::string> find_flattened(const std::function<bool(const Layout&)>& match) const;
  // Warnings the reference would emit for operations on this mesh family (e.g. the
  // deprecation of slicing flattened dims from the root), oldest first, without repeats.
  std::vector<std::string> warnings() const;

  // Model, layout, rank map and names (in two_level the canonical axes: equal functions are
  // equal meshes; in one_level the layout's structure: 8:1 and (8):(1) differ).
  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b);

 private:
  struct Root;  // rank map, model, flattened-dim registry, warnings: shared by a mesh family

  DeviceMesh() = default;
  // The reference constructor's checks (non-overlap, rank map large enough) on a mesh of the
  // family of `root`. one_level reads `layout`; two_level reads `axes` and derives the layout.
  static DeviceMesh make(std::shared_ptr<Root> root, Layout layout, MeshAxes axes,
                         std::vector<std::string> names, bool is_root);
  // The rank map's size against the mesh (one_level: `layout`; two_level: `axes`), in the
  // reference constructor's order: cosize, every dim's process groups, the mesh tensor.
  static void check_rank_map(LayoutModel model, const Layout& layout, const MeshAxes& axes,
                             const std::vector<std::string>& names, std::int64_t ranks);
  // A new mesh family whose root has this layout (one_level form) over `rank_map`, seen from
  // current_rank (default the rank map's first rank). Error(runtime) on a repeated rank.
  static DeviceMesh make_root(LayoutModel model, const Layout& layout,
                              std::vector<std::string> names, std::vector<std::int64_t> rank_map,
                              std::optional<std::int64_t> current_rank);

  std::size_t checked_dim(std::int64_t dim) const;         // Error(index) out of range
  std::size_t dim_by_name(const std::string& name) const;  // Error(key) when unknown
  Layout axis(std::size_t dim) const;                      // mode `dim` in the model's form
  RankTensor full_tensor() const;                          // remap_to_tensor of the whole mesh
  std::vector<std::vector<std::int64_t>> axis_groups(const Layout& axis) const;

  std::shared_ptr<Root> root_;
  Layout layout_;  // one_level: as stored; two_level: to_layout(axes_)
  MeshAxes axes_;  // two_level only: one canonical flat layout per dim
  std::vector<std::string> names_;
  SmallVector<LayoutLeaf, 8> dim_leaves_;  // single_leaf_dims()
  bool is_root_ = true;
};

}  // namespace meshgate
