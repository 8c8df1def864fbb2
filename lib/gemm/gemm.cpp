#include "gemm/gemm.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "core/error.hpp"
#include "gemm/numeric.hpp"

namespace meshgate::gemm {
namespace {

template <class E, std::size_t N>
E parse_name(std::string_view what, std::string_view s,
             const std::array<std::pair<std::string_view, E>, N>& names) {
  std::string accepted;
  for (const auto& [name, value] : names) {
    if (name == s) return value;
    accepted += (accepted.empty() ? "" : ", ") + std::string(name);
  }
  throw Error(ErrorKind::value, "unknown " + std::string(what) + " '" + std::string(s) +
                                    "': expected one of " + accepted);
}

constexpr std::array<std::pair<std::string_view, DType>, 8> kDTypeNames{{
    {"f32", DType::f32},
    {"fp32", DType::f32},
    {"float32", DType::f32},
    {"f16", DType::f16},
    {"fp16", DType::f16},
    {"float16", DType::f16},
    {"bf16", DType::bf16},
    {"bfloat16", DType::bf16},
}};
constexpr std::array<std::pair<std::string_view, Epilogue>, 4> kEpilogueNames{{
    {"none", Epilogue::none},
    {"bias", Epilogue::bias},
    {"relu_bias", Epilogue::relu_bias},
    {"gelu_bias", Epilogue::gelu_bias},
}};
constexpr std::array<std::pair<std::string_view, GemmLayout>, 4> kLayoutNames{{
    {"nt", GemmLayout::nt},
    {"nn", GemmLayout::nn},
    {"tn", GemmLayout::tn},
    {"tt", GemmLayout::tt},
}};
constexpr std::array<std::pair<std::string_view, Device>, 2> kDeviceNames{{
    {"cpu", Device::cpu},
    {"cuda", Device::cuda},
}};
constexpr std::array<std::pair<std::string_view, Impl>, 7> kImplNames{{
    {"cpu_reference", Impl::cpu_reference},
    {"cpu_epilogue", Impl::cpu_epilogue},
    {"cpu_unfused", Impl::cpu_unfused},
    {"cpu_beta_bias", Impl::cpu_beta_bias},
    {"lt_epilogue", Impl::lt_epilogue},
    {"lt_beta_bias", Impl::lt_beta_bias},
    {"unfused", Impl::unfused},
}};

template <class E, std::size_t N>
std::string_view name_of(E value, const std::array<std::pair<std::string_view, E>, N>& names) {
  for (const auto& [name, v] : names)
    if (v == value) return name;
  return "?";
}

// Stateless hash of (seed, stream, index) to a uniform double in [-1, 1).
double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  std::uint64_t z = seed ^ (stream * 0x9E3779B97F4A7C15ull) ^ (index * 0xD1B54A32D192ED03ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0;
}

std::int64_t checked_product(std::int64_t a, std::int64_t b, std::string_view what) {
  if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / 16 / a)
    throw Error(ErrorKind::value, std::string(what) + " = " + std::to_string(a) + " x " +
                                      std::to_string(b) + " elements overflows: use smaller sizes");
  return a * b;
}

void expect_tensor(const HostTensor& t, DType dtype, std::int64_t size, std::string_view name) {
  if (t.dtype() != dtype)
    throw Error(ErrorKind::value, std::string(name) + " has dtype " +
                                      std::string(to_string(t.dtype())) + " but the problem is " +
                                      std::string(to_string(dtype)));
  if (t.size() != size)
    throw Error(ErrorKind::value, std::string(name) + " has " + std::to_string(t.size()) +
                                      " elements but the problem needs " + std::to_string(size));
}

}  // namespace

std::string_view to_string(DType d) {
  switch (d) {
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
  }
  return "?";
}
std::string_view to_string(Epilogue e) {
  return name_of(e, kEpilogueNames);
}
std::string_view to_string(GemmLayout l) {
  return name_of(l, kLayoutNames);
}
std::string_view to_string(Device d) {
  return name_of(d, kDeviceNames);
}
std::string_view to_string(Impl i) {
  return name_of(i, kImplNames);
}

DType parse_dtype(std::string_view s) {
  return parse_name("dtype", s, kDTypeNames);
}
Epilogue parse_epilogue(std::string_view s) {
  return parse_name("epilogue", s, kEpilogueNames);
}
GemmLayout parse_layout(std::string_view s) {
  return parse_name("layout", s, kLayoutNames);
}
Device parse_device(std::string_view s) {
  return parse_name("device", s, kDeviceNames);
}
Impl parse_impl(std::string_view s) {
  return parse_name("gemm impl", s, kImplNames);
}

std::size_t element_size(DType d) {
  return d == DType::f32 ? 4 : 2;
}
bool has_bias(Epilogue e) {
  return e != Epilogue::none;
}

Device device_of(Impl i) {
  switch (i) {
    case Impl::lt_epilogue:
    case Impl::lt_beta_bias:
    case Impl::unfused:
      return Device::cuda;
    default:
      return Device::cpu;
  }
}

std::vector<Impl> impls_for(Device d) {
  std::vector<Impl> out;
  for (const auto& [name, impl] : kImplNames)
    if (device_of(impl) == d) out.push_back(impl);
  return out;
}

Impl fused_impl(Device d) {
  return d == Device::cpu ? Impl::cpu_epilogue : Impl::lt_epilogue;
}

std::vector<Impl> alternative_impls(Device d) {
  if (d == Device::cpu) return {Impl::cpu_unfused, Impl::cpu_beta_bias};
  return {Impl::lt_beta_bias, Impl::unfused};
}

void validate(const GemmProblem& p) {
  const auto non_negative = [](std::int64_t v, std::string_view name) {
    if (v < 0)
      throw Error(ErrorKind::value, "gemm " + std::string(name) + " = " + std::to_string(v) +
                                        " is negative: sizes and offsets must be >= 0");
  };
  non_negative(p.m, "m");
  non_negative(p.n, "n");
  non_negative(p.k, "k");
  non_negative(p.bias_offset, "bias_offset");
  non_negative(p.workspace, "workspace");
  if (!std::isfinite(p.alpha))
    throw Error(ErrorKind::value, "gemm alpha = " + std::to_string(p.alpha) + " is not finite");
  checked_product(p.m, p.k, "X (m x k)");
  checked_product(p.k, p.n, "W (k x n)");
  checked_product(p.m, p.n, "Y (m x n)");
}

double flops(const GemmProblem& p) {
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
}

HostTensor::HostTensor(DType dtype, std::int64_t size)
    : dtype_(dtype), size_(size), storage_(static_cast<std::size_t>(size) * element_size(dtype)) {
  if (size < 0)
    throw Error(ErrorKind::value, "tensor size " + std::to_string(size) + " is negative");
}

float HostTensor::get(std::int64_t i) const {
  const std::byte* p = storage_.data() + static_cast<std::size_t>(i) * element_size(dtype_);
  if (dtype_ == DType::f32) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  std::uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return dtype_ == DType::f16 ? half_to_float(bits) : bf16_to_float(bits);
}

void HostTensor::set(std::int64_t i, float value) {
  std::byte* p = storage_.data() + static_cast<std::size_t>(i) * element_size(dtype_);
  if (dtype_ == DType::f32) {
    std::memcpy(p, &value, sizeof value);
    return;
  }
  const std::uint16_t bits = dtype_ == DType::f16 ? float_to_half(value) : float_to_bf16(value);
  std::memcpy(p, &bits, sizeof bits);
}

void HostTensor::fill_nan() {
  // All-ones bytes are a NaN in every supported dtype. An empty tensor (an M, N or K of 0) has
  // no storage, and memset on its null pointer is undefined even for zero bytes.
  if (!storage_.empty()) std::memset(storage_.data(), 0xFF, storage_.size());
}

GemmInputs make_inputs(const GemmProblem& p, std::uint64_t seed) {
  validate(p);
  GemmInputs in{HostTensor(p.dtype, p.m * p.k), HostTensor(p.dtype, p.k * p.n),
                HostTensor(p.dtype, p.bias_offset + p.n)};
  const double w_scale = p.k > 0 ? std::sqrt(3.0 / static_cast<double>(p.k)) : 1.0;
  for (std::int64_t i = 0; i < in.x.size(); ++i)
    in.x.set(i, static_cast<float>(uniform(seed, 1, static_cast<std::uint64_t>(i))));
  for (std::int64_t i = 0; i < in.w.size(); ++i)
    in.w.set(i, static_cast<float>(w_scale * uniform(seed, 2, static_cast<std::uint64_t>(i))));
  for (std::int64_t i = 0; i < in.bias.size(); ++i)
    in.bias.set(i, static_cast<float>(0.5 * uniform(seed, 3, static_cast<std::uint64_t>(i))));
  return in;
}

void validate(const GemmProblem& p, const GemmInputs& in) {
  validate(p);
  expect_tensor(in.x, p.dtype, p.m * p.k, "X");
  expect_tensor(in.w, p.dtype, p.k * p.n, "W");
  expect_tensor(in.bias, p.dtype, p.bias_offset + p.n, "bias (with its offset)");
}

void validate_output(const GemmProblem& p, const HostTensor& y) {
  expect_tensor(y, p.dtype, p.m * p.n, "Y");
}

std::int64_t x_index(const GemmProblem& p, std::int64_t i, std::int64_t kk) {
  const bool x_transposed = p.layout == GemmLayout::tn || p.layout == GemmLayout::tt;
  return x_transposed ? kk * p.m + i : i * p.k + kk;
}

std::int64_t w_index(const GemmProblem& p, std::int64_t kk, std::int64_t j) {
  const bool w_transposed = p.layout == GemmLayout::nt || p.layout == GemmLayout::tt;
  return w_transposed ? j * p.k + kk : kk * p.n + j;
}

#ifndef MESHGATE_GEMM_CUDA
int cuda_device_count() {
  return 0;
}
#endif

}  // namespace meshgate::gemm
