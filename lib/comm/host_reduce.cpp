#include "comm/host_reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/half_float.hpp"

namespace meshgate::comm {
namespace {

// Storage type T, accumulation type Acc, and the conversions between them.
template <typename T>
struct Plain {
  using Storage = T;
  using Acc = T;
  static Acc load(T x) { return x; }
  static T store(Acc a) { return a; }
};
struct Half {
  using Storage = std::uint16_t;
  using Acc = float;
  static Acc load(std::uint16_t x) { return half_to_float(x); }
  static std::uint16_t store(Acc a) { return float_to_half(a); }
};
struct BFloat {
  using Storage = std::uint16_t;
  using Acc = float;
  static Acc load(std::uint16_t x) { return bf16_to_float(x); }
  static std::uint16_t store(Acc a) { return float_to_bf16(a); }
};

// Integer sum and product go through the unsigned type so that overflow wraps instead of
// being undefined behaviour.
template <typename A>
A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <typename A>
A multiply(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    // unsigned short/char promote to int, whose product can overflow: widen first.
    using U = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, std::make_unsigned_t<A>>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

struct SumOp {
  template <typename A>
  A operator()(A a, A b) const {
    return add(a, b);
  }
};
struct ProductOp {
  template <typename A>
  A operator()(A a, A b) const {
    return multiply(a, b);
  }
};
struct MaxOp {
  template <typename A>
  A operator()(A a, A b) const {
    return a < b ? b : a;
  }
};
struct MinOp {
  template <typename A>
  A operator()(A a, A b) const {
    return b < a ? b : a;
  }
};

// Blocks small enough for the partial results to stay in L1 while every source streams by.
constexpr std::size_t kBlock = 2048;

template <typename Tr, typename Op>
void reduce_kernel(std::span<const void* const> srcs, void* dst, std::size_t count, Op op,
                   int divisor) {
  using T = typename Tr::Storage;
  using Acc = typename Tr::Acc;
  // Formats narrower than their accumulator are rounded after every step.
  constexpr bool kRoundEachStep = !std::is_same_v<T, Acc>;
  Acc partial[kBlock];
  T* out = static_cast<T*>(dst);
  for (std::size_t base = 0; base < count; base += kBlock) {
    const std::size_t len = std::min(kBlock, count - base);
    const T* first = static_cast<const T*>(srcs[0]) + base;
    for (std::size_t i = 0; i < len; ++i) partial[i] = Tr::load(first[i]);
    for (std::size_t k = 1; k < srcs.size(); ++k) {
      const T* src = static_cast<const T*>(srcs[k]) + base;
      for (std::size_t i = 0; i < len; ++i) {
        const Acc combined = op(partial[i], Tr::load(src[i]));
        if constexpr (kRoundEachStep) {
          partial[i] = Tr::load(Tr::store(combined));
        } else {
          partial[i] = combined;
        }
      }
    }
    T* block = out + base;
    if constexpr (std::is_floating_point_v<Acc>) {
      if (divisor > 1) {
        const Acc d = static_cast<Acc>(divisor);
        for (std::size_t i = 0; i < len; ++i) block[i] = Tr::store(partial[i] / d);
        continue;
      }
    }
    for (std::size_t i = 0; i < len; ++i) block[i] = Tr::store(partial[i]);
  }
}

template <typename Tr>
void reduce_typed(std::span<const void* const> srcs, void* dst, std::size_t count, ReduceOp op) {
  const int divisor = op == ReduceOp::avg ? static_cast<int>(srcs.size()) : 1;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return reduce_kernel<Tr>(srcs, dst, count, SumOp{}, divisor);
    case ReduceOp::max:
      return reduce_kernel<Tr>(srcs, dst, count, MaxOp{}, 1);
    case ReduceOp::min:
      return reduce_kernel<Tr>(srcs, dst, count, MinOp{}, 1);
    case ReduceOp::product:
      return reduce_kernel<Tr>(srcs, dst, count, ProductOp{}, 1);
  }
}

template <typename Tr>
void divide_typed(void* data, std::size_t count, int divisor) {
  using Acc = typename Tr::Acc;
  auto* p = static_cast<typename Tr::Storage*>(data);
  const Acc d = static_cast<Acc>(divisor);
  for (std::size_t i = 0; i < count; ++i) p[i] = Tr::store(Tr::load(p[i]) / d);
}

}  // namespace

void reduce_sources(std::span<const void* const> srcs, void* dst, std::size_t count, DType dtype,
                    ReduceOp op) {
  if (srcs.empty()) {
    throw Error(ErrorKind::value, "reduce_sources: no source buffers to reduce");
  }
  if (op == ReduceOp::avg && !is_floating(dtype)) {
    throw Error(ErrorKind::value, "reduce_sources: avg is defined for floating-point dtypes, not " +
                                      std::string(to_string(dtype)));
  }
  switch (dtype) {
    case DType::f32:
      return reduce_typed<Plain<float>>(srcs, dst, count, op);
    case DType::f64:
      return reduce_typed<Plain<double>>(srcs, dst, count, op);
    case DType::f16:
      return reduce_typed<Half>(srcs, dst, count, op);
    case DType::bf16:
      return reduce_typed<BFloat>(srcs, dst, count, op);
    case DType::i32:
      return reduce_typed<Plain<std::int32_t>>(srcs, dst, count, op);
    case DType::i64:
      return reduce_typed<Plain<std::int64_t>>(srcs, dst, count, op);
    case DType::i8:
      return reduce_typed<Plain<std::int8_t>>(srcs, dst, count, op);
    case DType::u8:
      return reduce_typed<Plain<std::uint8_t>>(srcs, dst, count, op);
  }
}

void divide_elements(void* data, std::size_t count, DType dtype, int divisor) {
  switch (dtype) {
    case DType::f32:
      return divide_typed<Plain<float>>(data, count, divisor);
    case DType::f64:
      return divide_typed<Plain<double>>(data, count, divisor);
    case DType::f16:
      return divide_typed<Half>(data, count, divisor);
    case DType::bf16:
      return divide_typed<BFloat>(data, count, divisor);
    default:
      throw Error(ErrorKind::value,
                  "divide_elements: avg is defined for floating-point dtypes, not " +
                      std::string(to_string(dtype)));
  }
}

}  // namespace meshgate::comm
