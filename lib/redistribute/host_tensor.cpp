#include "redistribute/host_tensor.hpp"

#include <cstring>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "core/half_float.hpp"
#include "redistribute/detail.hpp"

namespace meshgate {

using redistribute_detail::copy_bytes;
using redistribute_detail::product;
using redistribute_detail::shape_string;

HostTensor HostTensor::zeros(Shape shape, comm::DType dtype) {
  for (std::int64_t s : shape) {
    if (s < 0) {
      throw Error(ErrorKind::value, "tensor shape " + shape_string(shape) + " has a negative size");
    }
  }
  HostTensor t;
  t.dtype = dtype;
  t.data.assign(static_cast<std::size_t>(product(shape)) * comm::element_size(dtype), std::byte{0});
  t.shape = std::move(shape);
  return t;
}

std::int64_t HostTensor::numel() const {
  return product(shape);
}

double HostTensor::get(std::int64_t i) const {
  const std::byte* p = data.data() + static_cast<std::size_t>(i) * element_size();
  switch (dtype) {
    case comm::DType::f32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case comm::DType::f64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case comm::DType::f16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return half_to_float(v);
    }
    case comm::DType::bf16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_float(v);
    }
    case comm::DType::i32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case comm::DType::i64: {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case comm::DType::i8: {
      std::int8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case comm::DType::u8: {
      std::uint8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
  }
  return 0;
}

void HostTensor::set(std::int64_t i, double value) {
  std::byte* p = data.data() + static_cast<std::size_t>(i) * element_size();
  switch (dtype) {
    case comm::DType::f32: {
      const auto v = static_cast<float>(value);
      std::memcpy(p, &v, 4);
      break;
    }
    case comm::DType::f64:
      std::memcpy(p, &value, 8);
      break;
    case comm::DType::f16: {
      const std::uint16_t v = float_to_half(static_cast<float>(value));
      std::memcpy(p, &v, 2);
      break;
    }
    case comm::DType::bf16: {
      const std::uint16_t v = float_to_bf16(static_cast<float>(value));
      std::memcpy(p, &v, 2);
      break;
    }
    case comm::DType::i32: {
      const auto v = static_cast<std::int32_t>(value);
      std::memcpy(p, &v, 4);
      break;
    }
    case comm::DType::i64: {
      const auto v = static_cast<std::int64_t>(value);
      std::memcpy(p, &v, 8);
      break;
    }
    case comm::DType::i8: {
      const auto v = static_cast<std::int8_t>(value);
      std::memcpy(p, &v, 1);
      break;
    }
    case comm::DType::u8: {
      const auto v = static_cast<std::uint8_t>(value);
      std::memcpy(p, &v, 1);
      break;
    }
  }
}

void copy_box(const HostTensor& src, std::span<const std::int64_t> src_offset, HostTensor& dst,
              std::span<const std::int64_t> dst_offset, std::span<const std::int64_t> extent) {
  const std::size_t nd = src.shape.size();
  if (dst.shape.size() != nd || src_offset.size() != nd || dst_offset.size() != nd ||
      extent.size() != nd || src.dtype != dst.dtype) {
    throw Error(ErrorKind::value,
                "copy_box: tensors, offsets and extent need the same rank and dtype");
  }
  for (std::size_t d = 0; d < nd; ++d) {
    if (extent[d] == 0) return;
    if (extent[d] < 0 || src_offset[d] < 0 || dst_offset[d] < 0 ||
        src_offset[d] + extent[d] > src.shape[d] || dst_offset[d] + extent[d] > dst.shape[d]) {
      throw Error(ErrorKind::value, "copy_box: box " + shape_string(extent) + " at " +
                                        shape_string(src_offset) + " -> " +
                                        shape_string(dst_offset) + " leaves " +
                                        shape_string(src.shape) + " or " + shape_string(dst.shape));
    }
  }
  const auto es = static_cast<std::int64_t>(src.element_size());
  if (nd == 0) {
    std::memcpy(dst.data.data(), src.data.data(), static_cast<std::size_t>(es));
    return;
  }
  // Row-major strides in bytes; the innermost dim is one contiguous memcpy per row.
  std::vector<std::int64_t> ss(nd), ds(nd);
  ss[nd - 1] = es;
  ds[nd - 1] = es;
  for (std::size_t d = nd - 1; d-- > 0;) {
    ss[d] = ss[d + 1] * src.shape[d + 1];
    ds[d] = ds[d + 1] * dst.shape[d + 1];
  }
  std::int64_t sbase = 0, dbase = 0;
  for (std::size_t d = 0; d < nd; ++d) {
    sbase += src_offset[d] * ss[d];
    dbase += dst_offset[d] * ds[d];
  }
  const auto row = static_cast<std::size_t>(extent[nd - 1] * es);
  std::vector<std::int64_t> idx(nd, 0);
  const std::byte* s = src.data.data();
  std::byte* t = dst.data.data();
  while (true) {
    std::int64_t so = sbase, dof = dbase;
    for (std::size_t d = 0; d + 1 < nd; ++d) {
      so += idx[d] * ss[d];
      dof += idx[d] * ds[d];
    }
    copy_bytes(t + dof, s + so, row);
    std::size_t d = nd - 1;
    while (d-- > 0) {
      if (++idx[d] < extent[d]) break;
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

HostTensor narrow(const HostTensor& t, std::int64_t dim, std::int64_t offset, std::int64_t length) {
  Shape shape = t.shape;
  shape[static_cast<std::size_t>(dim)] = length;
  HostTensor out = HostTensor::zeros(shape, t.dtype);
  Shape so(t.shape.size(), 0);
  so[static_cast<std::size_t>(dim)] = offset;
  const Shape zero(t.shape.size(), 0);
  copy_box(t, so, out, zero, shape);
  return out;
}

void divide(HostTensor& t, std::int64_t divisor) {
  const std::int64_t n = t.numel();
  if (comm::is_floating(t.dtype)) {
    for (std::int64_t i = 0; i < n; ++i) t.set(i, t.get(i) / static_cast<double>(divisor));
    return;
  }
  // Integers in their own width: a detour through double would round int64 beyond 2^53.
  auto in_place = [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t i = 0; i < n; ++i) {
      T v;
      std::byte* p = t.data.data() + static_cast<std::size_t>(i) * sizeof(T);
      std::memcpy(&v, p, sizeof(T));
      v = static_cast<T>(v / divisor);
      std::memcpy(p, &v, sizeof(T));
    }
  };
  switch (t.dtype) {
    case comm::DType::i32:
      in_place(std::int32_t{});
      break;
    case comm::DType::i64:
      in_place(std::int64_t{});
      break;
    case comm::DType::i8:
      in_place(std::int8_t{});
      break;
    default:
      in_place(std::uint8_t{});
      break;
  }
}

comm::DType parse_tensor_dtype(std::string_view text) {
  const comm::DType d = comm::parse_dtype(text);
  if (d == comm::DType::i8 || d == comm::DType::u8) {
    throw Error(ErrorKind::value, "tensor dtype '" + std::string(text) +
                                      "' is not supported by the redistribute executor: use "
                                      "float32, float64, float16, bfloat16, int32 or int64");
  }
  return d;
}

}  // namespace meshgate
