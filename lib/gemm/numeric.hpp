#pragma once
// Scalar helpers shared by the reference and the CPU implementations: fp16/bf16 bit conversions
// (from core/half_float.hpp), rounding a double once to a dtype, and the activations of the
// epilogues.
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/half_float.hpp"
#include "gemm/gemm.hpp"

namespace meshgate::gemm {

using meshgate::bf16_to_float;
using meshgate::float_to_bf16;
using meshgate::float_to_half;
using meshgate::half_to_float;

// Rounds v once to the nearest `d` value (ties to even), overflowing to infinity like a cast.
inline double round_to(DType d, double v) {
  if (v == 0.0 || !std::isfinite(v)) return v;
  int digits = 24, min_exponent = -126;
  double max_finite = 3.4028234663852886e38;
  if (d == DType::f16) digits = 11, min_exponent = -14, max_finite = 65504.0;
  if (d == DType::bf16) digits = 8, min_exponent = -126, max_finite = 3.3895313892515355e38;
  int e = 0;
  std::frexp(v, &e);  // v = f * 2^e with 0.5 <= |f| < 1, so the unit exponent is e - 1
  const int exponent = std::max(e - 1, min_exponent);
  const double quantum = std::ldexp(1.0, exponent - (digits - 1));
  const double r = std::nearbyint(v / quantum) * quantum;
  if (std::fabs(r) > max_finite) return std::copysign(HUGE_VAL, v);
  return r;
}

inline float round_to(DType d, float v) {
  if (d == DType::f16) return half_to_float(float_to_half(v));
  if (d == DType::bf16) return bf16_to_float(float_to_bf16(v));
  return v;
}

// The tanh GELU of cuBLASLt's epilogue: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
T gelu_tanh(T x) {
  const T c = static_cast<T>(0.7978845608028654);
  return static_cast<T>(0.5) * x *
         (static_cast<T>(1) + std::tanh(c * (x + static_cast<T>(0.044715) * x * x * x)));
}

template <class T>
T activate(Epilogue e, T x) {
  if (e == Epilogue::relu_bias) return x < T(0) ? T(0) : x;  // keeps NaN visible
  if (e == Epilogue::gelu_bias) return gelu_tanh(x);
  return x;
}

}  // namespace meshgate::gemm
