#include "gemm/lt_plan.hpp"

#include <limits>
#include <utility>

#include "core/error.hpp"

namespace meshgate::gemm {

std::string_view to_string(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::default_:
      return "DEFAULT";
    case LtEpilogue::relu:
      return "RELU";
    case LtEpilogue::bias:
      return "BIAS";
    case LtEpilogue::relu_bias:
      return "RELU_BIAS";
    case LtEpilogue::gelu:
      return "GELU";
    case LtEpilogue::gelu_bias:
      return "GELU_BIAS";
  }
  return "?";
}

LtPlan fallback_plan(Epilogue epilogue, std::string reason) {
  LtPlan plan;
  plan.executed = Impl::unfused;
  plan.epilogue = LtEpilogue::default_;
  plan.bias_act_kernel = epilogue != Epilogue::none;
  plan.fallback_reason = std::move(reason);
  return plan;
}

LtPlan plan_lt(Impl requested, Epilogue epilogue, std::uint64_t bias_address) {
  LtPlan plan;
  plan.executed = requested;
  switch (requested) {
    case Impl::lt_epilogue: {
      if (has_bias(epilogue) && bias_address % kLtBiasAlignment != 0)
        return fallback_plan(epilogue, "bias pointer is " +
                                           std::to_string(pointer_alignment(bias_address)) +
                                           "-byte aligned; the bias epilogue needs 16 bytes");
      constexpr LtEpilogue table[] = {LtEpilogue::default_, LtEpilogue::bias, LtEpilogue::relu_bias,
                                      LtEpilogue::gelu_bias};
      plan.epilogue = table[static_cast<int>(epilogue)];
      return plan;
    }
    case Impl::lt_beta_bias: {
      // The activation still fuses: cuBLASLt applies it to alpha * A B + beta * C.
      constexpr LtEpilogue table[] = {LtEpilogue::default_, LtEpilogue::default_, LtEpilogue::relu,
                                      LtEpilogue::gelu};
      plan.epilogue = table[static_cast<int>(epilogue)];
      plan.bias_through_c = has_bias(epilogue);
      return plan;
    }
    case Impl::unfused:
      return fallback_plan(epilogue, "");
    case Impl::cublas: {
      LtPlan cublas = fallback_plan(epilogue, "");
      cublas.executed = Impl::cublas;
      return cublas;
    }
    default:
      throw Error(ErrorKind::value, "gemm impl '" + std::string(to_string(requested)) +
                                        "' is not a cuBLASLt implementation");
  }
}

LtOperands lt_operands(const GemmProblem& p) {
  constexpr std::int64_t kMaxBatch = std::numeric_limits<std::int32_t>::max();
  if (p.batch > kMaxBatch)
    throw Error(ErrorKind::value, "gemm batch = " + std::to_string(p.batch) +
                                      " exceeds cuBLASLt's 32-bit batch count " +
                                      std::to_string(kMaxBatch));
  LtOperands o;
  o.trans_a = w_transposed(p);
  o.trans_b = x_transposed(p);
  o.m = p.n;
  o.n = p.m;
  o.k = p.k;
  o.batch = p.batch;
  // Row-major storage of R rows with leading dimension ld is column-major storage of the
  // transpose: ld rows apart becomes ld elements between columns. W stored [K,N] ('n') is
  // therefore the column-major N x K matrix op(A) itself; stored [N,K] ('t') it is K x N, read
  // transposed. X likewise: [M,K] ('n') is K x M = op(B); [K,M] ('t') is M x K, transposed.
  o.a = o.trans_a ? LtMatrix{p.k, p.n, w_ld(p), p.w_offset, w_batch_stride(p)}
                  : LtMatrix{p.n, p.k, w_ld(p), p.w_offset, w_batch_stride(p)};
  o.b = o.trans_b ? LtMatrix{p.m, p.k, x_ld(p), p.x_offset, x_batch_stride(p)}
                  : LtMatrix{p.k, p.m, x_ld(p), p.x_offset, x_batch_stride(p)};
  o.d = LtMatrix{p.n, p.m, y_ld(p), 0, y_batch_stride(p)};
  return o;
}

void check_fits_cublas(const LtOperands& o) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  const std::pair<const char*, std::int64_t> values[] = {
      {"n (cuBLAS m)", o.m}, {"m (cuBLAS n)", o.n}, {"k", o.k},         {"ldw (cuBLAS lda)", o.a.ld},
      {"ldx (cuBLAS ldb)", o.b.ld}, {"ldy (cuBLAS ldc)", o.d.ld}, {"batch", o.batch}};
  for (const auto& [name, value] : values)
    if (value > kMax)
      throw Error(ErrorKind::value, "gemm " + std::string(name) + " = " + std::to_string(value) +
                                        " does not fit cublasGemmEx's 32-bit int (at most " +
                                        std::to_string(kMax) + ")");
}

void check_lt_split_k(const GemmProblem& p) {
  if (p.split_k <= 1 || p.split_k_partials == DType::f32 || p.split_k_partials == p.dtype) return;
  throw Error(ErrorKind::value,
              "split_k_partials " + std::string(to_string(p.split_k_partials)) +
                  " has no cuBLASLt reduction scheme: use float32 (compute type) or the output "
                  "dtype " +
                  std::string(to_string(p.dtype)));
}

std::uint32_t pointer_alignment(std::uint64_t address) {
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace meshgate::gemm
