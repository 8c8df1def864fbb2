#include "gemm/cpu_gemm.hpp"

#include <cblas.h>

#include <algorithm>
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

// op(X) and op(W) as fp32 pointers with their stored leading dimensions. For fp32 the caller's
// storage is used directly; fp16/bf16 are upcast exactly into `owned`.
struct Operands {
  std::vector<float> x_owned, w_owned;
  const float* x = nullptr;
  const float* w = nullptr;
  std::vector<float> bias;  // the N bias values (zero without a bias epilogue)
};

Operands upcast(const GemmProblem& p, const GemmInputs& in) {
  Operands o;
  if (p.dtype == DType::f32) {
    o.x = static_cast<const float*>(in.x.data());
    o.w = static_cast<const float*>(in.w.data());
  } else {
    o.x_owned.resize(static_cast<std::size_t>(in.x.size()));
    o.w_owned.resize(static_cast<std::size_t>(in.w.size()));
    upcast(in.x, o.x_owned.data());
    upcast(in.w, o.w_owned.data());
    o.x = o.x_owned.data();
    o.w = o.w_owned.data();
  }
  o.bias.assign(static_cast<std::size_t>(p.n), 0.0f);
  if (has_bias(p.epilogue))
    for (std::int64_t j = 0; j < p.n; ++j) o.bias[j] = in.bias.get(p.bias_offset + j);
  return o;
}

bool x_transposed(const GemmProblem& p) {
  return p.layout == GemmLayout::tn || p.layout == GemmLayout::tt;
}
bool w_transposed(const GemmProblem& p) {
  return p.layout == GemmLayout::nt || p.layout == GemmLayout::tt;
}

// C[rows, N] (ld N) = alpha * op(X)[row0:row0+rows, :] * op(W) + beta * C, through sgemm.
void sgemm_rows(const GemmProblem& p, const Operands& o, std::int64_t row0, std::int64_t rows,
                float beta, float* c) {
  if (rows == 0 || p.n == 0) return;
  if (p.k == 0) {  // BLAS requires ld >= 1 and treats k = 0 inconsistently: do it here
    for (std::int64_t i = 0; i < rows * p.n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  const bool xt = x_transposed(p), wt = w_transposed(p);
  const float* x = xt ? o.x + row0 : o.x + row0 * p.k;
  const auto ldx = static_cast<blasint>(xt ? p.m : p.k);
  const auto ldw = static_cast<blasint>(wt ? p.k : p.n);
  cblas_sgemm(CblasRowMajor, xt ? CblasTrans : CblasNoTrans, wt ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(rows), static_cast<blasint>(p.n), static_cast<blasint>(p.k),
              p.alpha, x, ldx, o.w, ldw, beta, c, static_cast<blasint>(p.n));
}

// Y rows in blocks small enough that a block's fp32 accumulators stay in cache while the bias and
// the activation are applied on the way out: one rounding per element, as in the epilogue.
void run_epilogue(const GemmProblem& p, const GemmInputs& in, HostTensor& y) {
  const Operands o = upcast(p, in);
  const std::int64_t block = std::min<std::int64_t>(
      std::max<std::int64_t>(p.m, 1),
      std::max<std::int64_t>(32, (1 << 18) / std::max<std::int64_t>(p.n, 1)));
  std::vector<float> tile;
  for (std::int64_t row0 = 0; row0 < p.m; row0 += block) {
    const std::int64_t rows = std::min(block, p.m - row0);
    float* c = nullptr;
    if (p.dtype == DType::f32) {
      c = static_cast<float*>(y.data()) + row0 * p.n;  // accumulate in place, then finish the block
    } else {
      tile.resize(static_cast<std::size_t>(rows * p.n));
      c = tile.data();
    }
    sgemm_rows(p, o, row0, rows, 0.0f, c);
    if (p.dtype == DType::f32) {
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < p.n; ++j)
          c[i * p.n + j] = activate(p.epilogue, c[i * p.n + j] + o.bias[j]);
    } else {
      for (std::int64_t i = 0; i < rows; ++i)
        store(y, (row0 + i) * p.n, p.n,
              [&](std::int64_t j) { return activate(p.epilogue, c[i * p.n + j] + o.bias[j]); });
    }
  }
}

// Three passes over Y as separate kernels would do it: the product rounded to the dtype, then
// the bias added and rounded, then the activation applied and rounded.
void run_unfused(const GemmProblem& p, const GemmInputs& in, HostTensor& y) {
  const Operands o = upcast(p, in);
  const std::int64_t count = p.m * p.n;
  if (p.dtype == DType::f32) {
    sgemm_rows(p, o, 0, p.m, 0.0f, static_cast<float*>(y.data()));
  } else {
    std::vector<float> product(static_cast<std::size_t>(count));
    sgemm_rows(p, o, 0, p.m, 0.0f, product.data());
    store(y, 0, count, [&](std::int64_t i) { return product[i]; });
  }
  if (has_bias(p.epilogue))
    for (std::int64_t i = 0; i < p.m; ++i)
      store(y, i * p.n, p.n, [&](std::int64_t j) { return y.get(i * p.n + j) + o.bias[j]; });
  if (p.epilogue == Epilogue::relu_bias || p.epilogue == Epilogue::gelu_bias)
    store(y, 0, count, [&](std::int64_t i) { return activate(p.epilogue, y.get(i)); });
}

// The bias enters through C at fp32 compute precision (beta = 1), as PyTorch's non-Lt addmm
// does; the activation is a separate pass, fused into the final rounding for fp16/bf16.
void run_beta_bias(const GemmProblem& p, const GemmInputs& in, HostTensor& y) {
  const Operands o = upcast(p, in);
  const std::int64_t count = p.m * p.n;
  std::vector<float> owned;
  float* c = static_cast<float*>(y.data());
  if (p.dtype != DType::f32) {
    owned.resize(static_cast<std::size_t>(count));
    c = owned.data();
  }
  for (std::int64_t i = 0; i < p.m; ++i) std::copy(o.bias.begin(), o.bias.end(), c + i * p.n);
  sgemm_rows(p, o, 0, p.m, 1.0f, c);
  if (p.dtype == DType::f32) {
    if (p.epilogue == Epilogue::relu_bias || p.epilogue == Epilogue::gelu_bias)
      for (std::int64_t i = 0; i < count; ++i) c[i] = activate(p.epilogue, c[i]);
  } else {
    store(y, 0, count, [&](std::int64_t i) { return activate(p.epilogue, c[i]); });
  }
}

}  // namespace

void run_cpu(Impl impl, const GemmProblem& p, const GemmInputs& in, HostTensor& y) {
  validate(p, in);
  validate_output(p, y);
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
