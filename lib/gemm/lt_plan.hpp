#pragma once
// How each CUDA implementation maps a problem onto cuBLASLt: one small decision table, host-only
// so it is tested without a GPU. The enum values are cublasLtEpilogue_t's (checked against the
// header in cuda/lt_gemm.cpp).
#include <cstdint>
#include <string>

#include "gemm/gemm.hpp"

namespace meshgate::gemm {

enum class LtEpilogue : std::uint32_t {
  default_ = 1,    // CUBLASLT_EPILOGUE_DEFAULT
  relu = 2,        // CUBLASLT_EPILOGUE_RELU
  bias = 4,        // CUBLASLT_EPILOGUE_BIAS
  relu_bias = 6,   // CUBLASLT_EPILOGUE_RELU_BIAS
  gelu = 32,       // CUBLASLT_EPILOGUE_GELU
  gelu_bias = 36,  // CUBLASLT_EPILOGUE_GELU_BIAS
};
std::string_view to_string(LtEpilogue e);

// cuBLASLt kernels may assume a 16-byte aligned bias (spec/gemm.md section 2, precondition 2).
inline constexpr std::uint64_t kLtBiasAlignment = 16;

struct LtPlan {
  Impl executed = Impl::unfused;  // the impl that really runs (after a fallback)
  LtEpilogue epilogue = LtEpilogue::default_;
  bool bias_through_c = false;   // bias broadcast into Y, then beta = 1
  bool bias_act_kernel = false;  // a separate bias + activation kernel after the GEMM
  std::string fallback_reason;   // empty unless executed != requested

  friend bool operator==(const LtPlan&, const LtPlan&) = default;
};

// The plan for `requested` (a CUDA impl) given the epilogue and the bias pointer's byte address
// (only its alignment matters). lt_epilogue with a bias that is not 16-byte aligned falls back
// to unfused and says why; cublas (cublasGemmEx, no cuBLASLt) has the unfused shape: the GEMM,
// then the bias/activation kernel. Error(value) for a CPU impl.
LtPlan plan_lt(Impl requested, Epilogue epilogue, std::uint64_t bias_address);

// The same plan once cuBLASLt itself refused (no heuristic result or NOT_SUPPORTED): unfused.
LtPlan fallback_plan(Epilogue epilogue, std::string reason);

// Largest power of two <= 256 dividing `address`, the MIN_ALIGNMENT preference to pass.
std::uint32_t pointer_alignment(std::uint64_t address);

}  // namespace meshgate::gemm
