#include "plan/greedy.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace meshgate {
namespace plan_internal {
namespace {

std::string placement_pair(const Placement& a, const Placement& b) {
  return to_long_string(a) + " to " + to_long_string(b);
}

// One transform of the greedy planner: (mesh dim m, cur -> tgt), with the op-table errors,
// written into the fresh step `s` (built in place: a step is a few hundred bytes).
void make_step(TransformStep& s, const MeshView& v, std::int64_t m, Placement cur,
               Placement tgt, std::span<const std::int64_t> logical,
               std::span<const std::int64_t> input, std::int64_t es) {
  s.mesh_dims = {m};
  s.src = cur;
  s.dst = tgt;
  s.group_size = v.shape[static_cast<std::size_t>(m)];
  s.logical_shape.assign(logical);
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
}

}  // namespace

void greedy_steps(const DTensorSpec& src, const DTensorSpec& dst, const MeshView& v, Api api,
                  StepList& out) {
  const std::vector<Placement>& sp = src.placements;
  const std::vector<Placement>& dp = dst.placements;
  const std::size_t nd = sp.size();
  if (sp == dp) return;
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
  // rank. One flat buffer, inline for small meshes and tensors: planning is on the hot path of
  // every redistribution.
  const std::size_t rank = src.shape.size();
  SmallVector<std::int64_t, 32> logical;
  logical.resize_for_overwrite(nd * rank);
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
  StepShape local(logical_row(nd - 1));
  if (sp[nd - 1].is_shard()) {
    std::int64_t& extent = local[static_cast<std::size_t>(sp[nd - 1].dim())];
    extent = chunk_range(extent, v.shape[nd - 1], v.coord[nd - 1]).length;
  }
  out.reserve(out.size() + nd);
  InlineVector<Placement, 8> cur(sp.begin(), sp.end());
  auto emit = [&](std::size_t m, Placement tgt) {
    make_step(out.emplace_back(), v, static_cast<std::int64_t>(m), cur[m], tgt, logical_row(m),
              local, src.element_size);
    local = out.back().output_shape;
    cur[m] = tgt;
  };
  if (nd == 1) {
    emit(0, dp[0]);
    return;
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
}

}  // namespace plan_internal

StepList greedy_transforms(const DTensorSpec& src, const DTensorSpec& dst,
                           std::span<const std::int64_t> coordinate, Api api) {
  const plan_internal::MeshView v = plan_internal::check_and_view(src, dst, coordinate);
  StepList out;
  plan_internal::greedy_steps(src, dst, v, api, out);
  return out;
}

}  // namespace meshgate
