#include "gemm/cpu_gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "gemm/numeric.hpp"
#include "gemm/reference.hpp"

namespace meshgate::gemm {
namespace {

// Bulk conversions with the dtype decided once per buffer rather than per element.
void upcast(const HostTensor& t, float* out) {
  const std::int64_t n = t.size();
  if (t.dtype() == DType::f32) {
    std::copy_n(static_cast<const float*>(t.data()), n, out);
    return;
  }
  const auto* bits = static_cast<const std::uint16_t*>(t.data());
  if (t.dtype() == DType::f16)
    for (std::int64_t i = 0; i < n; ++i) out[i] = half_to_float(bits[i]);
  else
    for (std::int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(bits[i]);
}

// y[offset + i] = fn(i) rounded to y's dtype, for i < count.
template <class Fn>
void store(HostTensor& y, std::int64_t offset, std::int64_t count, Fn&& fn) {
  if (y.dtype() == DType::f32) {
    float* out = static_cast<float*>(y.data()) + offset;
    for (std::int64_t i = 0; i < count; ++i) out[i] = fn(i);
    return;
  }
  auto* out = static_cast<std::uint16_t*>(y.data()) + offset;
  if (y.dtype() == DType::f16)
    for (std::int64_t i = 0; i < count; ++i) out[i] = float_to_half(fn(i));
  else
    for (std::int64_t i = 0; i < count; ++i) out[i] = float_to_bf16(fn(i));
}

// Y row r of GEMM `batch`: element y_index of its first column.
std::int64_t y_row(const GemmProblem& p, std::int64_t batch, std::int64_t i) {
  return y_index(p, batch * p.m + i, 0);
}

// TF32 keeps 10 of fp32's 23 mantissa bits; the tensor cores round to nearest even.
float round_to_tf32(float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u) return v;  // inf and NaN stay
  bits += 0xfffu + ((bits >> 13) & 1u);
  bits &= ~0x1fffu;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// The stored X and W as fp32 (offsets, padding and batches kept, so the problem's indices
// apply). fp32 without TF32 uses the caller's storage; fp16/bf16 are upcast exactly, TF32
// inputs are rounded as the tensor cores would.
struct Operands {
  std::vector<float> x_owned, w_owned;
  const float* x = nullptr;
  const float* w = nullptr;
  std::vector<float> bias;  // the N bias values (zero without a bias epilogue)
};

Operands upcast(const GemmProblem& p, const GemmInputs& in) {
  Operands o;
  if (p.dtype == DType::f32 && !p.tf32) {
    o.x = static_cast<const float*>(in.x.data());
    o.w = static_cast<const float*>(in.w.data());
  } else {
    o.x_owned.resize(static_cast<std::size_t>(in.x.size()));
    o.w_owned.resize(static_cast<std::size_t>(in.w.size()));
    upcast(in.x, o.x_owned.data());
    upcast(in.w, o.w_owned.data());
    if (p.tf32) {
      for (float& v : o.x_owned) v = round_to_tf32(v);
      for (float& v : o.w_owned) v = round_to_tf32(v);
    }
    o.x = o.x_owned.data();
    o.w = o.w_owned.data();
  }
  o.bias.assign(static_cast<std::size_t>(p.n), 0.0f);
  if (has_bias(p.epilogue))
    for (std::int64_t j = 0; j < p.n; ++j) o.bias[j] = in.bias.get(p.bias_offset + j);
  return o;
}

// C[rows, N] (ld N) = alpha * op(X)[row0:row0+rows, k0:k1] * op(W)[k0:k1, :] + beta * C of
// GEMM `batch`, through sgemm.
void sgemm_slice(const GemmProblem& p, const Operands& o, std::int64_t batch, std::int64_t row0,
                 std::int64_t rows, std::int64_t k0, std::int64_t k1, float beta, float* c) {
  const std::int64_t depth = k1 - k0;
  if (rows == 0 || p.n == 0) return;
  if (depth == 0) {  // BLAS requires ld >= 1 and treats k = 0 inconsistently: do it here
    for (std::int64_t i = 0; i < rows * p.n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  const bool xt = x_transposed(p), wt = w_transposed(p);
  const float* x = o.x + x_index(p, row0, k0, batch);
  const float* w = o.w + w_index(p, k0, 0, batch);
  cblas_sgemm(CblasRowMajor, xt ? CblasTrans : CblasNoTrans, wt ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(rows), static_cast<blasint>(p.n), static_cast<blasint>(depth),
              p.alpha, x, static_cast<blasint>(x_ld(p)), w, static_cast<blasint>(w_ld(p)), beta, c,
              static_cast<blasint>(p.n));
}

// The GEMM of rows [row0, row0 + rows) of GEMM `batch` into C (ld N), split over K as the
// problem asks: with split_k > 1 each slice's partial sum is stored in split_k_partials (as a
// split-K kernel's workspace would hold it), then the partials are reduced in fp32 in slice
// order and beta * C is added.
void gemm_rows(const GemmProblem& p, const Operands& o, std::int64_t batch, std::int64_t row0,
               std::int64_t rows, float beta, float* c) {
  const std::int64_t slices =
      std::clamp<std::int64_t>(p.split_k, 1, std::max<std::int64_t>(p.k, 1));
  if (slices == 1) return sgemm_slice(p, o, batch, row0, rows, 0, p.k, beta, c);
  const std::size_t count = static_cast<std::size_t>(rows * p.n);
  std::vector<float> sum(count, 0.0f), partial(count);
  for (std::int64_t s = 0; s < slices; ++s) {
    sgemm_slice(p, o, batch, row0, rows, s * p.k / slices, (s + 1) * p.k / slices, 0.0f,
                partial.data());
    for (std::size_t i = 0; i < count; ++i) sum[i] += round_to(p.split_k_partials, partial[i]);
  }
  for (std::size_t i = 0; i < count; ++i) c[i] = sum[i] + (beta == 0.0f ? 0.0f : beta * c[i]);
}

// Y rows in blocks small enough that a block's fp32 accumulators stay in cache while the bias and
// the activation are applied on the way out: one rounding per element, as in the epilogue.
void run_epilogue(const GemmProblem& p, const GemmInputs& in, HostTensor& y) {
  const Operands o = upcast(p, in);
  const std::int64_t block = std::min<std::int64_t>(
      std::max<std::int64_t>(p.m, 1),
      std::max<std::int64_t>(32, (1 << 18) / std::max<std::int64_t>(p.n, 1)));
  std::vector<float> tile;
  for (std::int64_t batch = 0; batch < p.batch; ++batch)
    for (std::int64_t row0 = 0; row0 < p.m; row0 += block) {
      const std::int64_t rows = std::min(block, p.m - row0);
      tile.resize(static_cast<std::size_t>(rows * p.n));
      gemm_rows(p, o, batch, row0, rows, 0.0f, tile.data());
      for (std::int64_t i = 0; i < rows; ++i) {
        const float* c = tile.data() + i * p.n;
        store(y, y_row(p, batch, row0 + i), p.n,
              [&](std::int64_t j) { return activate(p.epilogue, c[j] + o.bias[j]); });
      }
    }
}

// Three passes over Y as separate kernels would do it: the product rounded to the dtype, then
// the bias added and rounded, then the activation applied and rounded.
void run_unfused(const GemmProblem& p, const GemmInputs& in, HostTensor& y) {
  const Operands o = upcast(p, in);
  std::vector<float> product(static_cast<std::size_t>(p.m * p.n));
  for (std::int64_t batch = 0; batch < p.batch; ++batch) {
    gemm_rows(p, o, batch, 0, p.m, 0.0f, product.data());
    for (std::int64_t i = 0; i < p.m; ++i)
      store(y, y_row(p, batch, i), p.n, [&](std::int64_t j) { return product[i * p.n + j]; });
    for (std::int64_t i = 0; i < p.m; ++i) {
      const std::int64_t row = y_row(p, batch, i);
      if (has_bias(p.epilogue))
        store(y, row, p.n, [&](std::int64_t j) { return y.get(row + j) + o.bias[j]; });
      if (p.epilogue == Epilogue::relu_bias || p.epilogue == Epilogue::gelu_bias)
        store(y, row, p.n, [&](std::int64_t j) { return activate(p.epilogue, y.get(row + j)); });
    }
  }
}

// The bias enters through C at fp32 compute precision (beta = 1), as PyTorch's non-Lt addmm
// does; the activation is a separate pass, fused into the final rounding for fp16/bf16.
void run_beta_bias(const GemmProblem& p, const GemmInputs& in, HostTensor& y) {
  const Operands o = upcast(p, in);
  std::vector<float> c(static_cast<std::size_t>(p.m * p.n));
  for (std::int64_t batch = 0; batch < p.batch; ++batch) {
    for (std::int64_t i = 0; i < p.m; ++i)
      std::copy(o.bias.begin(), o.bias.end(), c.begin() + i * p.n);
    gemm_rows(p, o, batch, 0, p.m, 1.0f, c.data());
    for (std::int64_t i = 0; i < p.m; ++i)
      store(y, y_row(p, batch, i), p.n,
            [&](std::int64_t j) { return activate(p.epilogue, c[i * p.n + j]); });
  }
}

}  // namespace

bool uses_cpu_blas(Impl impl) {
  return impl == Impl::cpu_epilogue || impl == Impl::cpu_unfused || impl == Impl::cpu_beta_bias;
}

std::vector<BlasArgument> cpu_blas_arguments(const GemmProblem& p) {
  // sgemm_slice passes at most m rows, n columns, k depth, x_ld, w_ld, and n as C's ld.
  return {{"m", p.m}, {"n", p.n}, {"k", p.k}, {"ldx", x_ld(p)}, {"ldw", w_ld(p)}};
}

void check_fits_cpu_blas(const BlasArgument& a) {
  constexpr std::int64_t kMax = std::numeric_limits<blasint>::max();
  if (a.value > kMax)
    throw Error(ErrorKind::value,
                "gemm " + std::string(a.field) + " = " + std::to_string(a.value) +
                    " does not fit the BLAS library's " + std::to_string(8 * sizeof(blasint)) +
                    "-bit int (at most " + std::to_string(kMax) +
                    ") that cpu_epilogue, cpu_unfused and cpu_beta_bias pass it to sgemm as: use "
                    "a smaller " +
                    std::string(a.field) + " or list only cpu_reference among the CPU impls");
}

std::string cpu_numerics_environment() {
  return std::string("cpu: ") + openblas_get_config() + ", core " + openblas_get_corename();
}

void run_cpu(Impl impl, const GemmProblem& p, const GemmInputs& in, HostTensor& y) {
  validate(p);
  if (uses_cpu_blas(impl))
    for (const BlasArgument& a : cpu_blas_arguments(p)) check_fits_cpu_blas(a);
  validate(p, in);
  validate_output(p, y);
  if (device_of(impl) == Device::cpu && !has_elements(p)) return;
  switch (impl) {
    case Impl::cpu_reference:
      return run_reference(p, in, y);
    case Impl::cpu_epilogue:
      return run_epilogue(p, in, y);
    case Impl::cpu_unfused:
      return run_unfused(p, in, y);
    case Impl::cpu_beta_bias:
      return run_beta_bias(p, in, y);
    default:
      throw Error(ErrorKind::value, "gemm impl '" + std::string(to_string(impl)) +
                                        "' runs on CUDA, not on the CPU: use run_cuda");
  }
}

}  // namespace meshgate::gemm
