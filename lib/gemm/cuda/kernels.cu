#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "gemm/cuda/kernels.hpp"
#include "gemm/cuda/status.hpp"
#include "gemm/lt_plan.hpp"

namespace meshgate::gemm::cuda {
namespace {

__device__ float to_float(float v) {
  return v;
}
__device__ float to_float(__half v) {
  return __half2float(v);
}
__device__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <class T>
__device__ T from_float(float v);
template <>
__device__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Same formulas as the host reference (gemm/numeric.hpp), in fp32 as cuBLASLt's epilogue.
__device__ float activate(Epilogue e, float x) {
  if (e == Epilogue::relu_bias) return x < 0.0f ? 0.0f : x;
  if (e == Epilogue::gelu_bias)
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  return x;
}

template <class T>
__global__ void bias_act_kernel(T* y, const T* bias, std::int64_t rows, std::int64_t n,
                                std::int64_t ldy, Epilogue e) {
  const std::int64_t count = rows * n;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / n, j = i % n;
    float v = to_float(y[r * ldy + j]);
    if (bias != nullptr) v += to_float(bias[j]);
    y[r * ldy + j] = from_float<T>(activate(e, v));
  }
}

template <class T>
__global__ void broadcast_kernel(T* y, const T* bias, std::int64_t rows, std::int64_t n,
                                 std::int64_t ldy) {
  const std::int64_t count = rows * n;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[(i / n) * ldy + i % n] = bias[i % n];
}

// D = alpha * op(A) op(B) on the column-major operands that cuBLASLt would be given, one
// thread per element of D: consecutive threads walk down a column of D, a row of Y in memory.
template <class T>
__global__ void simple_gemm_kernel(const T* w, const T* x, T* y, LtOperands o, float alpha) {
  const std::int64_t count = o.batch * o.m * o.n;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       idx < count; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = idx % o.m, c = idx / o.m % o.n, b = idx / (o.m * o.n);
    float acc = 0.0f;
    for (std::int64_t l = 0; l < o.k; ++l)
      acc += to_float(w[op_element(o.a, o.trans_a, r, l, b)]) *
             to_float(x[op_element(o.b, o.trans_b, l, c, b)]);
    y[op_element(o.d, false, r, c, b)] = from_float<T>(alpha * acc);
  }
}

unsigned blocks_for(std::int64_t count) {
  constexpr std::int64_t kThreads = 256, kMaxBlocks = 65535;
  return static_cast<unsigned>(
      std::clamp<std::int64_t>((count + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

template <class F>
void by_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::f16:
      return f(__half{});
    case DType::bf16:
      return f(__nv_bfloat16{});
  }
}

}  // namespace

void launch_bias_act(DType dtype, void* y, const void* bias, std::int64_t rows, std::int64_t n,
                     std::int64_t ldy, Epilogue epilogue, cudaStream_t stream) {
  if (rows * n == 0) return;
  by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    bias_act_kernel<T><<<blocks_for(rows * n), 256, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), rows, n, ldy, epilogue);
  });
  MESHGATE_CHECK(cudaGetLastError());
}

void launch_simple_gemm(const GemmProblem& p, const void* x, const void* w, void* y,
                        cudaStream_t stream) {
  const LtOperands o = lt_operands(p);
  if (o.batch * o.m * o.n == 0) return;
  by_dtype(p.dtype, [&](auto zero) {
    using T = decltype(zero);
    simple_gemm_kernel<T><<<blocks_for(o.batch * o.m * o.n), 256, 0, stream>>>(
        static_cast<const T*>(w), static_cast<const T*>(x), static_cast<T*>(y), o, p.alpha);
  });
  MESHGATE_CHECK(cudaGetLastError());
}

void launch_broadcast_bias(DType dtype, void* y, const void* bias, std::int64_t rows,
                           std::int64_t n, std::int64_t ldy, cudaStream_t stream) {
  if (rows * n == 0) return;
  by_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    broadcast_kernel<T><<<blocks_for(rows * n), 256, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), rows, n, ldy);
  });
  MESHGATE_CHECK(cudaGetLastError());
}

}  // namespace meshgate::gemm::cuda
