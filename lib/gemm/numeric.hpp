#pragma once
// Scalar helpers shared by the reference and the CPU implementations: fp16/bf16 bit conversions
// (round to nearest even, as the GPU's conversions do), rounding a double once to a dtype, and
// the activations of the epilogues.
#include <bit>
#include <cmath>
#include <cstdint>

#include "gemm/gemm.hpp"

namespace meshgate::gemm {

inline float bf16_to_float(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even on the 16 dropped bits
  return static_cast<std::uint16_t>(x >> 16);
}

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline std::uint16_t float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);
  if (ax >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520 -> inf
  if (ax < 0x38800000u) {
    // Below the smallest normal 2^-14: a multiple of 2^-24; scaling by 2^24 is exact.
    const float scaled = std::bit_cast<float>(ax) * 16777216.0f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(scaled)));
  }
  std::uint32_t h = ((((ax >> 23) - 112u)) << 10) | ((ax & 0x7FFFFFu) >> 13);
  const std::uint32_t rest = ax & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return static_cast<std::uint16_t>(sign | h);
}

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
