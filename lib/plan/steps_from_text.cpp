// Plans written as comm strings (a case's steps:, another implementation's plan): the steps
// they issue on one rank, and the check that every group's ranks would pass equal counts.
#include <algorithm>
#include <charconv>
#include <map>
#include <string>

#include "core/error.hpp"
#include "plan/mesh_view.hpp"
#include "plan/plan.hpp"

namespace meshgate {
namespace {

// The step that comm string `text` writes, on a mesh of sizes `mesh_shape`: kind, dims,
// placements and tensor dims set; shapes, bytes and cost not yet.
TransformStep step_of(const DeviceMesh& mesh, std::span<const std::int64_t> mesh_shape,
                      const std::string& text) {
  const CommString c = parse_comm_string(text);
  TransformStep s;
  s.kind = c.kind;
  s.reduce_op = c.reduce_op;
  s.src_tensor_dim = c.src_tensor_dim;
  s.dst_tensor_dim = c.dst_tensor_dim;
  switch (c.kind) {
    case StepKind::all_reduce:
      s.src = Placement::partial(c.reduce_op);
      break;
    case StepKind::local_partial:
      s.dst = Placement::partial(c.reduce_op);
      break;
    case StepKind::reduce_scatter:
      s.src = Placement::partial(c.reduce_op);
      s.dst = Placement::shard(c.dst_tensor_dim);
      break;
    case StepKind::all_gather:
      s.src = Placement::shard(c.src_tensor_dim);
      break;
    case StepKind::local_chunk:
      s.dst = Placement::shard(c.dst_tensor_dim);
      break;
    case StepKind::all_to_all:
      s.src = Placement::shard(c.src_tensor_dim);
      s.dst = Placement::shard(c.dst_tensor_dim);
      break;
  }
  const auto fail = [&](const std::string& why) -> Error {
    return Error(ErrorKind::value, "step '" + text + "': " + why);
  };
  const std::vector<std::string>& names = mesh.names();
  for (const std::string& dim : c.group) {
    std::int64_t index = -1;
    if (const auto it = std::find(names.begin(), names.end(), dim); it != names.end()) {
      index = it - names.begin();
    } else if (names.empty()) {
      std::from_chars(dim.data(), dim.data() + dim.size(), index);
    }
    if (index < 0 || index >= static_cast<std::int64_t>(mesh_shape.size())) {
      throw fail("'" + dim + "' is not a dim of the mesh");
    }
    s.mesh_dims.push_back(index);
  }
  std::sort(s.mesh_dims.begin(), s.mesh_dims.end());
  if (std::adjacent_find(s.mesh_dims.begin(), s.mesh_dims.end()) != s.mesh_dims.end()) {
    throw fail("names a mesh dim twice");
  }
  s.group_size = 1;
  for (std::int64_t m : s.mesh_dims) s.group_size *= mesh_shape[static_cast<std::size_t>(m)];
  return s;
}

}  // namespace

StepList steps_from_text(const DTensorSpec& src, std::span<const std::string> texts,
                         std::span<const std::int64_t> coordinate, const Topology& topology) {
  const plan_internal::MeshView v = plan_internal::check_and_view(src, src, coordinate);
  // The tensor as seen at each mesh dim, as the greedy planner's logical shapes.
  std::vector<Shape> logical = {src.shape};
  for (std::size_t i = 0; i + 1 < v.shape.size(); ++i) {
    logical.push_back(logical.back());
    if (src.placements[i].is_shard()) {
      std::int64_t& extent = logical.back()[static_cast<std::size_t>(src.placements[i].dim())];
      extent = chunk_range(extent, v.shape[i], v.coord[i]).length;
    }
  }
  StepShape local{std::span<const std::int64_t>(local_shard(src, v.coord).shape)};
  StepList out;
  for (const std::string& text : texts) {
    TransformStep s = step_of(src.mesh, v.shape, text);
    for (std::int64_t d : {s.src_tensor_dim, s.dst_tensor_dim}) {
      if (d >= static_cast<std::int64_t>(src.shape.size())) {
        throw Error(ErrorKind::value, "step '" + text + "': the tensor has " +
                                          std::to_string(src.shape.size()) + " dims");
      }
    }
    s.logical_shape.assign(logical[static_cast<std::size_t>(s.mesh_dims.front())]);
    if (s.merged()) {
      s.flattened_name =
          plan_internal::find_flattened(src.mesh, v.dim_leaves, s.mesh_dims).value_or("");
    }
    plan_internal::fill_shapes(s, v, local, src.element_size);
    plan_internal::fill_cost(s, v, topology);
    local = s.output_shape;
    out.push_back(std::move(s));
  }
  return out;
}

void check_steps_pair_up(const DTensorSpec& src, std::span<const std::string> texts) {
  const std::vector<std::int64_t> shape = src.mesh.shape();
  // Per step and group (the coordinates outside the step's dims): the first rank's count and
  // coordinate.
  struct Seen {
    std::int64_t count;
    std::vector<std::int64_t> coord;
  };
  std::map<std::pair<std::size_t, std::vector<std::int64_t>>, Seen> seen;
  const auto coord_text = [](const std::vector<std::int64_t>& c) {
    std::string out = "[";
    for (std::size_t i = 0; i < c.size(); ++i) out += (i ? ", " : "") + std::to_string(c[i]);
    return out + "]";
  };
  std::vector<std::int64_t> coord(shape.size(), 0);
  for (std::int64_t k = 0; k < src.mesh.size(); ++k) {
    const StepList steps = steps_from_text(src, texts, coord);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const TransformStep& s = steps[i];
      if (!is_collective(s.kind) || s.group_size <= 1) continue;
      // The element count each rank passes to the collective (the per-rank count of
      // Communicator: all_reduce's buffer, one block of the others').
      const std::int64_t blocks = s.kind == StepKind::all_reduce ? 1 : s.group_size;
      const std::int64_t count = s.bytes / src.element_size / blocks;
      std::vector<std::int64_t> outside;
      for (std::size_t m = 0; m < shape.size(); ++m) {
        if (std::find(s.mesh_dims.begin(), s.mesh_dims.end(), static_cast<std::int64_t>(m)) ==
            s.mesh_dims.end()) {
          outside.push_back(coord[m]);
        }
      }
      const auto [it, first] = seen.try_emplace({i, std::move(outside)}, Seen{count, coord});
      if (first || it->second.count == count) continue;
      throw Error(ErrorKind::value,
                  "step '" + texts[i] + "' cannot run: the ranks of one of its groups would pass " +
                      "different element counts, " + std::to_string(it->second.count) +
                      " at coordinate " + coord_text(it->second.coord) + " and " +
                      std::to_string(count) + " at " + coord_text(coord) +
                      " (their shards differ there); a collective needs the same count on every "
                      "rank of its group, or it hangs or reads past a buffer");
    }
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
}

}  // namespace meshgate
