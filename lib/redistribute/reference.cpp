#include "redistribute/reference.hpp"

#include <algorithm>
#include <vector>

namespace meshgate {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The row-major index over the mesh dims for which `pick` holds, and the group's size.
template <class Pred>
std::pair<std::int64_t, std::int64_t> index_over(std::span<const std::int64_t> mesh_shape,
                                                 std::span<const Placement> placements,
                                                 std::span<const std::int64_t> coordinate,
                                                 Pred pick) {
  std::int64_t idx = 0, size = 1;
  for (std::size_t m = 0; m < mesh_shape.size(); ++m) {
    if (!pick(placements[m])) continue;
    idx = idx * mesh_shape[m] + coordinate[m];
    size *= mesh_shape[m];
  }
  return {idx, size};
}

}  // namespace

HostTensor make_global_tensor(const Shape& shape, comm::DType dtype, std::int64_t scale,
                              std::uint64_t seed) {
  HostTensor t = HostTensor::zeros(shape, dtype);
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto v = static_cast<std::int64_t>(
                       mix(seed * 0x100000001B3ull + static_cast<std::uint64_t>(i)) % 17) -
                   8;
    t.set(i, static_cast<double>(v * scale));
  }
  return t;
}

HostTensor target_shard(const HostTensor& global, std::span<const std::int64_t> mesh_shape,
                        std::span<const Placement> placements,
                        std::span<const std::int64_t> coordinate) {
  const LocalShard shard = local_shard(mesh_shape, placements, global.shape, coordinate);
  HostTensor out = HostTensor::zeros(shard.shape, global.dtype);
  const Shape zero(global.shape.size(), 0);
  copy_box(global, shard.offset, out, zero, shard.shape);
  return out;
}

HostTensor source_local_tensor(const HostTensor& global, std::span<const std::int64_t> mesh_shape,
                               std::span<const Placement> placements,
                               std::span<const std::int64_t> coordinate, std::int64_t scale) {
  HostTensor local = target_shard(global, mesh_shape, placements, coordinate);
  ReduceOp op = ReduceOp::sum;
  bool any_partial = false;
  for (const Placement& p : placements) {
    if (p.is_partial()) {
      any_partial = true;
      if (p.reduce_op() != ReduceOp::avg) op = p.reduce_op();
    }
  }
  if (!any_partial) return local;
  const std::int64_t n = local.numel();
  // Which rank of a group of `size` holds element i's distinguished share. It varies from
  // element to element without a period, so that each rank's local extremes lie elsewhere than
  // the global ones: an op that reads a Partial tensor's local values (an argmax of local
  // indices, a reduction before the reduce) gives wrong answers instead of the right ones by
  // luck. The ranks of one group hold the same shard, so `i` names the same element on each.
  const auto holder = [](std::int64_t i, std::int64_t size, std::uint64_t salt) {
    return static_cast<std::int64_t>(mix(static_cast<std::uint64_t>(i) ^ salt) %
                                     static_cast<std::uint64_t>(size));
  };
  if (op == ReduceOp::sum) {
    // Sum dims split the value; avg dims add +scale at one rank of the group and -scale at the
    // next, which cancel in the average (and in the sum a merged sum/avg run takes before it
    // divides), so that contributions differ along avg dims too: an avg that keeps the local
    // value, or reduces by another op, gives wrong values.
    const auto [k, g] = index_over(mesh_shape, placements, coordinate, [](const Placement& p) {
      return p.is_partial() && p.reduce_op() == ReduceOp::sum;
    });
    const auto [ka, ga] = index_over(mesh_shape, placements, coordinate, [](const Placement& p) {
      return p.is_partial() && p.reduce_op() == ReduceOp::avg;
    });
    if (g == 1 && ga == 1) return local;
    const auto s = static_cast<double>(scale);
    const auto offset = [&](std::int64_t i, std::int64_t rank, std::int64_t size,
                            std::uint64_t salt) {
      if (size == 1) return 0.0;
      const std::int64_t plus = holder(i, size, salt);
      return rank == plus ? s : rank == (plus + 1) % size ? -s : 0.0;
    };
    for (std::int64_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::int64_t>(local.get(i));
      local.set(i, static_cast<double>(v / g) + offset(i, k, g, 0) + offset(i, ka, ga, 1));
    }
    return local;
  }
  const auto [k, g] = index_over(mesh_shape, placements, coordinate,
                                 [](const Placement& p) { return p.is_partial(); });
  if (g == 1 || n == 0) return local;
  // One rank holds the value; the others hold what cannot win the reduction: the shard's
  // smallest value under max, its largest under min, 1 under product. All are exact.
  double lowest = local.get(0), highest = local.get(0);
  for (std::int64_t i = 1; i < n; ++i) {
    lowest = std::min(lowest, local.get(i));
    highest = std::max(highest, local.get(i));
  }
  const double stand_in = op == ReduceOp::max   ? lowest
                          : op == ReduceOp::min ? highest
                                                : 1.0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (holder(i, g, 0) != k) local.set(i, stand_in);
  }
  return local;
}

}  // namespace meshgate
