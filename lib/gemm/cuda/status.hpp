#pragma once
// One place where CUDA runtime and cuBLAS statuses become meshgate::Error, with the call site's
// file:line and the library's own name and description of the status.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <source_location>
#include <string_view>

namespace meshgate::gemm::cuda {

void check(cudaError_t status, std::string_view call,
           std::source_location where = std::source_location::current());
void check(cublasStatus_t status, std::string_view call,
           std::source_location where = std::source_location::current());

}  // namespace meshgate::gemm::cuda

// MESHGATE_CHECK(cudaMalloc(...)): throws Error(runtime) "file:line: <call> failed: <status>".
#define MESHGATE_CHECK(call) ::meshgate::gemm::cuda::check((call), #call)
