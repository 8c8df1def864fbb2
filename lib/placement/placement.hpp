#pragma once
// DTensor placements (torch/distributed/tensor/placement_types.py) as small immutable values,
// the spec of a distributed tensor (mesh + placements + global shape) and torch.chunk shard
// arithmetic. See docs/kinds.md, Placements. Pure host code: nothing enumerates ranks.
#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/reduce_op.hpp"
#include "mesh/device_mesh.hpp"

namespace meshgate {

// Shard(d), Replicate() or Partial(op): 8 bytes, trivially copyable, ordered and hashable.
class Placement {
 public:
  enum class Kind : std::uint8_t { shard, replicate, partial };

  // Shard on tensor dim `dim` (negative dims are normalised by DTensorSpec::create).
  static constexpr Placement shard(std::int32_t dim) { return Placement(Kind::shard, dim, {}); }
  static constexpr Placement replicate() { return Placement(Kind::replicate, 0, {}); }
  static constexpr Placement partial(ReduceOp op = ReduceOp::sum) {
    return Placement(Kind::partial, 0, op);
  }

  constexpr Kind kind() const { return kind_; }
  constexpr bool is_shard() const { return kind_ == Kind::shard; }
  constexpr bool is_shard(std::int64_t dim) const { return is_shard() && dim_ == dim; }
  constexpr bool is_replicate() const { return kind_ == Kind::replicate; }
  constexpr bool is_partial() const { return kind_ == Kind::partial; }
  // The tensor dim of a Shard; Error(assertion) on other kinds. Inline: the planner reads it
  // for every step.
  std::int64_t dim() const {
    if (!is_shard()) throw_wrong_kind("dim");
    return dim_;
  }
  // The reduce op of a Partial; Error(assertion) on other kinds.
  ReduceOp reduce_op() const {
    if (!is_partial()) throw_wrong_kind("reduce_op");
    return op_;
  }

  friend constexpr bool operator==(const Placement&, const Placement&) = default;
  friend constexpr auto operator<=>(const Placement&, const Placement&) = default;

 private:
  constexpr Placement(Kind kind, std::int32_t dim, ReduceOp op) : kind_(kind), op_(op), dim_(dim) {}
  [[noreturn]] void throw_wrong_kind(std::string_view accessor) const;
  Kind kind_;
  ReduceOp op_;       // sum unless partial
  std::int32_t dim_;  // 0 unless shard
};

// Short form used in plan strings: "S(0)", "R", "P(sum)".
std::string to_string(const Placement& p);
// Long form used in logs and messages: "Shard(dim=0)", "Replicate()", "Partial(sum)".
std::string to_long_string(const Placement& p);
// Either form, plus "Shard(0)", "Partial()", "Partial(reduce_op=sum)", "P" (= P(sum)),
// "Replicate" and surrounding blanks. Error(value) with the text and the accepted forms.
Placement parse_placement(std::string_view text);
// A comma-separated list, optionally in [] or (): "P(sum),R,S(0)" or "[S(0), R]".
// Error(value) naming the bad item and its position.
std::vector<Placement> parse_placements(std::string_view text);
// "(P(sum), R, S(0))" (short forms) or "(Partial(sum), Replicate(), Shard(dim=0))" (long).
std::string to_string(std::span<const Placement> ps, bool long_form = false);

// assert_no_mixed_partial_types: all Partial placements share one reduce op, except that sum
// and avg may be mixed. Error(value) listing the ops otherwise.
void check_no_mixed_partial_types(std::span<const Placement> ps);

// ---- torch.chunk shard arithmetic ----

// The piece of `size` elements that rank `index` of `parts` gets under torch.chunk: with
// full = ceil(size/parts), offset = min(size, full*index) and length max(0, min(size, offset
// + full) - offset). 13 over 4: 4,4,4,1; 2 over 4: 1,1,0,0; 4 over 6: 1,1,1,1,0,0.
struct ChunkRange {
  std::int64_t offset = 0;
  std::int64_t length = 0;
  friend bool operator==(const ChunkRange&, const ChunkRange&) = default;
};
// Error(value) for chunk_range's arguments out of range.
[[noreturn]] void throw_bad_chunk(std::int64_t size, std::int64_t parts, std::int64_t index);

// ceil(size/parts): the padded piece every rank sends in a collective.
inline std::int64_t padded_chunk(std::int64_t size, std::int64_t parts) {
  // Not (size + parts - 1) / parts, which overflows for sizes near the int64 maximum.
  return parts <= 0 ? size : size / parts + (size % parts > 0 ? 1 : 0);
}

// Inline, as the planner asks for several per step. Error(value) unless size >= 0 and
// 0 <= index < parts.
inline ChunkRange chunk_range(std::int64_t size, std::int64_t parts, std::int64_t index) {
  if (parts < 1 || index < 0 || index >= parts || size < 0) throw_bad_chunk(size, parts, index);
  const std::int64_t full = padded_chunk(size, parts);
  // Past the end (full * index > size) without computing a product that may pass the int64
  // maximum for sizes near it.
  if (index > 0 && full > size / index) return {size, 0};
  const std::int64_t start = full * index;
  if (start >= size) return {size, 0};
  return {start, std::min(full, size - start)};
}

using Shape = std::vector<std::int64_t>;

// What a spec's tensor bytes times its mesh's ranks may be at most: 2^62, so that plans count
// every collective's buffer, padded to whole chunks for its group, in int64.
inline constexpr std::int64_t kMaxPlannedBytes = std::int64_t{1} << 62;

// A distributed tensor's spec: mesh, one placement per mesh dim, global shape, element size.
struct DTensorSpec {
  DeviceMesh mesh;
  std::vector<Placement> placements;
  Shape shape;
  std::int64_t element_size = 4;  // bytes per element (float32 by default)

  // Checks: one placement per mesh dim, shard dims within the tensor rank (negative dims
  // normalised as the reference does), non-negative sizes, bytes (sizes of 0 counted as 1)
  // times the mesh's ranks at most kMaxPlannedBytes, no mixed partial types. Error(value)
  // naming the offending item otherwise.
  static DTensorSpec create(DeviceMesh mesh, std::vector<Placement> placements, Shape shape,
                            std::int64_t element_size = 4);

  // Same mesh layout and names, placements, shape and element size (the rank map is not
  // compared: plans do not depend on it).
  friend bool operator==(const DTensorSpec& a, const DTensorSpec& b);
};

// The local shape and global offset of the shard held at mesh coordinate `coordinate`
// (one entry per mesh dim): the placements' chunking applied mesh dim by mesh dim, left to
// right, as compute_local_shape_and_global_offset. Error(value) on a coordinate out of range.
struct LocalShard {
  Shape shape;
  Shape offset;
  friend bool operator==(const LocalShard&, const LocalShard&) = default;
};
LocalShard local_shard(std::span<const std::int64_t> mesh_shape,
                       std::span<const Placement> placements, std::span<const std::int64_t> shape,
                       std::span<const std::int64_t> coordinate);
LocalShard local_shard(const DTensorSpec& spec, std::span<const std::int64_t> coordinate);

// Product of the sizes of the mesh dims that shard (the reference's num_shards).
std::int64_t num_shards(std::span<const std::int64_t> mesh_shape,
                        std::span<const Placement> placements);

}  // namespace meshgate

template <>
struct std::hash<meshgate::Placement> {
  std::size_t operator()(const meshgate::Placement& p) const noexcept {
    const auto k = static_cast<std::size_t>(p.kind());
    const std::size_t extra = p.is_shard()     ? static_cast<std::size_t>(p.dim())
                              : p.is_partial() ? static_cast<std::size_t>(p.reduce_op())
                                               : 0;
    return (k << 32) ^ (extra * 0x9E3779B97F4A7C15ull);
  }
};
