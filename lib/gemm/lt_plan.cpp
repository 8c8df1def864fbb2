#include "gemm/lt_plan.hpp"

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

std::uint32_t pointer_alignment(std::uint64_t address) {
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace meshgate::gemm
