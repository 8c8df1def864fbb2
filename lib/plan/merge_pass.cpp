#include "plan/merge_pass.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "core/error.hpp"
#include "core/small_vector.hpp"
#include "plan/mesh_view.hpp"

namespace meshgate {
namespace plan_internal {
namespace {

std::int64_t product(std::span<const std::int64_t> v) {
  std::int64_t p = 1;
  for (std::int64_t x : v) p *= x;
  return p;
}

// Partials of these ops add up, so a sum run and an avg run merge into one sum (and a division).
bool linear(ReduceOp op) {
  return op == ReduceOp::sum || op == ReduceOp::avg;
}

// are_placements_mergeable: equal placements, or sum/avg partials to the same target.
bool mergeable_pair(const TransformStep& a, const TransformStep& b) {
  if (a.src == b.src && a.dst == b.dst) return true;
  return a.dst == b.dst && a.src.is_partial() && b.src.is_partial() && linear(a.src.reduce_op()) &&
         linear(b.src.reduce_op());
}

// The text of _warn_flatten_optimization_not_possible for a run that did not merge.
std::string warning_message(const DeviceMesh& mesh, std::span<const Placement> src,
                            std::span<const Placement> dst, std::span<const std::int64_t> dims,
                            std::size_t count, StepKind kind, MergeReason reason) {
  std::string quoted;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    quoted += (i ? ", \"" : "\"") + comm_dim_name(mesh, dims[i]) + "\"";
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

}  // namespace

bool mergeable_kind(StepKind k) {
  return k == StepKind::all_reduce || k == StepKind::reduce_scatter || k == StepKind::all_gather;
}

std::size_t run_end(std::span<const TransformStep> steps, std::size_t begin) {
  std::size_t end = begin + 1;
  while (end < steps.size() && mergeable_kind(steps[end].kind) &&
         mergeable_pair(steps[begin], steps[end])) {
    ++end;
  }
  return end;
}

MergeResult try_merge(const DeviceMesh& mesh, std::span<const LayoutLeaf> dim_leaves,
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
  StepDims sorted;
  for (const TransformStep& s : run) sorted.push_back(s.mesh_dims.front());
  std::sort(sorted.begin(), sorted.end());
  std::optional<std::string> flat = find_flattened(mesh, dim_leaves, sorted);
  if (!flat) return {std::nullopt, MergeReason::no_flattened_mesh};

  std::int64_t n = 1;
  // Scratch, inline for up to 16 dims: this runs for every run the pass may merge.
  SmallVector<std::int64_t, 16> sizes;
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
      // The reference's rule (docs/kinds.md, uneven_tensor_shape): the outermost logical size must
      // divide by the run's group, even where the uneven splits would coincide (7 rows over 2x4).
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

void fill_merged_shapes(TransformStep& m, std::span<const TransformStep> run, std::int64_t es) {
  m.input_shape = run.front().input_shape;
  m.output_shape = run.back().output_shape;
  const std::int64_t n = m.group_size;
  switch (m.kind) {
    case StepKind::all_reduce:
      m.bytes = numel(m.input_shape) * es;
      break;
    case StepKind::reduce_scatter: {
      StepShape padded = m.input_shape;
      const auto d = static_cast<std::size_t>(m.dst_tensor_dim);
      padded[d] = padded_chunk(padded[d], n) * n;
      m.bytes = numel(padded) * es;
      break;
    }
    case StepKind::all_gather: {
      StepShape gathered = m.input_shape;
      const auto d = static_cast<std::size_t>(m.src_tensor_dim);
      gathered[d] = padded_chunk(m.logical_shape[d], n) * n;
      m.bytes = numel(gathered) * es;
      break;
    }
    default:
      break;
  }
}

namespace {

// The decision record of the run [begin, end) of `steps`.
RunDecision run_decision(std::span<const TransformStep> steps, std::size_t begin,
                         std::size_t end, MergeReason reason) {
  RunDecision d;
  d.kind = steps[begin].kind;
  d.mesh_dims.reserve(end - begin);
  d.steps.reserve(end - begin);
  for (std::size_t k = begin; k < end; ++k) {
    d.mesh_dims.push_back(steps[k].mesh_dims.front());
    d.steps.push_back(k);
  }
  d.reason = reason;
  return d;
}

}  // namespace

void record_unmerged_runs(std::span<const TransformStep> steps, std::vector<RunDecision>* runs) {
  if (!runs) return;
  for_each_run(
      steps, [](std::size_t) {},
      [&](std::size_t i, std::size_t j) {
        runs->push_back(run_decision(steps, i, j,
                                     j - i >= 2 ? MergeReason::optimization_disabled
                                                : MergeReason::too_few_transforms));
      });
}

void merge_runs(const DeviceMesh& mesh, std::span<const LayoutLeaf> dim_leaves,
                std::span<const std::int64_t> shape, std::span<const Placement> src,
                std::span<const Placement> dst, std::span<const TransformStep> steps,
                std::int64_t es, std::vector<RunDecision>* runs,
                std::vector<PlanWarning>* warnings, StepList& out) {
  if (steps.size() < 2 || !transform_optimization_enabled()) {
    if (steps.size() >= 2) record_unmerged_runs(steps, runs);
    out.append(steps.begin(), steps.end());
    return;
  }
  const auto keep = [&](std::size_t i) { out.push_back(steps[i]); };
  const auto merge = [&](std::size_t i, std::size_t j) {
    const std::span<const TransformStep> run(steps.data() + i, j - i);
    MergeResult r{std::nullopt, MergeReason::too_few_transforms};
    if (run.size() >= 2) r = try_merge(mesh, dim_leaves, run, shape);
    if (r.step) {
      fill_merged_shapes(*r.step, run, es);
      out.push_back(std::move(*r.step));
    } else {
      out.append(run.begin(), run.end());
    }
    if (runs) {
      runs->push_back(run_decision(steps, i, j, r.reason));
      if (r.reason == MergeReason::merged) runs->back().flattened_name = out.back().flattened_name;
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
  };
  for_each_run(steps, keep, merge);
}

}  // namespace plan_internal

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

StepList merge_flattened_runs(const DeviceMesh& mesh, std::span<const Placement> src,
                              std::span<const Placement> dst, std::span<const TransformStep> steps,
                              std::vector<RunDecision>* runs, std::vector<PlanWarning>* warnings,
                              std::int64_t element_size) {
  StepList out;
  plan_internal::merge_runs(mesh, mesh.single_leaf_dims(), mesh.shape(), src, dst, steps,
                            element_size, runs, warnings, out);
  return out;
}

namespace {

// Nesting depth of the live DisableTransformOptimization guards.
std::atomic<int> g_disable_depth{0};

}  // namespace

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

}  // namespace meshgate
