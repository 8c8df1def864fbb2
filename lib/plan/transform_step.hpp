#pragma once
// One step of a redistribution plan (TransformStep) and the kinds of step: the unit that the
// planner's passes produce, the comm-string contract writes out and the executor runs.
#include <cstdint>
#include <string>
#include <string_view>
#include "core/inline_vector.hpp"
#include "core/small_vector.hpp"
#include "placement/placement.hpp"

namespace meshgate {

// What a step does. Collectives are the reference's _comm_type_key; the rest are local.
enum class StepKind : std::uint8_t {
  all_reduce,      // P(op) -> R
  reduce_scatter,  // P(op) -> S(d)
  all_gather,      // S(d) -> R
  all_to_all,      // S(a) -> S(b)
  local_chunk,     // R -> S(d): take this rank's torch.chunk piece
  local_partial,   // R -> P(op): divide by the group size for sum, identity otherwise
};
std::string_view to_string(StepKind kind);
bool is_collective(StepKind kind);

// A step's mesh dims and tensor shapes, inline up to 6 entries: a plan is made before every
// redistribution, and its steps are built, copied and merged without touching the heap.
using StepDims = SmallVector<std::int64_t, 6>;
using StepShape = SmallVector<std::int64_t, 6>;

// One transform: one collective or local op on one mesh dim, or, after the merge pass, one
// collective on the flattened group of a run of dims.
struct TransformStep {
  // User-provided, so that a value-initialized step (`emplace_back()`) runs the member
  // initializers alone instead of zeroing its few hundred bytes first.
  TransformStep() {}

  StepKind kind = StepKind::local_chunk;
  // Mesh dims of the current mesh. One dim, or a merged run's dims in ascending order (the
  // reference's original_mesh_dims); the flattened group is row-major over them.
  StepDims mesh_dims;
  Placement src = Placement::replicate();  // per-dim placements; a merged sum/avg run: P(sum)
  Placement dst = Placement::replicate();
  // The reduce op the collective performs (reductions only; sum for a merged sum/avg mix).
  ReduceOp reduce_op = ReduceOp::sum;
  // After a merged reduction: divide the result by this (the product of its avg dims' sizes).
  // A merged run with any avg member reduces with sum (unlike the reference, also when its avg
  // dims all have size 1, where an avg over the group would divide by the sum dims' size).
  std::int64_t avg_scale = 1;
  // Tensor dims: the gathered dim (all_gather), the scattered dim (reduce_scatter,
  // local_chunk), src -> dst dims (all_to_all); -1 when unused.
  std::int64_t src_tensor_dim = -1;
  std::int64_t dst_tensor_dim = -1;
  std::int64_t group_size = 1;  // product of the sizes of mesh_dims
  // The tensor shape as seen at this mesh dim (the outermost run member's for a merged step),
  // which says how much to pad and trim for uneven shards.
  StepShape logical_shape;
  StepShape input_shape;   // this rank's local shape before the step
  StepShape output_shape;  // and after it
  // Bytes of the collective's full buffer on this rank in the nccl-tests convention, padding
  // included (all_gather: gathered output, reduce_scatter: input); 0 for local steps.
  std::int64_t bytes = 0;
  std::string flattened_name;  // the registered flattened dim a merged step runs on
  double modeled_time = 0;     // seconds under PlanOptions::topology (0 for local steps)

  bool merged() const { return mesh_dims.size() > 1; }
  friend bool operator==(const TransformStep&, const TransformStep&) = default;
};

// A plan's steps: up to four inline, which covers the plans of meshes of up to four dims, so
// that planning allocates nothing for them.
using StepList = InlineVector<TransformStep, 4>;

}  // namespace meshgate
