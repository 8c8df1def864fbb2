#pragma once
// Exact inputs and references for checking a redistribution: a deterministic global tensor of
// integer values, each rank's source local tensor (its shard, and for Partial placements a
// contribution whose reduction over the partial dims is exactly the global value), and the
// target shard. Shared by the executor's tests and the `redistribute` case kind.
#include <cstdint>
#include <span>

#include "placement/placement.hpp"
#include "redistribute/redistribute.hpp"

namespace meshgate {

// A global tensor of integers in [-8, 8] times `scale`, generated from (seed, index). With
// `scale` = the mesh size every division by a product of mesh dim sizes is exact, and every
// value (and every partial sum of contributions) is exact in all supported dtypes for meshes
// of up to 32 ranks (bfloat16 holds integers up to 256 exactly).
HostTensor make_global_tensor(const Shape& shape, comm::DType dtype, std::int64_t scale,
                              std::uint64_t seed = 0);

// The local tensor at mesh coordinate `coordinate` for `placements`: the torch.chunk shard of
// `global` on the Shard dims; on the Partial dims a contribution such that reducing over those
// dims gives `global` exactly. Which rank of a Partial group plays which part varies from
// element to element (a hash of the element's index), so no rank's local extremes are the
// global ones by construction:
//   sum:  the value split into integers (v/g, plus `scale` at one rank of the sum dims' group
//         of size g and minus `scale` at the next), so that they add up exactly;
//   avg:  every rank holds its sum-split value plus an offset along the avg dims: +scale at
//         one rank of the avg group, -scale at the next, 0 elsewhere (they cancel in the
//         average, so contributions differ but reduce exactly);
//   max:  one rank of the group holds the value, the others the shard's smallest value;
//   min:  likewise with the shard's largest value; product: one rank the value, the others 1.
// Requires the global values to be multiples of the sum dims' group size (make_global_tensor).
HostTensor source_local_tensor(const HostTensor& global, std::span<const std::int64_t> mesh_shape,
                               std::span<const Placement> placements,
                               std::span<const std::int64_t> coordinate, std::int64_t scale);

// The torch.chunk shard of `global` at `coordinate` on the Shard dims of `placements` (the
// other dims hold the whole tensor): what a correct redistribution to Shard/Replicate dims ends
// with, and what the reduction over the Partial dims of a Partial target must give.
HostTensor target_shard(const HostTensor& global, std::span<const std::int64_t> mesh_shape,
                        std::span<const Placement> placements,
                        std::span<const std::int64_t> coordinate);

}  // namespace meshgate
