#pragma once
// The executor's host tensors (redistribute.hpp): a contiguous row-major tensor and the copies,
// pieces and divisions the redistribution steps make of it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "comm/communicator.hpp"
#include "placement/placement.hpp"

namespace meshgate {

// A contiguous row-major host tensor: shape, dtype and bytes. Enough for the executor and its
// checks; float16/bfloat16 are stored as their 16-bit patterns.
struct HostTensor {
  Shape shape;
  comm::DType dtype = comm::DType::f32;
  std::vector<std::byte> data;

  // A zero-filled tensor. Error(value) on a negative size.
  static HostTensor zeros(Shape shape, comm::DType dtype);
  std::int64_t numel() const;
  std::size_t element_size() const { return comm::element_size(dtype); }
  std::size_t bytes() const { return data.size(); }

  // Element `i` (flat index) read as / written from a double; exact for integer values that the
  // dtype represents exactly.
  double get(std::int64_t i) const;
  void set(std::int64_t i, double value);

  // Same shape, dtype and bytes (bitwise: replicas must agree to the last bit).
  friend bool operator==(const HostTensor&, const HostTensor&) = default;
};

// Copies the box of extents `extent` at `src_offset` in `src` to `dst_offset` in `dst` (same
// rank and dtype). Error(value) when the box leaves either tensor.
void copy_box(const HostTensor& src, std::span<const std::int64_t> src_offset, HostTensor& dst,
              std::span<const std::int64_t> dst_offset, std::span<const std::int64_t> extent);
// The piece [offset, offset + length) of `t` along `dim`, as a new tensor.
HostTensor narrow(const HostTensor& t, std::int64_t dim, std::int64_t offset, std::int64_t length);
// Divides every element by `divisor` (floating dtypes: rounded once to the dtype; integer
// dtypes: truncated, as C++ division).
void divide(HostTensor& t, std::int64_t divisor);

// The DType of a dtype name as written in case files ("float32", "bfloat16", "int64", ...).
comm::DType parse_tensor_dtype(std::string_view text);

}  // namespace meshgate
