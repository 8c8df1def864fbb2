#pragma once
// Element-wise reductions of host buffers, shared by the threads backend (each rank reduces its
// chunk from every peer's buffer) and the MPI backend (user-defined ops for float16/bfloat16).
#include <cstddef>
#include <span>

#include "comm/communicator.hpp"

namespace meshgate::comm {

// dst[i] = ((src[0][i] op src[1][i]) op src[2][i]) ... in source order, for i < count.
// float16/bfloat16 are combined in float and rounded back to their format after every step,
// as a ring on the GPU stores each partial result, so the result depends only on that order.
// Integers wrap on overflow (two's complement), as NCCL's integer kernels do.
// avg is sum followed by one division by srcs.size() in the accumulation type (float for
// float16/bfloat16); it is defined for floating-point dtypes only.
// dst may alias any source: every block of sources is read before that block of dst is written.
void reduce_sources(std::span<const void* const> srcs, void* dst, std::size_t count, DType dtype,
                    ReduceOp op);

// data[i] = data[i] / divisor in the accumulation type; the local step of avg = sum / n.
void divide_elements(void* data, std::size_t count, DType dtype, int divisor);

}  // namespace meshgate::comm
