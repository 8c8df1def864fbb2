#include "plan/plan.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>

#include "core/error.hpp"
#include "layout/mesh_layout.hpp"

namespace meshgate {
namespace {

std::atomic<int> g_disable_depth{0};

std::int64_t product(std::span<const std::int64_t> v) {
  std::int64_t p = 1;
  for (std::int64_t x : v) p *= x;
  return p;
}

std::int64_t numel(const Shape& s) {
  return product(s);
}

CollectiveOp collective_of(StepKind kind) {
  switch (kind) {
    case StepKind::all_reduce:
      return CollectiveOp::all_reduce;
    case StepKind::reduce_scatter:
      return CollectiveOp::reduce_scatter;
    case StepKind::all_gather:
      return CollectiveOp::all_gather;
    default:
      return CollectiveOp::all_to_all;
  }
}

// (size, stride) of each mesh dim when every dim of a one_level layout is a single mode (the
// usual case); empty otherwise. Read once per plan so the merge lookup and the cost model do
// not slice layouts again for every run and step.
using FlatModes = std::vector<std::pair<std::int64_t, std::int64_t>>;

FlatModes flat_modes(const DeviceMesh& mesh) {
  FlatModes out;
  if (mesh.model() != LayoutModel::one_level) return out;
  const Layout& l = mesh.layout();
  if (l.shape().is_int()) {
    out.emplace_back(l.shape().value(), l.stride().value());
    return out;
  }
  const std::size_t n = l.shape().length();
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const IntTuple size = l.shape()[i];
    if (!size.is_int()) return {};
    out.emplace_back(size.value(), l.stride()[i].value());
  }
  return out;
}

// What the planner knows about the mesh, read once: sizes, modes and the rank's coordinate.
struct MeshView {
  const DeviceMesh* mesh;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> coord;
  FlatModes modes;
};

// mesh_coalesce of the flat modes `dims` (in that order), as (size, stride) leaves: drop size-1
// modes, merge a mode into the next when its stride is the next one's extent, strides 0 -> 1.
// Returns the number of leaves written to `out` (which has room for one per dim, at least 1).
std::size_t coalesced_modes(const FlatModes& modes, std::span<const std::int64_t> dims,
                            std::span<std::pair<std::int64_t, std::int64_t>> out) {
  std::size_t n = 0;
  for (std::int64_t d : dims) {
    const auto [size, stride] = modes[static_cast<std::size_t>(d)];
    if (size == 1) continue;
    if (n > 0 && out[n - 1].second == size * stride) {
      out[n - 1] = {out[n - 1].first * size, stride};
    } else {
      out[n++] = {size, stride};
    }
  }
  if (n == 0) out[n++] = {1, 0};
  for (std::size_t i = 0; i < n; ++i) {
    if (out[i].second == 0) out[i].second = 1;
  }
  return n;
}

// find_flattened_dim on flat modes: the registered layouts come from DeviceMesh::flatten, so
// their leaves are exactly the coalesced modes they were flattened from.
std::optional<std::string> find_flattened_fast(const DeviceMesh& mesh, const FlatModes& modes,
                                               std::span<const std::int64_t> dims) {
  if (mesh.names().empty()) return std::nullopt;
  for (std::int64_t d : dims) {
    if (d < 0 || static_cast<std::size_t>(d) >= modes.size()) return std::nullopt;
  }
  const std::vector<std::pair<std::string, Layout>> registry = mesh.flattened();
  if (registry.empty()) return std::nullopt;
  std::array<std::pair<std::int64_t, std::int64_t>, 16> buffer;
  std::vector<std::pair<std::int64_t, std::int64_t>> large;
  std::span<std::pair<std::int64_t, std::int64_t>> room(buffer);
  if (dims.size() > buffer.size()) {
    large.resize(dims.size());
    room = large;
  }
  const std::span<const std::pair<std::int64_t, std::int64_t>> expected =
      room.first(coalesced_modes(modes, dims, room));
  for (const auto& [name, flat] : registry) {
    if (flat.shape().is_int()) {
      if (expected.size() == 1 && expected[0].first == flat.shape().value() &&
          expected[0].second == flat.stride().value()) {
        return name;
      }
      continue;
    }
    // A nested flattened layout ((s0,s1,..)):((d0,d1,..)) has one mode holding the leaves.
    if (expected.size() < 2 || flat.rank() != 1) continue;
    const IntTuple sizes = flat.shape()[0];
    const IntTuple strides = flat.stride()[0];
    if (sizes.is_int() || sizes.length() != expected.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < expected.size() && same; ++i) {
      const IntTuple size = sizes[i];
      const IntTuple stride = strides[i];
      same = size.is_int() && size.value() == expected[i].first &&
             stride.value() == expected[i].second;
    }
    if (same) return name;
  }
  return std::nullopt;
}

std::optional<std::string> lookup_flattened(const DeviceMesh& mesh, const FlatModes* modes,
                                            std::span<const std::int64_t> dims) {
  if (modes && !modes->empty()) return find_flattened_fast(mesh, *modes, dims);
  return find_flattened_dim(mesh, dims);
}

// The rank's index inside the (row-major, ascending dims) group of `dims`.
std::int64_t group_index(const MeshView& v, std::span<const std::int64_t> dims) {
  std::int64_t idx = 0;
  for (std::int64_t d : dims) {
    idx = idx * v.shape[static_cast<std::size_t>(d)] + v.coord[static_cast<std::size_t>(d)];
  }
  return idx;
}

// Fills shapes and bytes of a step whose kind, dims and tensor dims are set.
void fill_shapes(TransformStep& s, const MeshView& v, const Shape& input, std::int64_t es) {
  const std::int64_t n = s.group_size;
  const std::int64_t idx = group_index(v, s.mesh_dims);
  s.input_shape = input;
  s.output_shape = input;
  s.bytes = 0;
  // The executor skips size-1 groups: the local tensor stays as it is.
  if (n == 1) return;
  switch (s.kind) {
    case StepKind::all_reduce:
      s.bytes = numel(input) * es;
      break;
    case StepKind::reduce_scatter:
    case StepKind::local_chunk: {
      const auto d = static_cast<std::size_t>(s.dst_tensor_dim);
      s.output_shape[d] = chunk_range(input[d], n, idx).length;
      if (s.kind == StepKind::reduce_scatter) {
        Shape padded = input;
        padded[d] = padded_chunk(input[d], n) * n;
        s.bytes = numel(padded) * es;
      }
      break;
    }
    case StepKind::all_gather: {
      const auto d = static_cast<std::size_t>(s.src_tensor_dim);
      s.output_shape[d] = s.logical_shape[d];
      Shape gathered = input;
      gathered[d] = padded_chunk(s.logical_shape[d], n) * n;
      s.bytes = numel(gathered) * es;
      break;
    }
    case StepKind::all_to_all: {
      const auto a = static_cast<std::size_t>(s.src_tensor_dim);
      const auto b = static_cast<std::size_t>(s.dst_tensor_dim);
      s.output_shape[a] = s.logical_shape[a];
      s.output_shape[b] = chunk_range(input[b], n, idx).length;
      Shape padded = input;
      padded[a] = padded_chunk(s.logical_shape[a], n);
      padded[b] = padded_chunk(input[b], n) * n;
      s.bytes = numel(padded) * es;
      break;
    }
    case StepKind::local_partial:
      break;
  }
}

void fill_cost(TransformStep& s, const MeshView& v, const Topology& topology) {
  s.modeled_time = 0;
  if (!is_collective(s.kind) || s.group_size <= 1) return;
  if (v.modes.empty()) {
    s.modeled_time = modeled_time(*v.mesh, s.mesh_dims, collective_of(s.kind), s.bytes, topology);
    return;
  }
  std::array<std::pair<std::int64_t, std::int64_t>, 16> group;
  std::size_t n = 0;
  for (std::int64_t d : s.mesh_dims) {
    if (n < group.size()) group[n++] = v.modes[static_cast<std::size_t>(d)];
  }
  if (n < s.mesh_dims.size()) {
    s.modeled_time = modeled_time(*v.mesh, s.mesh_dims, collective_of(s.kind), s.bytes, topology);
    return;
  }
  s.modeled_time = modeled_time(
      collective_of(s.kind), place_group(std::span(group.data(), n), topology), s.bytes, topology);
}

std::string placement_pair(const Placement& a, const Placement& b) {
  return to_long_string(a) + " to " + to_long_string(b);
}

// One transform of the greedy planner: (mesh dim m, cur -> tgt), with the op-table errors.
TransformStep make_step(const MeshView& v, std::int64_t m, Placement cur, Placement tgt,
                        std::span<const std::int64_t> logical, const Shape& input,
                        std::int64_t es) {
  TransformStep s;
  s.mesh_dims = {m};
  s.src = cur;
  s.dst = tgt;
  s.group_size = v.shape[static_cast<std::size_t>(m)];
  s.logical_shape.assign(logical.begin(), logical.end());
  // The executor skips size-1 groups before looking at the pair (test_one_chunk_mesh), so
  // unsupported pairs there are not errors.
  const bool trivial = s.group_size == 1;
  if (cur.is_partial() && tgt.is_replicate()) {
    s.kind = StepKind::all_reduce;
    s.reduce_op = cur.reduce_op();
  } else if (cur.is_partial() && tgt.is_shard()) {
    s.kind = StepKind::reduce_scatter;
    s.reduce_op = cur.reduce_op();
    s.dst_tensor_dim = tgt.dim();
  } else if (cur.is_shard() && tgt.is_replicate()) {
    s.kind = StepKind::all_gather;
    s.src_tensor_dim = cur.dim();
  } else if (cur.is_shard() && tgt.is_shard()) {
    s.kind = StepKind::all_to_all;
    s.src_tensor_dim = cur.dim();
    s.dst_tensor_dim = tgt.dim();
  } else if (cur.is_replicate() && tgt.is_shard()) {
    s.kind = StepKind::local_chunk;
    s.dst_tensor_dim = tgt.dim();
  } else if (cur.is_replicate() && tgt.is_partial()) {
    // Partial._partition_value: sum divides, avg/min/max keep the value; a product has no
    // partition that reduces back to the value.
    if (!trivial && tgt.reduce_op() == ReduceOp::product) {
      throw Error(ErrorKind::value,
                  "Replicate to Partial(product) conversion is not supported (mesh dim " +
                      std::to_string(m) + "): keep the tensor Replicate() there");
    }
    s.kind = StepKind::local_partial;
    s.reduce_op = tgt.reduce_op();
  } else if (cur.is_shard() && tgt.is_partial()) {
    if (!trivial) {
      throw Error(ErrorKind::runtime, "redistribute from " + placement_pair(cur, tgt) +
                                          " not supported yet (mesh dim " + std::to_string(m) +
                                          "): go through Replicate() instead");
    }
    s.kind = StepKind::local_partial;
    s.reduce_op = tgt.reduce_op();
  } else {  // Partial(x) -> Partial(y), x != y
    if (!trivial) {
      throw Error(ErrorKind::assertion, "Redistribution from one partial type (" +
                                            to_long_string(cur) + ") to another (" +
                                            to_long_string(tgt) + ") is unsupported (mesh dim " +
                                            std::to_string(m) + "): reduce to Replicate() first");
    }
    s.kind = StepKind::local_partial;
    s.reduce_op = tgt.reduce_op();
  }
  fill_shapes(s, v, input, es);
  return s;
}

MeshView check_and_view(const DTensorSpec& src, const DTensorSpec& dst,
                        std::span<const std::int64_t> coordinate) {
  if (!(src.mesh.layout() == dst.mesh.layout() && src.mesh.names() == dst.mesh.names())) {
    throw Error(ErrorKind::value, "source and target specs are on different meshes (" +
                                      to_string(src.mesh.layout()) + " vs " +
                                      to_string(dst.mesh.layout()) + "): redistribute on one mesh");
  }
  if (src.shape != dst.shape || src.element_size != dst.element_size) {
    throw Error(ErrorKind::value,
                "source and target specs describe different tensors (shape or dtype): "
                "redistribution keeps the global tensor");
  }
  const std::size_t nd = src.mesh.ndim();
  if (src.placements.size() != nd || dst.placements.size() != nd) {
    throw Error(ErrorKind::value, "placements " + to_string(src.placements) + " -> " +
                                      to_string(dst.placements) + " need one entry per mesh dim (" +
                                      std::to_string(nd) + ")");
  }
  check_no_mixed_partial_types(src.placements);
  check_no_mixed_partial_types(dst.placements);
  MeshView v{&src.mesh, {}, {}, flat_modes(src.mesh)};
  if (v.modes.empty()) {
    v.shape = src.mesh.shape();
  } else {
    v.shape.reserve(v.modes.size());
    for (const auto& m : v.modes) v.shape.push_back(m.first);
  }
  if (coordinate.empty()) {
    v.coord.assign(nd, 0);
  } else {
    if (coordinate.size() != nd) {
      throw Error(ErrorKind::value, "coordinate has " + std::to_string(coordinate.size()) +
                                        " entries but the mesh has " + std::to_string(nd) +
                                        " dims");
    }
    v.coord.assign(coordinate.begin(), coordinate.end());
    for (std::size_t i = 0; i < nd; ++i) {
      if (v.coord[i] < 0 || v.coord[i] >= v.shape[i]) {
        throw Error(ErrorKind::value, "coordinate entry " + std::to_string(v.coord[i]) +
                                          " is outside mesh dim " + std::to_string(i) +
                                          " of size " + std::to_string(v.shape[i]));
      }
    }
  }
  return v;
}

std::vector<TransformStep> greedy(const DTensorSpec& src, const DTensorSpec& dst, const MeshView& v,
                                  Api api) {
  const std::vector<Placement>& sp = src.placements;
  const std::vector<Placement>& dp = dst.placements;
  const std::size_t nd = sp.size();
  std::vector<TransformStep> out;
  if (sp == dp) return out;
  if (api == Api::public_) {
    for (std::size_t i = 0; i < nd; ++i) {
      if (dp[i].is_partial() && sp[i] != dp[i]) {
        throw Error(ErrorKind::runtime,
                    "Can not redistribute from " + to_long_string(sp[i]) + " to " +
                        to_long_string(dp[i]) +
                        ", redistributing to Partial is for internal use only! (mesh dim " +
                        std::to_string(i) + ")");
      }
    }
  }
  // Logical shapes: row i (of `rank` entries) is the tensor as seen at mesh dim i on this
  // rank. One flat buffer: planning is on the hot path of every redistribution.
  const std::size_t rank = src.shape.size();
  std::vector<std::int64_t> logical(nd * rank);
  std::copy(src.shape.begin(), src.shape.end(), logical.begin());
  for (std::size_t i = 0; i + 1 < nd; ++i) {
    std::copy_n(logical.begin() + static_cast<std::ptrdiff_t>(i * rank), rank,
                logical.begin() + static_cast<std::ptrdiff_t>((i + 1) * rank));
    if (sp[i].is_shard()) {
      std::int64_t& extent = logical[(i + 1) * rank + static_cast<std::size_t>(sp[i].dim())];
      extent = chunk_range(extent, v.shape[i], v.coord[i]).length;
    }
  }
  auto logical_row = [&](std::size_t m) {
    return std::span<const std::int64_t>(logical.data() + m * rank, rank);
  };
  // The source's local shape: the last row chunked by the last mesh dim's shard, if any.
  Shape local(logical_row(nd - 1).begin(), logical_row(nd - 1).end());
  if (sp[nd - 1].is_shard()) {
    std::int64_t& extent = local[static_cast<std::size_t>(sp[nd - 1].dim())];
    extent = chunk_range(extent, v.shape[nd - 1], v.coord[nd - 1]).length;
  }
  out.reserve(nd);
  std::vector<Placement> cur = sp;
  auto emit = [&](std::size_t m, Placement tgt) {
    out.push_back(make_step(v, static_cast<std::int64_t>(m), cur[m], tgt, logical_row(m), local,
                            src.element_size));
    local = out.back().output_shape;
    cur[m] = tgt;
  };
  if (nd == 1) {
    emit(0, dp[0]);
    return out;
  }
  if (num_shards(v.shape, sp) > 1) {
    for (std::size_t m = nd; m-- > 0;) {
      Placement t = dp[m];
      if (t.is_shard()) {
        // Nested sharding of the same tensor dim before m must line up, else replicate first.
        bool misaligned = false;
        for (std::size_t i = 0; i < m && !misaligned; ++i) {
          misaligned = cur[i].is_shard(t.dim()) != dp[i].is_shard(t.dim());
        }
        if (misaligned) t = Placement::replicate();
      }
      if (cur[m] != t) emit(m, t);
    }
  }
  for (std::size_t m = 0; m < nd; ++m) {
    if (cur[m] != dp[m]) emit(m, dp[m]);
  }
  return out;
}

bool mergeable_kind(StepKind k) {
  return k == StepKind::all_reduce || k == StepKind::reduce_scatter || k == StepKind::all_gather;
}

bool linear(ReduceOp op) {
  return op == ReduceOp::sum || op == ReduceOp::avg;
}

bool mergeable_pair(const TransformStep& a, const TransformStep& b) {
  if (a.src == b.src && a.dst == b.dst) return true;
  return a.dst == b.dst && a.src.is_partial() && b.src.is_partial() && linear(a.src.reduce_op()) &&
         linear(b.src.reduce_op());
}

std::string dims_label(const DeviceMesh& mesh, std::span<const std::int64_t> dims,
                       std::string_view sep) {
  std::string s;
  const auto& names = mesh.names();
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) s += sep;
    const auto d = static_cast<std::size_t>(dims[i]);
    s += d < names.size() ? names[d] : std::to_string(dims[i]);
  }
  return s;
}

std::string warning_message(const DeviceMesh& mesh, std::span<const Placement> src,
                            std::span<const Placement> dst, std::span<const std::int64_t> dims,
                            std::size_t count, StepKind kind, MergeReason reason) {
  std::string quoted;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    quoted += (i ? ", \"" : "\"") + dims_label(mesh, dims.subspan(i, 1), "") + "\"";
  }
  std::string msg = "While redistributing from " + to_string(src, true) + " to " +
                    to_string(dst, true) + ", " + std::to_string(count) + " sequential " +
                    std::string(to_string(kind)) +
                    " operations will be performed. This is suboptimal for performance and can "
                    "give replicas different bits from different reduction orders. ";
  switch (reason) {
    case MergeReason::no_flattened_mesh:
      msg += "To merge them into one collective, flatten mesh dimensions [" + quoted +
             "] (mesh._flatten()) before redistributing.";
      break;
    case MergeReason::non_ascending_mesh_dims:
      msg += "It is not possible to merge non-ascending order mesh dims [" + quoted + "] for " +
             std::string(to_string(kind)) + ".";
      break;
    case MergeReason::uneven_tensor_shape:
      msg += "The tensor dim is not evenly divisible by the size of mesh dims [" + quoted +
             "], so they are not merged.";
      break;
    default:
      break;
  }
  return msg;
}

// Whether splitting `extent` elements with torch.chunk over `sizes` one after the other (the
// first outermost) leaves every member of the group, row-major over `sizes`, the piece that one
// torch.chunk split over their product gives it: then one collective over the flattened group
// moves the same elements as the per-dim collectives. Pieces come in order, so equal lengths
// mean equal pieces; size-1 dims split nothing. Uneven last chunks and empty chunks are
// compared exactly: 3 over 2x2 is 1,1,1,0 both ways (an all_gather merges there; a
// reduce_scatter is refused by the reference's divisibility rule first).
// A piece that is all full or all empty compares in one step, so the walk costs about the
// sum of the sizes, not their product (no ranks are enumerated).
bool nested_chunks_match_flat(std::int64_t extent, std::span<const std::int64_t> sizes) {
  const std::int64_t n = product(sizes);
  if (n <= 1 || extent % n == 0) return true;
  const std::int64_t piece = padded_chunk(extent, n);
  const auto flat_length = [&](std::int64_t member) {
    return std::clamp<std::int64_t>(extent - member * piece, 0, piece);
  };
  // The nested split of `length` elements over sizes[level..], held by the `members` members
  // from `first` on, against the flat split there.
  const auto match = [&](const auto& self, std::int64_t length, std::size_t level,
                         std::int64_t first, std::int64_t members) -> bool {
    if (length == 0) return flat_length(first) == 0;  // flat lengths never grow again
    if (length == piece * members) return flat_length(first + members - 1) == piece;
    if (members == 1) return length == flat_length(first);
    const std::int64_t parts = sizes[level];
    const std::int64_t inner = members / parts;
    for (std::int64_t j = 0; j < parts; ++j) {
      if (!self(self, chunk_range(length, parts, j).length, level + 1, first + j * inner, inner)) {
        return false;
      }
    }
    return true;
  };
  return match(match, extent, 0, 0, n);
}

struct MergeResult {
  std::optional<TransformStep> step;
  MergeReason reason = MergeReason::merged;
};

// try_create_flattened for a run of >= 2 mergeable steps.
MergeResult try_merge(const DeviceMesh& mesh, const FlatModes* modes,
                      std::span<const TransformStep> run, std::span<const std::int64_t> shape) {
  const StepKind kind = run.front().kind;
  bool ascending = true;
  bool descending = true;
  for (std::size_t i = 1; i < run.size(); ++i) {
    ascending = ascending && run[i - 1].mesh_dims.front() < run[i].mesh_dims.front();
    descending = descending && run[i - 1].mesh_dims.front() > run[i].mesh_dims.front();
  }
  if ((kind == StepKind::reduce_scatter && !ascending) ||
      (kind == StepKind::all_gather && !descending)) {
    return {std::nullopt, MergeReason::non_ascending_mesh_dims};
  }
  std::vector<std::int64_t> sorted;
  sorted.reserve(run.size());
  for (const TransformStep& s : run) sorted.push_back(s.mesh_dims.front());
  std::sort(sorted.begin(), sorted.end());
  std::optional<std::string> flat = lookup_flattened(mesh, modes, sorted);
  if (!flat) return {std::nullopt, MergeReason::no_flattened_mesh};

  std::int64_t n = 1;
  std::vector<std::int64_t> sizes;
  sizes.reserve(sorted.size());
  for (std::int64_t d : sorted) {
    sizes.push_back(shape[static_cast<std::size_t>(d)]);
    n *= sizes.back();
  }
  const TransformStep* outer = &run.front();
  if (kind != StepKind::all_reduce) {
    const auto d = static_cast<std::size_t>(kind == StepKind::all_gather ? outer->src_tensor_dim
                                                                         : outer->dst_tensor_dim);
    for (const TransformStep& s : run) {
      if (s.logical_shape[d] > outer->logical_shape[d]) outer = &s;
    }
    // The flat collective must place every element where the run's per-dim ones do (spec
    // section 7, class 1). Every size read here is the same on every rank of the group, so its
    // ranks agree.
    if (kind == StepKind::all_gather) {
      // It rebuilds the outermost logical size from the nested pieces; the reference has no
      // guard here (#194457). Uneven splits that coincide (3 rows over 2x2: 1,1,1,0 both
      // ways) merge.
      if (!nested_chunks_match_flat(outer->logical_shape[d], sizes)) {
        return {std::nullopt, MergeReason::uneven_tensor_shape};
      }
    } else {
      // The reference's rule (spec section 4.4): the outermost logical size must divide by the
      // run's group, even where the uneven splits would coincide (7 rows over 2x4).
      if (outer->logical_shape[d] % n != 0) {
        return {std::nullopt, MergeReason::uneven_tensor_shape};
      }
      // It splits the local tensor, which an earlier step may already have chunked:
      // (R,P,P) -> (S0,S0,S0) on 2x2x2 with 4 rows chunks on A first, and the 2 local rows
      // split 1,0,1,0 over B,C nested but 1,1,0,0 flat, although 4 rows divide by B*C (the
      // reference merges there and moves rows).
      if (!run.front().input_shape.empty() &&
          !nested_chunks_match_flat(run.front().input_shape[d], sizes)) {
        return {std::nullopt, MergeReason::uneven_tensor_shape};
      }
    }
  }
  TransformStep m;
  m.kind = kind;
  m.mesh_dims = std::move(sorted);
  m.src = run.front().src;
  m.dst = run.front().dst;
  m.reduce_op = run.front().reduce_op;
  m.src_tensor_dim = run.front().src_tensor_dim;
  m.dst_tensor_dim = run.front().dst_tensor_dim;
  m.group_size = n;
  m.logical_shape = outer->logical_shape;
  m.flattened_name = std::move(*flat);
  if (m.src.is_partial()) {
    bool any_avg = false;
    for (const TransformStep& s : run) {
      if (s.src.reduce_op() == ReduceOp::avg) {
        any_avg = true;
        m.avg_scale *= shape[static_cast<std::size_t>(s.mesh_dims.front())];
      }
    }
    // A sum/avg run reduces with sum and divides by the avg dims' size afterwards (pure avg
    // too). Unlike the reference, a mix whose avg dims all have size 1 also reduces with sum:
    // an avg over the whole flattened group would divide by the sum dims' size.
    if (any_avg) {
      m.src = Placement::partial(ReduceOp::sum);
      m.reduce_op = ReduceOp::sum;
    }
  }
  return {std::move(m), MergeReason::merged};
}

// A merged step's shapes: the run's input, its last output, and the collective's buffer.
void fill_merged_shapes(TransformStep& m, std::span<const TransformStep> run, std::int64_t es) {
  m.input_shape = run.front().input_shape;
  m.output_shape = run.back().output_shape;
  const std::int64_t n = m.group_size;
  switch (m.kind) {
    case StepKind::all_reduce:
      m.bytes = numel(m.input_shape) * es;
      break;
    case StepKind::reduce_scatter: {
      Shape padded = m.input_shape;
      const auto d = static_cast<std::size_t>(m.dst_tensor_dim);
      padded[d] = padded_chunk(padded[d], n) * n;
      m.bytes = numel(padded) * es;
      break;
    }
    case StepKind::all_gather: {
      Shape gathered = m.input_shape;
      const auto d = static_cast<std::size_t>(m.src_tensor_dim);
      gathered[d] = padded_chunk(m.logical_shape[d], n) * n;
      m.bytes = numel(gathered) * es;
      break;
    }
    default:
      break;
  }
}

// The runs the merge pass would consider, each recorded as `reason` (the pass is off).
void record_unmerged_runs(const std::vector<TransformStep>& steps, std::vector<RunDecision>* runs) {
  if (!runs) return;
  std::size_t i = 0;
  while (i < steps.size()) {
    if (!mergeable_kind(steps[i].kind)) {
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    while (j < steps.size() && mergeable_kind(steps[j].kind) &&
           mergeable_pair(steps[i], steps[j])) {
      ++j;
    }
    RunDecision d;
    d.kind = steps[i].kind;
    for (std::size_t k = i; k < j; ++k) {
      d.mesh_dims.push_back(steps[k].mesh_dims.front());
      d.steps.push_back(k);
    }
    d.reason = j - i >= 2 ? MergeReason::optimization_disabled : MergeReason::too_few_transforms;
    runs->push_back(std::move(d));
    i = j;
  }
}

std::vector<TransformStep> merge_pass(const DeviceMesh& mesh, const FlatModes* modes,
                                      const std::vector<std::int64_t>& shape,
                                      std::span<const Placement> src,
                                      std::span<const Placement> dst,
                                      const std::vector<TransformStep>& steps, std::int64_t es,
                                      std::vector<RunDecision>* runs,
                                      std::vector<PlanWarning>* warnings) {
  if (steps.size() < 2) return steps;
  if (!transform_optimization_enabled()) {
    record_unmerged_runs(steps, runs);
    return steps;
  }
  std::vector<TransformStep> out;
  out.reserve(steps.size());
  std::size_t i = 0;
  while (i < steps.size()) {
    if (!mergeable_kind(steps[i].kind)) {
      out.push_back(steps[i++]);
      continue;
    }
    std::size_t j = i + 1;
    while (j < steps.size() && mergeable_kind(steps[j].kind) &&
           mergeable_pair(steps[i], steps[j])) {
      ++j;
    }
    const std::span<const TransformStep> run(steps.data() + i, j - i);
    MergeResult r{std::nullopt, MergeReason::too_few_transforms};
    if (run.size() >= 2) r = try_merge(mesh, modes, run, shape);
    if (r.step) {
      fill_merged_shapes(*r.step, run, es);
      out.push_back(std::move(*r.step));
    } else {
      out.insert(out.end(), run.begin(), run.end());
    }
    if (runs) {
      RunDecision d;
      d.kind = run.front().kind;
      for (std::size_t k = i; k < j; ++k) {
        d.mesh_dims.push_back(steps[k].mesh_dims.front());
        d.steps.push_back(k);
      }
      d.reason = r.reason;
      if (r.reason == MergeReason::merged) d.flattened_name = out.back().flattened_name;
      runs->push_back(std::move(d));
    }
    if (warnings && (r.reason == MergeReason::no_flattened_mesh ||
                     r.reason == MergeReason::non_ascending_mesh_dims ||
                     r.reason == MergeReason::uneven_tensor_shape)) {
      PlanWarning w;
      for (const TransformStep& s : run) w.mesh_dims.push_back(s.mesh_dims.front());
      std::sort(w.mesh_dims.begin(), w.mesh_dims.end());
      w.reason = r.reason;
      const bool seen = std::any_of(warnings->begin(), warnings->end(), [&](const PlanWarning& o) {
        return o.reason == w.reason && o.mesh_dims == w.mesh_dims;
      });
      if (!seen) {
        w.message =
            warning_message(mesh, src, dst, w.mesh_dims, run.size(), run.front().kind, r.reason);
        warnings->push_back(std::move(w));
      }
    }
    i = j;
  }
  return out;
}

double total_cost(const std::vector<TransformStep>& steps) {
  double t = 0;
  for (const TransformStep& s : steps) t += s.modeled_time;
  return t;
}

// ---- min_cost: per run of like-kind collectives, the cheapest way to split it ----

// A merged step over the run members `members` (indices into `run`, in their issue order), or
// nullopt when that merge is not valid (order, flattened dim, evenness).
std::optional<TransformStep> merge_members(const DeviceMesh& mesh, const MeshView& v,
                                           std::span<const TransformStep> run,
                                           std::span<const std::size_t> members, std::int64_t es,
                                           const Topology& topology) {
  if (members.size() == 1) return run[members.front()];
  std::vector<TransformStep> sub;
  sub.reserve(members.size());
  for (std::size_t k : members) sub.push_back(run[k]);
  MergeResult r = try_merge(mesh, &v.modes, sub, v.shape);
  if (!r.step) return std::nullopt;
  fill_merged_shapes(*r.step, sub, es);
  fill_cost(*r.step, v, topology);
  return r.step;
}

// All-reduces of one run commute: try every partition of the run into groups (subset DP).
std::vector<TransformStep> best_all_reduce_partition(const DeviceMesh& mesh, const MeshView& v,
                                                     std::span<const TransformStep> run,
                                                     std::int64_t es, const Topology& topology) {
  const std::size_t k = run.size();
  const std::size_t full = (std::size_t{1} << k) - 1;
  std::vector<std::optional<TransformStep>> group(full + 1);
  std::vector<double> group_cost(full + 1, -1);
  for (std::size_t mask = 1; mask <= full; ++mask) {
    std::vector<std::size_t> members;
    for (std::size_t b = 0; b < k; ++b) {
      if (mask >> b & 1) members.push_back(b);
    }
    group[mask] = merge_members(mesh, v, run, members, es, topology);
    if (group[mask]) group_cost[mask] = group[mask]->modeled_time;
  }
  std::vector<double> best(full + 1, -1);
  std::vector<std::size_t> choice(full + 1, 0);
  best[0] = 0;
  for (std::size_t mask = 1; mask <= full; ++mask) {
    // The group holding the lowest member of `mask`, so each partition is counted once.
    const std::size_t low = mask & (~mask + 1);
    for (std::size_t sub = mask; sub; sub = (sub - 1) & mask) {
      if (!(sub & low) || group_cost[sub] < 0 || best[mask ^ sub] < 0) continue;
      const double c = group_cost[sub] + best[mask ^ sub];
      if (best[mask] < 0 || c < best[mask]) {
        best[mask] = c;
        choice[mask] = sub;
      }
    }
  }
  std::vector<TransformStep> out;
  for (std::size_t mask = full; mask; mask ^= choice[mask]) out.push_back(*group[choice[mask]]);
  return out;
}

// Reduce-scatters and all-gathers must keep their order: try every split into consecutive
// segments.
std::vector<TransformStep> best_segmentation(const DeviceMesh& mesh, const MeshView& v,
                                             std::span<const TransformStep> run, std::int64_t es,
                                             const Topology& topology) {
  const std::size_t k = run.size();
  std::vector<double> best(k + 1, -1);
  std::vector<std::size_t> from(k + 1, 0);
  std::vector<std::vector<std::optional<TransformStep>>> seg(k + 1);
  best[0] = 0;
  for (std::size_t end = 1; end <= k; ++end) {
    seg[end].resize(end);
    for (std::size_t start = 0; start < end; ++start) {
      std::vector<std::size_t> members;
      for (std::size_t q = start; q < end; ++q) members.push_back(q);
      seg[end][start] = merge_members(mesh, v, run, members, es, topology);
      if (!seg[end][start] || best[start] < 0) continue;
      const double c = best[start] + seg[end][start]->modeled_time;
      if (best[end] < 0 || c < best[end]) {
        best[end] = c;
        from[end] = start;
      }
    }
  }
  std::vector<TransformStep> out;
  for (std::size_t end = k; end > 0; end = from[end]) out.push_back(*seg[end][from[end]]);
  std::reverse(out.begin(), out.end());
  return out;
}

// Every rank of a group must issue the same collectives, so min_cost may only choose from
// costs that do not depend on the rank. They do not when every tensor dim divides evenly by
// the product of all mesh dims that shard it in the source or the target: then every chunk at
// every nesting level, in every intermediate placement of the plan, has the same size.
bool rank_independent_shapes(const DTensorSpec& src, const DTensorSpec& dst, const MeshView& v) {
  for (std::size_t d = 0; d < src.shape.size(); ++d) {
    std::int64_t ways = 1;
    for (std::size_t m = 0; m < v.shape.size(); ++m) {
      const auto dim = static_cast<std::int64_t>(d);
      if (src.placements[m].is_shard(dim) || dst.placements[m].is_shard(dim)) ways *= v.shape[m];
    }
    if (src.shape[d] % ways != 0) return false;
  }
  return true;
}

bool disjoint_dims(const TransformStep& a, const TransformStep& b) {
  for (std::int64_t x : a.mesh_dims) {
    if (std::find(b.mesh_dims.begin(), b.mesh_dims.end(), x) != b.mesh_dims.end()) return false;
  }
  return true;
}

// Rewrites that keep every rank's result and move fewer bytes. An all_reduce over X is an
// elementwise reduction across ranks that differ only in their X coordinate, and a step on
// another mesh dim Y does the same linear thing on each of them (same Y coordinate, same
// shapes), so the two commute:
//  - an all_reduce moves after a reduce_scatter or chunk on another dim (it then reduces the
//    smaller piece) and before an all_gather on another dim (it reduces before the growth);
//  - an all_reduce over X directly followed by a chunk over X is a reduce_scatter over X: the
//    same piece, reduced, without reducing the parts that the chunk drops.
// Shapes, bytes and costs are recomputed in the new order.
std::vector<TransformStep> reorder_and_fuse(const MeshView& v,
                                            const std::vector<TransformStep>& steps,
                                            std::int64_t es, const Topology& topology) {
  std::vector<TransformStep> out = steps;
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i + 1 < out.size(); ++i) {
      TransformStep& a = out[i];
      TransformStep& b = out[i + 1];
      const bool sink = a.kind == StepKind::all_reduce &&
                        (b.kind == StepKind::reduce_scatter || b.kind == StepKind::local_chunk) &&
                        disjoint_dims(a, b);
      const bool hoist =
          a.kind == StepKind::all_gather && b.kind == StepKind::all_reduce && disjoint_dims(a, b);
      if (sink || hoist) {
        std::swap(a, b);
        changed = true;
      }
    }
  }
  for (std::size_t i = 0; i + 1 < out.size(); ++i) {
    TransformStep& a = out[i];
    const TransformStep& b = out[i + 1];
    if (a.kind == StepKind::all_reduce && b.kind == StepKind::local_chunk &&
        a.mesh_dims == b.mesh_dims && a.avg_scale == 1) {
      a.kind = StepKind::reduce_scatter;
      a.dst = b.dst;
      a.dst_tensor_dim = b.dst_tensor_dim;
      a.logical_shape = b.logical_shape;
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
  }
  Shape local = steps.empty() ? Shape{} : steps.front().input_shape;
  for (TransformStep& s : out) {
    const Shape input = local;
    fill_shapes(s, v, input, es);
    fill_cost(s, v, topology);
    local = s.output_shape;
  }
  return out;
}

std::vector<TransformStep> min_cost_steps(const DeviceMesh& mesh, const MeshView& v,
                                          const std::vector<TransformStep>& steps, std::int64_t es,
                                          const Topology& topology) {
  std::vector<TransformStep> out;
  std::size_t i = 0;
  while (i < steps.size()) {
    if (!mergeable_kind(steps[i].kind)) {
      out.push_back(steps[i++]);
      continue;
    }
    std::size_t j = i + 1;
    while (j < steps.size() && mergeable_kind(steps[j].kind) &&
           mergeable_pair(steps[i], steps[j])) {
      ++j;
    }
    const std::span<const TransformStep> run(steps.data() + i, j - i);
    std::vector<TransformStep> best;
    // 2^k subsets: the run is at most one step per mesh dim, so k <= ndim.
    if (run.size() >= 2 && run.front().kind == StepKind::all_reduce && run.size() <= 12) {
      best = best_all_reduce_partition(mesh, v, run, es, topology);
    } else if (run.size() >= 2) {
      best = best_segmentation(mesh, v, run, es, topology);
    } else {
      best.assign(run.begin(), run.end());
    }
    out.insert(out.end(), best.begin(), best.end());
    i = j;
  }
  return out;
}

}  // namespace

std::string_view to_string(StepKind kind) {
  switch (kind) {
    case StepKind::all_reduce:
      return "all_reduce";
    case StepKind::reduce_scatter:
      return "reduce_scatter";
    case StepKind::all_gather:
      return "all_gather";
    case StepKind::all_to_all:
      return "all_to_all";
    case StepKind::local_chunk:
      return "chunk";
    case StepKind::local_partial:
      return "partial";
  }
  return "?";
}

bool is_collective(StepKind kind) {
  return kind == StepKind::all_reduce || kind == StepKind::reduce_scatter ||
         kind == StepKind::all_gather || kind == StepKind::all_to_all;
}

std::string_view to_string(MergeReason reason) {
  switch (reason) {
    case MergeReason::merged:
      return "merged";
    case MergeReason::too_few_transforms:
      return "too_few_transforms";
    case MergeReason::non_ascending_mesh_dims:
      return "non_ascending_mesh_dims";
    case MergeReason::no_flattened_mesh:
      return "no_flattened_mesh";
    case MergeReason::uneven_tensor_shape:
      return "uneven_tensor_shape";
    case MergeReason::optimization_disabled:
      return "optimization_disabled";
  }
  return "?";
}

std::string_view to_string(Planner p) {
  return p == Planner::greedy ? "greedy" : "min_cost";
}
Planner parse_planner(std::string_view text) {
  if (text == "greedy") return Planner::greedy;
  if (text == "min_cost") return Planner::min_cost;
  throw Error(ErrorKind::value,
              "unknown planner '" + std::string(text) + "': use greedy or min_cost");
}
std::string_view to_string(Api a) {
  return a == Api::internal ? "internal" : "public";
}
Api parse_api(std::string_view text) {
  if (text == "internal") return Api::internal;
  if (text == "public") return Api::public_;
  throw Error(ErrorKind::value, "unknown api '" + std::string(text) + "': use internal or public");
}

std::optional<std::string> find_flattened_dim(const DeviceMesh& mesh,
                                              std::span<const std::int64_t> dims) {
  if (mesh.names().empty()) return std::nullopt;
  const std::vector<std::pair<std::string, Layout>> registry = mesh.flattened();
  if (registry.empty()) return std::nullopt;
  std::vector<Layout> modes;
  modes.reserve(dims.size());
  const Layout& layout = mesh.layout();
  for (std::int64_t d : dims) {
    // Mesh dims index the current mesh; a dim past its end cannot have been flattened (#174006).
    if (d < 0 || static_cast<std::size_t>(d) >= mesh.ndim()) return std::nullopt;
    modes.push_back(mesh_mode(layout, d));
  }
  const Layout sliced = make_layout(modes);
  Layout expected;
  if (mesh.model() == LayoutModel::one_level) {
    // As DeviceMesh::flatten registers it: coalesce (stride 0 -> 1), nest what has several modes.
    expected = mesh_coalesce(sliced);
    if (expected.rank() > 1) expected = nest(expected);
  } else {
    const Layout axis = collapse(mesh_axes_from_layout(sliced));
    expected = make_layout(std::span<const Layout>(&axis, 1));
  }
  for (const auto& [name, flat] : registry) {
    if (flat == expected) return name;
  }
  return std::nullopt;
}

std::vector<TransformStep> greedy_transforms(const DTensorSpec& src, const DTensorSpec& dst,
                                             std::span<const std::int64_t> coordinate, Api api) {
  const MeshView v = check_and_view(src, dst, coordinate);
  return greedy(src, dst, v, api);
}

namespace {

// One step of steps_from_text with its kind, dims, placements and tensor dims set.
TransformStep parse_step(const DeviceMesh& mesh, const std::vector<std::int64_t>& mesh_shape,
                         const std::string& text) {
  const auto fail = [&](const std::string& why) -> Error {
    return Error(ErrorKind::value, "step '" + text + "': " + why);
  };
  const std::size_t open = text.find('(');
  if (open == std::string::npos || text.empty() || text.back() != ')') {
    throw fail("write it as kind(dims, ...), e.g. reduce_scatter(B+C, sum, dim=0)");
  }
  const std::string name = text.substr(0, open);
  std::vector<std::string> args;
  std::size_t start = open + 1;
  for (std::size_t i = start; i < text.size(); ++i) {
    if (text[i] == ',' || i + 1 == text.size()) {
      std::string arg = text.substr(start, i - start);
      while (!arg.empty() && arg.front() == ' ') arg.erase(arg.begin());
      while (!arg.empty() && arg.back() == ' ') arg.pop_back();
      args.push_back(arg);
      start = i + 1;
    }
  }
  TransformStep s;
  const auto dim_arg = [&](const std::string& arg) -> std::int64_t {
    std::int64_t v = -1;
    if (arg.rfind("dim=", 0) == 0) {
      const char* b = arg.data() + 4;
      const auto [end, ec] = std::from_chars(b, arg.data() + arg.size(), v);
      if (ec == std::errc() && end == arg.data() + arg.size() && v >= 0) return v;
    }
    throw fail("expected dim=N, got '" + arg + "'");
  };
  const auto op_arg = [&](const std::string& arg) -> ReduceOp {
    try {
      return parse_reduce_op(arg);
    } catch (const Error& e) {
      throw fail(e.what());
    }
  };
  const auto arity = [&](std::size_t n) {
    if (args.size() != n) {
      throw fail("takes " + std::to_string(n) + " arguments, got " + std::to_string(args.size()));
    }
  };
  if (name == "all_reduce" || name == "partial") {
    arity(2);
    s.kind = name == "all_reduce" ? StepKind::all_reduce : StepKind::local_partial;
    s.reduce_op = op_arg(args[1]);
    s.src = name == "all_reduce" ? Placement::partial(s.reduce_op) : Placement::replicate();
    s.dst = name == "all_reduce" ? Placement::replicate() : Placement::partial(s.reduce_op);
  } else if (name == "reduce_scatter") {
    arity(3);
    s.kind = StepKind::reduce_scatter;
    s.reduce_op = op_arg(args[1]);
    s.dst_tensor_dim = dim_arg(args[2]);
    s.src = Placement::partial(s.reduce_op);
    s.dst = Placement::shard(s.dst_tensor_dim);
  } else if (name == "all_gather" || name == "chunk") {
    arity(2);
    const std::int64_t d = dim_arg(args[1]);
    if (name == "all_gather") {
      s.kind = StepKind::all_gather;
      s.src_tensor_dim = d;
      s.src = Placement::shard(d);
    } else {
      s.kind = StepKind::local_chunk;
      s.dst_tensor_dim = d;
      s.dst = Placement::shard(d);
    }
  } else if (name == "all_to_all") {
    arity(2);
    const std::size_t arrow = args[1].find("->");
    if (arrow == std::string::npos) throw fail("expected dim=A->B, got '" + args[1] + "'");
    s.kind = StepKind::all_to_all;
    s.src_tensor_dim = dim_arg(args[1].substr(0, arrow));
    s.dst_tensor_dim = dim_arg("dim=" + args[1].substr(arrow + 2));
    s.src = Placement::shard(s.src_tensor_dim);
    s.dst = Placement::shard(s.dst_tensor_dim);
  } else {
    throw fail("unknown kind '" + name +
               "': use all_reduce, reduce_scatter, all_gather, all_to_all, chunk or partial");
  }
  const std::vector<std::string>& names = mesh.names();
  std::size_t from = 0;
  const std::string& dims = args[0];
  for (std::size_t i = 0; i <= dims.size(); ++i) {
    if (i < dims.size() && dims[i] != '+') continue;
    const std::string dim = dims.substr(from, i - from);
    from = i + 1;
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

std::vector<TransformStep> steps_from_text(const DTensorSpec& src,
                                           std::span<const std::string> texts,
                                           std::span<const std::int64_t> coordinate,
                                           const Topology& topology) {
  const MeshView v = check_and_view(src, src, coordinate);
  // The tensor as seen at each mesh dim, as the greedy planner's logical shapes.
  std::vector<Shape> logical = {src.shape};
  for (std::size_t i = 0; i + 1 < v.shape.size(); ++i) {
    logical.push_back(logical.back());
    if (src.placements[i].is_shard()) {
      std::int64_t& extent = logical.back()[static_cast<std::size_t>(src.placements[i].dim())];
      extent = chunk_range(extent, v.shape[i], v.coord[i]).length;
    }
  }
  Shape local = local_shard(src, v.coord).shape;
  std::vector<TransformStep> out;
  for (const std::string& text : texts) {
    TransformStep s = parse_step(src.mesh, v.shape, text);
    for (std::int64_t d : {s.src_tensor_dim, s.dst_tensor_dim}) {
      if (d >= static_cast<std::int64_t>(src.shape.size())) {
        throw Error(ErrorKind::value, "step '" + text + "': the tensor has " +
                                          std::to_string(src.shape.size()) + " dims");
      }
    }
    s.logical_shape = logical[static_cast<std::size_t>(s.mesh_dims.front())];
    if (s.merged()) s.flattened_name = lookup_flattened(src.mesh, &v.modes, s.mesh_dims).value_or("");
    fill_shapes(s, v, local, src.element_size);
    fill_cost(s, v, topology);
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
    const std::vector<TransformStep> steps = steps_from_text(src, texts, coord);
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

std::vector<TransformStep> merge_flattened_runs(
    const DeviceMesh& mesh, std::span<const Placement> src, std::span<const Placement> dst,
    const std::vector<TransformStep>& steps, std::vector<RunDecision>* runs,
    std::vector<PlanWarning>* warnings, std::int64_t element_size) {
  const FlatModes modes = flat_modes(mesh);
  return merge_pass(mesh, &modes, mesh.shape(), src, dst, steps, element_size, runs, warnings);
}

Plan plan_redistribute(const DTensorSpec& src, const DTensorSpec& dst,
                       std::span<const std::int64_t> coordinate, const PlanOptions& options) {
  const MeshView v = check_and_view(src, dst, coordinate);
  Plan plan;
  plan.unmerged = greedy(src, dst, v, options.api);
  for (TransformStep& s : plan.unmerged) fill_cost(s, v, options.topology);
  const bool optimize = options.optimize && transform_optimization_enabled();
  if (optimize) {
    plan.steps = merge_pass(src.mesh, &v.modes, v.shape, src.placements, dst.placements,
                            plan.unmerged, src.element_size, &plan.runs, &plan.warnings);
    for (TransformStep& s : plan.steps) {
      if (s.merged()) fill_cost(s, v, options.topology);
    }
  } else {
    plan.steps = plan.unmerged;
    record_unmerged_runs(plan.unmerged, &plan.runs);
  }
  plan.greedy_cost = total_cost(plan.steps);
  plan.cost = plan.greedy_cost;
  if (options.planner == Planner::min_cost && optimize && rank_independent_shapes(src, dst, v)) {
    // Two candidates: the greedy transforms with the cheapest merges, and the same after the
    // commuting rewrites. Keep the greedy plan on ties so min_cost only differs when strictly
    // cheaper.
    for (const std::vector<TransformStep>& start :
         {plan.unmerged, reorder_and_fuse(v, plan.unmerged, src.element_size, options.topology)}) {
      std::vector<TransformStep> candidate =
          min_cost_steps(src.mesh, v, start, src.element_size, options.topology);
      const double c = total_cost(candidate);
      if (c < plan.cost * (1 - 1e-12)) {
        plan.steps = std::move(candidate);
        plan.cost = c;
      }
    }
  }
  return plan;
}

namespace {

// Everything a plan depends on, compared structurally (no printing on the lookup path).
struct CacheKey {
  LayoutModel model;
  Layout layout;
  std::vector<std::string> names;
  std::vector<std::pair<std::string, Layout>> flattened;
  std::vector<Placement> src;
  std::vector<Placement> dst;
  Shape shape;
  std::int64_t element_size;
  std::vector<std::int64_t> coordinate;
  PlanOptions options;
  bool optimization_enabled;
  friend bool operator==(const CacheKey&, const CacheKey&) = default;
};

struct CacheKeyHash {
  std::size_t operator()(const CacheKey& k) const noexcept {
    std::size_t h = std::hash<Layout>{}(k.layout) ^ static_cast<std::size_t>(k.model);
    auto mix = [&h](std::size_t v) { h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2); };
    for (const std::string& n : k.names) mix(std::hash<std::string>{}(n));
    for (const auto& [name, layout] : k.flattened) mix(std::hash<Layout>{}(layout));
    for (const Placement& p : k.src) mix(std::hash<Placement>{}(p));
    for (const Placement& p : k.dst) mix(std::hash<Placement>{}(p)*3);
    for (std::int64_t s : k.shape) mix(static_cast<std::size_t>(s));
    for (std::int64_t c : k.coordinate) mix(static_cast<std::size_t>(c) * 7);
    mix(static_cast<std::size_t>(k.element_size));
    mix(static_cast<std::size_t>(k.options.optimize) |
        static_cast<std::size_t>(k.options.planner) << 1 |
        static_cast<std::size_t>(k.options.api) << 3 |
        static_cast<std::size_t>(k.optimization_enabled) << 5);
    return h;
  }
};

}  // namespace

std::shared_ptr<const Plan> cached_plan_redistribute(const DTensorSpec& src, const DTensorSpec& dst,
                                                     std::span<const std::int64_t> coordinate,
                                                     const PlanOptions& options) {
  static std::mutex mutex;
  static std::unordered_map<CacheKey, std::shared_ptr<const Plan>, CacheKeyHash> cache;
  CacheKey key{src.mesh.model(),
               src.mesh.layout(),
               src.mesh.names(),
               src.mesh.flattened(),
               src.placements,
               dst.placements,
               src.shape,
               src.element_size,
               {coordinate.begin(), coordinate.end()},
               options,
               transform_optimization_enabled()};
  if (key.coordinate.empty()) key.coordinate.assign(src.mesh.ndim(), 0);
  // Plans for a different mesh or tensor are refused by plan_redistribute below; the key only
  // has to separate what can plan.
  if (!(dst.mesh.layout() == key.layout && dst.mesh.names() == key.names &&
        dst.shape == key.shape && dst.element_size == key.element_size)) {
    return std::make_shared<const Plan>(plan_redistribute(src, dst, coordinate, options));
  }
  {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto plan = std::make_shared<const Plan>(plan_redistribute(src, dst, key.coordinate, options));
  std::lock_guard lock(mutex);
  // Bounded like an lru_cache: a sweep over many shapes must not grow memory without end.
  if (cache.size() >= 4096) cache.clear();
  return cache.emplace(key, std::move(plan)).first->second;
}

DisableTransformOptimization::DisableTransformOptimization() {
  ++g_disable_depth;
}
DisableTransformOptimization::~DisableTransformOptimization() {
  --g_disable_depth;
}
bool transform_optimization_enabled() {
  return g_disable_depth.load() == 0;
}

std::vector<PlanWarning> first_time_warnings(const DeviceMesh& mesh, const Plan& plan) {
  static std::mutex mutex;
  static std::set<std::tuple<std::string, std::vector<std::int64_t>, MergeReason>> warned;
  std::string mesh_key = to_string(mesh.layout());
  for (const std::string& n : mesh.names()) mesh_key += "|" + n;
  std::vector<PlanWarning> out;
  std::lock_guard lock(mutex);
  for (const PlanWarning& w : plan.warnings) {
    if (warned.emplace(mesh_key, w.mesh_dims, w.reason).second) out.push_back(w);
  }
  return out;
}

std::string to_string(const TransformStep& s, const DeviceMesh& mesh) {
  const std::string dims = dims_label(mesh, s.mesh_dims, "+");
  const std::string kind(to_string(s.kind));
  switch (s.kind) {
    case StepKind::all_reduce:
      return kind + "(" + dims + ", " + std::string(to_string(s.reduce_op)) + ")";
    case StepKind::reduce_scatter:
      return kind + "(" + dims + ", " + std::string(to_string(s.reduce_op)) +
             ", dim=" + std::to_string(s.dst_tensor_dim) + ")";
    case StepKind::all_gather:
      return kind + "(" + dims + ", dim=" + std::to_string(s.src_tensor_dim) + ")";
    case StepKind::all_to_all:
      return kind + "(" + dims + ", dim=" + std::to_string(s.src_tensor_dim) + "->" +
             std::to_string(s.dst_tensor_dim) + ")";
    case StepKind::local_chunk:
      return kind + "(" + dims + ", dim=" + std::to_string(s.dst_tensor_dim) + ")";
    case StepKind::local_partial:
      return kind + "(" + dims + ", " + std::string(to_string(s.reduce_op)) + ")";
  }
  return kind;
}

void check_comm_string_names(std::span<const std::string> names) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    const bool blank_end =
        !name.empty() && (std::isspace(static_cast<unsigned char>(name.front())) ||
                          std::isspace(static_cast<unsigned char>(name.back())));
    if (!name.empty() && name.find_first_of("+,()") == std::string::npos && !blank_end) continue;
    throw Error(
        ErrorKind::value,
        "mesh dim " + std::to_string(i) + " is named '" + name +
            "', which a comm string such as all_reduce(A+B, sum) cannot name unambiguously: "
            "give every dim a non-empty name without '+', ',', '(', ')' or blanks at its ends");
  }
}

std::vector<std::string> comm_strings(const std::vector<TransformStep>& steps,
                                      const DeviceMesh& mesh) {
  std::vector<std::string> out;
  for (const TransformStep& s : steps) {
    if (is_collective(s.kind) && s.group_size > 1) out.push_back(to_string(s, mesh));
  }
  return out;
}

}  // namespace meshgate
