#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "gemm/cuda/kernels.hpp"
#include "gemm/cuda/status.hpp"

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

// The problem's index arithmetic (gemm.hpp's x_index, w_index, y_index) in a form kernels take.
struct Strides {
  std::int64_t m, n, k;
  std::int64_t x_offset, x_ld, x_batch, w_offset, w_ld, w_batch, y_ld;
  bool x_t, w_t;
};

template <class T>
__global__ void simple_gemm_kernel(const T* x, const T* w, T* y, Strides s, std::int64_t batches,
                                   float alpha) {
  const std::int64_t count = batches * s.m * s.n;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       idx < count; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = idx / s.n, j = idx % s.n;
    const std::int64_t b = row / s.m, i = row % s.m;
    const T* xb = x + s.x_offset + b * s.x_batch;
    const T* wb = w + s.w_offset + b * s.w_batch;
    float acc = 0.0f;
    for (std::int64_t kk = 0; kk < s.k; ++kk)
      acc += to_float(xb[s.x_t ? kk * s.x_ld + i : i * s.x_ld + kk]) *
             to_float(wb[s.w_t ? j * s.w_ld + kk : kk * s.w_ld + j]);
    y[row * s.y_ld + j] = from_float<T>(alpha * acc);
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
  if (total_rows(p) * p.n == 0) return;
  const Strides s{p.m,
                  p.n,
                  p.k,
                  p.x_offset,
                  x_ld(p),
                  x_batch_stride(p),
                  p.w_offset,
                  w_ld(p),
                  w_batch_stride(p),
                  y_ld(p),
                  x_transposed(p),
                  w_transposed(p)};
  by_dtype(p.dtype, [&](auto zero) {
    using T = decltype(zero);
    simple_gemm_kernel<T><<<blocks_for(total_rows(p) * p.n), 256, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), s, p.batch,
        p.alpha);
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
