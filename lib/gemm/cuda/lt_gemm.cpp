// cuBLASLt paths of spec/gemm.md section 2. Row-major Y[M,N] = op(X) op(W) is computed as the
// column-major Y^T[N,M] = op(W)^T-view * op(X)^T-view: A = W, B = X, D has N rows, so the bias
// epilogue's per-row vector is exactly bias[N]. Every layout stays CUBLASLT_ORDER_COL.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>
#include <utility>

#include "core/error.hpp"
#include "gemm/cuda/kernels.hpp"
#include "gemm/cuda/status.hpp"
#include "gemm/cuda_gemm.hpp"

namespace meshgate::gemm {

static_assert(static_cast<std::uint32_t>(LtEpilogue::default_) == CUBLASLT_EPILOGUE_DEFAULT);
static_assert(static_cast<std::uint32_t>(LtEpilogue::relu) == CUBLASLT_EPILOGUE_RELU);
static_assert(static_cast<std::uint32_t>(LtEpilogue::bias) == CUBLASLT_EPILOGUE_BIAS);
static_assert(static_cast<std::uint32_t>(LtEpilogue::relu_bias) == CUBLASLT_EPILOGUE_RELU_BIAS);
static_assert(static_cast<std::uint32_t>(LtEpilogue::gelu) == CUBLASLT_EPILOGUE_GELU);
static_assert(static_cast<std::uint32_t>(LtEpilogue::gelu_bias) == CUBLASLT_EPILOGUE_GELU_BIAS);

namespace cuda {

void check(cudaError_t status, std::string_view call, std::source_location where) {
  if (status == cudaSuccess) return;
  throw Error(ErrorKind::runtime, std::string(where.file_name()) + ":" +
                                      std::to_string(where.line()) + ": " + std::string(call) +
                                      " failed: " + cudaGetErrorName(status) + " (" +
                                      cudaGetErrorString(status) + ")");
}

void check(cublasStatus_t status, std::string_view call, std::source_location where) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(ErrorKind::runtime, std::string(where.file_name()) + ":" +
                                      std::to_string(where.line()) + ": " + std::string(call) +
                                      " failed: " + cublasLtGetStatusName(status) + " (" +
                                      cublasLtGetStatusString(status) + ")");
}

}  // namespace cuda

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for the caller, just zero GPUs
    return 0;
  }
  return count;
}

namespace {

using cuda::check;

struct LtHandleDeleter {
  void operator()(cublasLtContext* h) const { cublasLtDestroy(h); }
};
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct PrefDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
struct StreamDeleter {
  void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
};
struct EventDeleter {
  void operator()(CUevent_st* e) const { cudaEventDestroy(e); }
};
using LtHandle = std::unique_ptr<cublasLtContext, LtHandleDeleter>;
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using MatrixLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PrefDeleter>;
using DeviceBuffer = std::unique_ptr<void, DeviceFree>;
using Stream = std::unique_ptr<CUstream_st, StreamDeleter>;
using Event = std::unique_ptr<CUevent_st, EventDeleter>;

DeviceBuffer device_alloc(std::size_t bytes) {
  void* p = nullptr;
  if (bytes > 0) MESHGATE_CHECK(cudaMalloc(&p, bytes));
  return DeviceBuffer(p);
}

Event make_event() {
  cudaEvent_t e = nullptr;
  MESHGATE_CHECK(cudaEventCreate(&e));
  return Event(e);
}

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& value) {
  MESHGATE_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof value));
}
template <class T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
              const T& value) {
  MESHGATE_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &value, sizeof value));
}
template <class T>
T algo_attribute(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  std::size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof value, &written) !=
      CUBLAS_STATUS_SUCCESS)
    return T{};
  return value;
}

// Everything the heuristic's answer depends on (spec/gemm.md section 2, step 7).
struct HeuristicKey {
  std::int64_t m, n, k;
  int dtype, layout;
  std::uint32_t epilogue;
  std::uint32_t align_a, align_b, align_c, align_d;
  std::uint64_t bias_alignment;
  std::int64_t workspace;
  int device;
  auto tie() const {
    return std::tie(m, n, k, dtype, layout, epilogue, align_a, align_b, align_c, align_d,
                    bias_alignment, workspace, device);
  }
  bool operator<(const HeuristicKey& o) const { return tie() < o.tie(); }
};

struct HeuristicEntry {
  cublasLtMatmulAlgo_t algo;
  LtAlgoInfo info;
};

// Process-wide: the heuristic costs microseconds of host time per query.
std::mutex g_cache_mutex;
std::map<HeuristicKey, HeuristicEntry> g_heuristic_cache;

bool x_transposed(const GemmProblem& p) {
  return p.layout == GemmLayout::tn || p.layout == GemmLayout::tt;
}
bool w_transposed(const GemmProblem& p) {
  return p.layout == GemmLayout::nt || p.layout == GemmLayout::tt;
}

// The ready-to-launch form of one implementation on one problem.
struct Prepared {
  CudaRunInfo info;
  MatmulDesc desc;
  MatrixLayout a, b, d;
  cublasLtMatmulAlgo_t algo{};
};

}  // namespace

struct CudaGemm::State {
  GemmProblem p;
  int device = 0;
  LtHandle lt;
  Stream stream;
  DeviceBuffer x, w, bias, y, workspace;
  std::map<Impl, Prepared> prepared;

  const void* bias_ptr() const {
    return static_cast<const char*>(bias.get()) + p.bias_offset * element_size(p.dtype);
  }

  // Descriptors and algorithm for `plan`; false with `reason` when cuBLASLt has no algorithm.
  bool build(Prepared& out, const LtPlan& plan, std::string& reason) {
    const cudaDataType_t type = cuda_type(p.dtype);
    cublasLtMatmulDesc_t desc = nullptr;
    MESHGATE_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    out.desc.reset(desc);
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, w_transposed(p) ? CUBLAS_OP_T : CUBLAS_OP_N);
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, x_transposed(p) ? CUBLAS_OP_T : CUBLAS_OP_N);
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<cublasLtEpilogue_t>(plan.epilogue));
    const bool epilogue_bias = plan.epilogue == LtEpilogue::bias ||
                               plan.epilogue == LtEpilogue::relu_bias ||
                               plan.epilogue == LtEpilogue::gelu_bias;
    if (epilogue_bias) {
      const void* bias_pointer = bias_ptr();
      set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_pointer);
      set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(type));
    }
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    // A = W: stored [N,K] ('t') is column-major K x N; stored [K,N] ('n') is N x K.
    if (w_transposed(p))
      MESHGATE_CHECK(cublasLtMatrixLayoutCreate(&a, type, u(p.k), u(p.n), p.k));
    else
      MESHGATE_CHECK(cublasLtMatrixLayoutCreate(&a, type, u(p.n), u(p.k), p.n));
    out.a.reset(a);
    // B = X: stored [M,K] ('n') is column-major K x M; stored [K,M] ('t') is M x K.
    if (x_transposed(p))
      MESHGATE_CHECK(cublasLtMatrixLayoutCreate(&b, type, u(p.m), u(p.k), p.m));
    else
      MESHGATE_CHECK(cublasLtMatrixLayoutCreate(&b, type, u(p.k), u(p.m), p.k));
    out.b.reset(b);
    MESHGATE_CHECK(cublasLtMatrixLayoutCreate(&d, type, u(p.n), u(p.m), p.n));
    out.d.reset(d);

    HeuristicKey key{
        p.m,
        p.n,
        p.k,
        static_cast<int>(p.dtype),
        static_cast<int>(p.layout),
        static_cast<std::uint32_t>(plan.epilogue),
        pointer_alignment(reinterpret_cast<std::uintptr_t>(w.get())),
        pointer_alignment(reinterpret_cast<std::uintptr_t>(x.get())),
        pointer_alignment(reinterpret_cast<std::uintptr_t>(y.get())),
        pointer_alignment(reinterpret_cast<std::uintptr_t>(y.get())),
        epilogue_bias ? pointer_alignment(reinterpret_cast<std::uintptr_t>(bias_ptr())) : 0u,
        p.workspace,
        device};
    {
      std::lock_guard lock(g_cache_mutex);
      if (auto it = g_heuristic_cache.find(key); it != g_heuristic_cache.end()) {
        out.algo = it->second.algo;
        out.info.algo = it->second.info;
        out.info.heuristic_cached = true;
        return true;
      }
    }
    cublasLtMatmulPreference_t pref_raw = nullptr;
    MESHGATE_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
    Preference pref(pref_raw);
    set_pref(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
             static_cast<std::uint64_t>(p.workspace));
    set_pref(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
    set_pref(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
    set_pref(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
    set_pref(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(lt.get(), desc, a, b, d, d, pref_raw, 1, &result, &returned);
    if (status != CUBLAS_STATUS_SUCCESS || returned == 0) {
      reason = std::string("cublasLtMatmulAlgoGetHeuristic gave ") +
               (status != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusName(status) : "no algorithm") +
               " for the " + std::string(to_string(plan.epilogue)) + " epilogue";
      return false;
    }
    out.algo = result.algo;
    LtAlgoInfo& info = out.info.algo;
    info.algo_id = algo_attribute<std::int32_t>(result.algo, CUBLASLT_ALGO_CONFIG_ID);
    info.tile_id =
        static_cast<int>(algo_attribute<std::uint32_t>(result.algo, CUBLASLT_ALGO_CONFIG_TILE_ID));
    info.splitk_num = algo_attribute<std::int32_t>(result.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
    info.reduction_scheme = static_cast<int>(
        algo_attribute<std::uint32_t>(result.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
    info.stages_id = static_cast<int>(
        algo_attribute<std::uint32_t>(result.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID));
    info.workspace_bytes = result.workspaceSize;
    info.waves = result.wavesCount;
    std::lock_guard lock(g_cache_mutex);
    g_heuristic_cache.emplace(key, HeuristicEntry{result.algo, info});
    return true;
  }

  Prepared& prepare(Impl impl, bool force_fallback = false, std::string reason = "") {
    Prepared out;
    out.info.requested = impl;
    out.info.plan = force_fallback
                        ? fallback_plan(p.epilogue, reason)
                        : plan_lt(impl, p.epilogue, reinterpret_cast<std::uintptr_t>(bias_ptr()));
    out.info.ran_gemm = p.m > 0 && p.n > 0 && p.k > 0;
    if (out.info.ran_gemm) {
      std::string why;
      if (!build(out, out.info.plan, why)) {
        if (out.info.plan.executed != Impl::unfused) {
          out.info.plan = fallback_plan(p.epilogue, why);
          if (build(out, out.info.plan, why)) return store(impl, std::move(out));
        }
        // Not even a plain GEMM has an algorithm (e.g. a degenerate shape): stay correct.
        out.info.plan = fallback_plan(p.epilogue, why + "; the GEMM runs as a simple CUDA kernel");
        out.info.simple_kernel = true;
      }
    }
    return store(impl, std::move(out));
  }

  Prepared& store(Impl impl, Prepared out) {
    prepared.erase(impl);
    return prepared.emplace(impl, std::move(out)).first->second;
  }

  // Enqueues the whole implementation on the stream; returns cublasLtMatmul's status.
  cublasStatus_t enqueue(const Prepared& pr) {
    const LtPlan& plan = pr.info.plan;
    const void* b = has_bias(p.epilogue) ? bias_ptr() : nullptr;
    if (!pr.info.ran_gemm) {
      // K = 0: the product is zero and Y = act(bias); empty Y: nothing to do.
      if (p.m * p.n == 0) return CUBLAS_STATUS_SUCCESS;
      MESHGATE_CHECK(cudaMemsetAsync(
          y.get(), 0, static_cast<std::size_t>(p.m * p.n) * element_size(p.dtype), stream.get()));
      cuda::launch_bias_act(p.dtype, y.get(), b, p.m, p.n, p.epilogue, stream.get());
      return CUBLAS_STATUS_SUCCESS;
    }
    if (pr.info.simple_kernel) {
      cuda::launch_simple_gemm(p, x.get(), w.get(), y.get(), stream.get());
      if (plan.bias_act_kernel)
        cuda::launch_bias_act(p.dtype, y.get(), b, p.m, p.n, p.epilogue, stream.get());
      return CUBLAS_STATUS_SUCCESS;
    }
    float beta = 0.0f;
    if (plan.bias_through_c) {
      cuda::launch_broadcast_bias(p.dtype, y.get(), b, p.m, p.n, stream.get());
      beta = 1.0f;
    }
    const float alpha = p.alpha;
    const cublasStatus_t status =
        cublasLtMatmul(lt.get(), pr.desc.get(), &alpha, w.get(), pr.a.get(), x.get(), pr.b.get(),
                       &beta, y.get(), pr.d.get(), y.get(), pr.d.get(), &pr.algo, workspace.get(),
                       static_cast<std::size_t>(p.workspace), stream.get());
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    if (plan.bias_act_kernel)
      cuda::launch_bias_act(p.dtype, y.get(), b, p.m, p.n, p.epilogue, stream.get());
    return status;
  }
};

std::string describe(const CudaRunInfo& info) {
  std::ostringstream s;
  s << to_string(info.requested);
  if (info.plan.executed != info.requested)
    s << " -> " << to_string(info.plan.executed) << " (" << info.plan.fallback_reason << ")";
  s << ": epilogue " << to_string(info.plan.epilogue);
  if (info.plan.bias_through_c) s << ", bias via C (beta = 1)";
  if (info.plan.bias_act_kernel) s << ", bias/activation kernel";
  if (!info.ran_gemm) {
    s << ", no GEMM (empty or K = 0)";
    return s.str();
  }
  if (info.simple_kernel) return s.str();
  s << ", algo " << info.algo.algo_id << " tile " << info.algo.tile_id << " splitk "
    << info.algo.splitk_num << " reduction " << info.algo.reduction_scheme << " stages "
    << info.algo.stages_id << " workspace " << info.algo.workspace_bytes << " B"
    << (info.heuristic_cached ? " (cached)" : "");
  return s.str();
}

CudaGemm::CudaGemm(const GemmProblem& p, const GemmInputs& in, int device)
    : s_(std::make_unique<State>()) {
  validate(p, in);
  const int devices = cuda_device_count();
  if (device < 0 || device >= devices)
    throw Error(ErrorKind::runtime, "CUDA device " + std::to_string(device) + " requested but " +
                                        std::to_string(devices) + " are present");
  s_->p = p;
  s_->device = device;
  MESHGATE_CHECK(cudaSetDevice(device));
  cublasLtHandle_t lt = nullptr;
  MESHGATE_CHECK(cublasLtCreate(&lt));
  s_->lt.reset(lt);
  cudaStream_t stream = nullptr;
  MESHGATE_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  s_->stream.reset(stream);
  const auto upload = [](const HostTensor& t) {
    DeviceBuffer buffer = device_alloc(t.bytes());
    if (t.bytes() > 0)
      MESHGATE_CHECK(cudaMemcpy(buffer.get(), t.data(), t.bytes(), cudaMemcpyHostToDevice));
    return buffer;
  };
  s_->x = upload(in.x);
  s_->w = upload(in.w);
  s_->bias = upload(in.bias);
  s_->y = device_alloc(static_cast<std::size_t>(p.m * p.n) * element_size(p.dtype));
  s_->workspace = device_alloc(static_cast<std::size_t>(p.workspace));
  fill_output_nan();
}

CudaGemm::~CudaGemm() = default;
CudaGemm::CudaGemm(CudaGemm&&) noexcept = default;
CudaGemm& CudaGemm::operator=(CudaGemm&&) noexcept = default;

CudaRunInfo CudaGemm::run(Impl impl) {
  MESHGATE_CHECK(cudaSetDevice(s_->device));
  Prepared* pr = &s_->prepare(impl);
  cublasStatus_t status = s_->enqueue(*pr);
  if ((status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_EXECUTION_FAILED) &&
      pr->info.plan.executed != Impl::unfused) {
    pr = &s_->prepare(impl, true,
                      std::string("cublasLtMatmul returned ") + cublasLtGetStatusName(status) +
                          " for the " + std::string(to_string(pr->info.plan.epilogue)) +
                          " epilogue");
    status = s_->enqueue(*pr);
  }
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_EXECUTION_FAILED) {
    Prepared simple;
    simple.info.requested = impl;
    simple.info.ran_gemm = true;
    simple.info.simple_kernel = true;
    simple.info.plan = fallback_plan(
        s_->p.epilogue, std::string("cublasLtMatmul returned ") + cublasLtGetStatusName(status) +
                            " without an epilogue; the GEMM runs as a simple CUDA kernel");
    pr = &s_->store(impl, std::move(simple));
    status = s_->enqueue(*pr);
  }
  MESHGATE_CHECK(status);
  MESHGATE_CHECK(cudaStreamSynchronize(s_->stream.get()));
  return pr->info;
}

double CudaGemm::time(Impl impl, int iters) {
  if (iters <= 0)
    throw Error(ErrorKind::value, "time() needs iters >= 1, got " + std::to_string(iters));
  MESHGATE_CHECK(cudaSetDevice(s_->device));
  auto it = s_->prepared.find(impl);
  if (it == s_->prepared.end()) {
    run(impl);
    it = s_->prepared.find(impl);
  }
  Event start = make_event(), stop = make_event();
  MESHGATE_CHECK(cudaEventRecord(start.get(), s_->stream.get()));
  for (int i = 0; i < iters; ++i) MESHGATE_CHECK(s_->enqueue(it->second));
  MESHGATE_CHECK(cudaEventRecord(stop.get(), s_->stream.get()));
  MESHGATE_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0;
  MESHGATE_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return static_cast<double>(ms) * 1e-3 / iters;
}

void CudaGemm::fill_output_nan() {
  MESHGATE_CHECK(cudaSetDevice(s_->device));
  const std::size_t bytes = static_cast<std::size_t>(s_->p.m * s_->p.n) * element_size(s_->p.dtype);
  // All-ones bytes are a NaN in every supported dtype.
  if (bytes > 0) MESHGATE_CHECK(cudaMemsetAsync(s_->y.get(), 0xFF, bytes, s_->stream.get()));
  MESHGATE_CHECK(cudaStreamSynchronize(s_->stream.get()));
}

HostTensor CudaGemm::output() const {
  MESHGATE_CHECK(cudaSetDevice(s_->device));
  HostTensor y(s_->p.dtype, s_->p.m * s_->p.n);
  MESHGATE_CHECK(cudaStreamSynchronize(s_->stream.get()));
  if (y.bytes() > 0)
    MESHGATE_CHECK(cudaMemcpy(y.data(), s_->y.get(), y.bytes(), cudaMemcpyDeviceToHost));
  return y;
}

HostTensor run_cuda(Impl impl, const GemmProblem& p, const GemmInputs& in, CudaRunInfo* info) {
  CudaGemm g(p, in);
  CudaRunInfo i = g.run(impl);
  if (info != nullptr) *info = i;
  return g.output();
}

}  // namespace meshgate::gemm
