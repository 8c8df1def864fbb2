#include "gemm/gemm.hpp"

#include <algorithm>
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
constexpr std::array<std::pair<std::string_view, Impl>, 8> kImplNames{{
    {"cpu_reference", Impl::cpu_reference},
    {"cpu_epilogue", Impl::cpu_epilogue},
    {"cpu_unfused", Impl::cpu_unfused},
    {"cpu_beta_bias", Impl::cpu_beta_bias},
    {"lt_epilogue", Impl::lt_epilogue},
    {"lt_beta_bias", Impl::lt_beta_bias},
    {"unfused", Impl::unfused},
    {"cublas", Impl::cublas},
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

// offset + extent, with the same headroom as checked_product: the offset is what made it
// overflow when the extent alone passed.
std::int64_t checked_offset(std::int64_t offset, std::int64_t extent, std::string_view offset_name,
                            std::string_view extent_name) {
  if (offset > std::numeric_limits<std::int64_t>::max() / 16 - extent)
    throw Error(ErrorKind::value,
                "gemm " + std::string(offset_name) + " = " + std::to_string(offset) + " plus the " +
                    std::to_string(extent) + " elements of " + std::string(extent_name) +
                    " overflows: use a smaller " + std::string(offset_name));
  return offset + extent;
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
    case Impl::cublas:
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
  return {Impl::lt_beta_bias, Impl::unfused, Impl::cublas};
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
  non_negative(p.x_offset, "x_offset");
  non_negative(p.w_offset, "w_offset");
  non_negative(p.split_k, "split_k");
  if (p.batch < 1)
    throw Error(ErrorKind::value, "gemm batch = " + std::to_string(p.batch) +
                                      " must be at least 1 (1 is a single GEMM)");
  if (!std::isfinite(p.alpha))
    throw Error(ErrorKind::value, "gemm alpha = " + std::to_string(p.alpha) + " is not finite");
  if (p.tf32 && p.dtype != DType::f32)
    throw Error(ErrorKind::value, "gemm tf32 applies to float32 only, the dtype is " +
                                      std::string(to_string(p.dtype)) + ": drop tf32");
  const auto leading = [](std::int64_t ld, std::int64_t row_length, std::string_view name,
                          std::string_view stored) {
    if (ld != 0 && ld < std::max<std::int64_t>(row_length, 1))
      throw Error(ErrorKind::value, "gemm " + std::string(name) + " = " + std::to_string(ld) +
                                        " is below the stored row length " +
                                        std::to_string(row_length) + " of " + std::string(stored) +
                                        ": use 0 (packed) or at least " +
                                        std::to_string(std::max<std::int64_t>(row_length, 1)));
  };
  leading(p.ldx, x_transposed(p) ? p.m : p.k, "ldx", x_transposed(p) ? "X [K,M]" : "X [M,K]");
  leading(p.ldw, w_transposed(p) ? p.k : p.n, "ldw", w_transposed(p) ? "W [N,K]" : "W [K,N]");
  leading(p.ldy, p.n, "ldy", "Y [M,N]");
  non_negative(p.ldx, "ldx");
  non_negative(p.ldw, "ldw");
  non_negative(p.ldy, "ldy");
  const std::int64_t x_rows = x_transposed(p) ? p.k : p.m;
  const std::int64_t w_rows = w_transposed(p) ? p.n : p.k;
  checked_offset(p.x_offset,
                 checked_product(checked_product(p.batch, x_rows, "batch x X rows"), x_ld(p),
                                 "X (batch x rows x ldx)"),
                 "x_offset", "X (batch x rows x ldx)");
  checked_offset(p.w_offset,
                 checked_product(checked_product(p.batch, w_rows, "batch x W rows"), w_ld(p),
                                 "W (batch x rows x ldw)"),
                 "w_offset", "W (batch x rows x ldw)");
  checked_product(checked_product(p.batch, p.m, "batch x m"), y_ld(p), "Y (batch x m x ldy)");
  checked_offset(p.bias_offset, p.n, "bias_offset", "the bias (n)");
}

bool x_transposed(const GemmProblem& p) {
  return p.layout == GemmLayout::tn || p.layout == GemmLayout::tt;
}
bool w_transposed(const GemmProblem& p) {
  return p.layout == GemmLayout::nt || p.layout == GemmLayout::tt;
}

std::int64_t x_ld(const GemmProblem& p) {
  return p.ldx != 0 ? p.ldx : (x_transposed(p) ? p.m : p.k);
}
std::int64_t w_ld(const GemmProblem& p) {
  return p.ldw != 0 ? p.ldw : (w_transposed(p) ? p.k : p.n);
}
std::int64_t y_ld(const GemmProblem& p) {
  return p.ldy != 0 ? p.ldy : p.n;
}
std::int64_t x_batch_stride(const GemmProblem& p) {
  return (x_transposed(p) ? p.k : p.m) * x_ld(p);
}
std::int64_t w_batch_stride(const GemmProblem& p) {
  return (w_transposed(p) ? p.n : p.k) * w_ld(p);
}
std::int64_t y_batch_stride(const GemmProblem& p) {
  return p.m * y_ld(p);
}
std::int64_t x_elements(const GemmProblem& p) {
  return p.x_offset + p.batch * x_batch_stride(p);
}
std::int64_t w_elements(const GemmProblem& p) {
  return p.w_offset + p.batch * w_batch_stride(p);
}
std::int64_t y_elements(const GemmProblem& p) {
  return p.batch * y_batch_stride(p);
}
std::int64_t total_rows(const GemmProblem& p) {
  return p.batch * p.m;
}
bool has_elements(const GemmProblem& p) {
  return total_rows(p) > 0 && p.n > 0;
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
  GemmInputs in{HostTensor(p.dtype, x_elements(p)), HostTensor(p.dtype, w_elements(p)),
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
  expect_tensor(in.x, p.dtype, x_elements(p), "X");
  expect_tensor(in.w, p.dtype, w_elements(p), "W");
  expect_tensor(in.bias, p.dtype, p.bias_offset + p.n, "bias (with its offset)");
}

void validate_output(const GemmProblem& p, const HostTensor& y) {
  expect_tensor(y, p.dtype, y_elements(p), "Y");
}

std::int64_t x_index(const GemmProblem& p, std::int64_t i, std::int64_t kk, std::int64_t batch) {
  const std::int64_t base = p.x_offset + batch * x_batch_stride(p);
  return base + (x_transposed(p) ? kk * x_ld(p) + i : i * x_ld(p) + kk);
}

std::int64_t w_index(const GemmProblem& p, std::int64_t kk, std::int64_t j, std::int64_t batch) {
  const std::int64_t base = p.w_offset + batch * w_batch_stride(p);
  return base + (w_transposed(p) ? j * w_ld(p) + kk : kk * w_ld(p) + j);
}

std::int64_t y_index(const GemmProblem& p, std::int64_t row, std::int64_t j) {
  return row * y_ld(p) + j;  // rows of consecutive batches follow each other: stride M * ldy
}

std::string fingerprint(const GemmProblem& p, const HostTensor& y) {
  validate_output(p, y);
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto* bytes = static_cast<const unsigned char*>(y.data());
  const std::size_t size = element_size(p.dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(p.n) * size;
  for (std::int64_t r = 0; has_elements(p) && r < total_rows(p); ++r) {
    const unsigned char* row = bytes + static_cast<std::size_t>(y_index(p, r, 0)) * size;
    for (std::size_t b = 0; b < row_bytes; ++b) h = (h ^ row[b]) * 0x100000001b3ull;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[static_cast<std::size_t>(i)] = kHex[h & 15];
  return out;
}

namespace {
// The value's position on the number line of its dtype's bit patterns: adjacent representable
// values differ by one, +0 and -0 coincide.
std::int64_t ordinal(DType d, float v) {
  if (d == DType::f32) {
    std::int32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return bits < 0 ? -static_cast<std::int64_t>(bits & 0x7fffffff) : bits;
  }
  const std::uint16_t bits = d == DType::f16 ? float_to_half(v) : float_to_bf16(v);
  return (bits & 0x8000) ? -static_cast<std::int64_t>(bits & 0x7fff) : bits;
}
}  // namespace

std::uint64_t ulp_distance(DType d, float a, float b) {
  if (std::isnan(a) || std::isnan(b)) {
    if (std::isnan(a) && std::isnan(b)) return 0;
    return std::numeric_limits<std::uint64_t>::max();
  }
  const std::int64_t x = ordinal(d, a), y = ordinal(d, b);
  return static_cast<std::uint64_t>(x > y ? x - y : y - x);
}

UlpSummary ulp_summary(const GemmProblem& p, const HostTensor& expected, const HostTensor& y) {
  validate_output(p, expected);
  validate_output(p, y);
  UlpSummary s;
  long double sum = 0;
  for (std::int64_t r = 0; has_elements(p) && r < total_rows(p); ++r)
    for (std::int64_t j = 0; j < p.n; ++j) {
      const std::int64_t i = y_index(p, r, j);
      const std::uint64_t d = ulp_distance(p.dtype, expected.get(i), y.get(i));
      s.max = std::max(s.max, d);
      sum += static_cast<long double>(d);
      s.differing += d != 0 ? 1 : 0;
      ++s.compared;
    }
  s.mean = s.compared > 0 ? static_cast<double>(sum / s.compared) : 0.0;
  return s;
}

#ifndef MESHGATE_GEMM_CUDA
int cuda_device_count() {
  return 0;
}

std::optional<BlasLibrary> cublaslt_library() {
  return std::nullopt;
}
#endif

}  // namespace meshgate::gemm
