// cuBLASLt paths (docs/kinds.md, GEMM: Implementations). Row-major Y[M,N] = op(X) op(W) is computed
// as the column-major Y^T[N,M] = op(W)^T-view * op(X)^T-view: A = W, B = X, D has N rows, so the
// bias epilogue's per-row vector is exactly bias[N]. Every layout stays CUBLASLT_ORDER_COL.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

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

struct CublasHandleDeleter {
  void operator()(cublasContext* h) const { cublasDestroy(h); }
};
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
using CublasHandle = std::unique_ptr<cublasContext, CublasHandleDeleter>;
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

// Everything the heuristic's answer depends on.
struct HeuristicKey {
  std::int64_t m, n, k;
  int dtype, layout;
  std::uint32_t epilogue;
  std::uint32_t align_a, align_b, align_c, align_d;
  std::uint64_t bias_alignment;
  std::int64_t workspace;
  int device;
  std::int64_t ldx, ldw, ldy, batch, split_k;
  int tf32, partials;
  auto tie() const {
    return std::tie(m, n, k, dtype, layout, epilogue, align_a, align_b, align_c, align_d,
                    bias_alignment, workspace, device, ldx, ldw, ldy, batch, split_k, tf32,
                    partials);
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

// Strided batches: every GEMM of the batch `stride` elements after the previous one.
void set_batch(cublasLtMatrixLayout_t layout, std::int64_t batch, std::int64_t stride) {
  if (batch <= 1) return;
  const auto count = static_cast<std::int32_t>(batch);
  MESHGATE_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                  &count, sizeof count));
  MESHGATE_CHECK(cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
  LtOperands ops;  // the column-major view every cuBLASLt and cuBLAS call describes
  int device = 0;
  LtHandle lt;
  CublasHandle blas;
  Stream stream;
  DeviceBuffer x, w, bias, y, workspace, l2_flush;
  std::size_t l2_flush_bytes = 0;
  std::map<Impl, Prepared> prepared;

  const char* at(const DeviceBuffer& b, std::int64_t offset) const {
    return static_cast<const char*>(b.get()) +
           offset * static_cast<std::int64_t>(element_size(p.dtype));
  }
  const void* bias_ptr() const { return at(bias, p.bias_offset); }
  const void* x_ptr() const { return at(x, ops.b.offset); }
  const void* w_ptr() const { return at(w, ops.a.offset); }
  std::size_t y_bytes() const {
    return static_cast<std::size_t>(y_elements(p)) * element_size(p.dtype);
  }

  // The descriptors and layouts of `plan` over the column-major operands (A = W, B = X,
  // D = C = Y^T).
  void describe_matmul(Prepared& out, const LtPlan& plan) {
    const cudaDataType_t type = cuda_type(p.dtype);
    cublasLtMatmulDesc_t desc = nullptr;
    MESHGATE_CHECK(cublasLtMatmulDescCreate(
        &desc, p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    out.desc.reset(desc);
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, ops.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, ops.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<cublasLtEpilogue_t>(plan.epilogue));
    if (epilogue_bias(plan)) {
      const void* bias_pointer = bias_ptr();
      set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_pointer);
      set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(type));
      // One bias for every GEMM of a batch.
      if (ops.batch > 1) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, std::int64_t{0});
    }
    const auto layout = [&](const LtMatrix& mat, MatrixLayout& owner) {
      cublasLtMatrixLayout_t l = nullptr;
      MESHGATE_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(mat.rows),
                                                static_cast<std::uint64_t>(mat.cols), mat.ld));
      owner.reset(l);
      set_batch(l, ops.batch, mat.batch_stride);
    };
    layout(ops.a, out.a);
    layout(ops.b, out.b);
    layout(ops.d, out.d);
  }

  static bool epilogue_bias(const LtPlan& plan) {
    return plan.epilogue == LtEpilogue::bias || plan.epilogue == LtEpilogue::relu_bias ||
           plan.epilogue == LtEpilogue::gelu_bias;
  }

  HeuristicKey key_of(const LtPlan& plan) const {
    return HeuristicKey{
        p.m,
        p.n,
        p.k,
        static_cast<int>(p.dtype),
        static_cast<int>(p.layout),
        static_cast<std::uint32_t>(plan.epilogue),
        pointer_alignment(reinterpret_cast<std::uintptr_t>(w_ptr())),
        pointer_alignment(reinterpret_cast<std::uintptr_t>(x_ptr())),
        pointer_alignment(reinterpret_cast<std::uintptr_t>(y.get())),
        pointer_alignment(reinterpret_cast<std::uintptr_t>(y.get())),
        epilogue_bias(plan) ? pointer_alignment(reinterpret_cast<std::uintptr_t>(bias_ptr())) : 0u,
        p.workspace,
        device,
        x_ld(p),
        w_ld(p),
        y_ld(p),
        p.batch,
        p.split_k,
        p.tf32 ? 1 : 0,
        static_cast<int>(p.split_k_partials)};
  }

  // The heuristic's first answer for `out`'s descriptors; with a forced split-K, the first of
  // its answers that accepts the problem's split-K, else the first algorithm of all that does
  // (the heuristic's own first choice, marked not forced, when none does). False with `reason` when cuBLASLt has no algorithm. `use_cache`
  // off always queries (the overhead measurement).
  bool choose_algorithm(Prepared& out, const LtPlan& plan, bool use_cache, std::string& reason) {
    const HeuristicKey key = key_of(plan);
    if (use_cache) {
      std::lock_guard lock(g_cache_mutex);
      if (auto it = g_heuristic_cache.find(key); it != g_heuristic_cache.end()) {
        out.algo = it->second.algo;
        out.info.algo = it->second.info;
        out.info.heuristic_cached = true;
        out.info.split_k_forced = p.split_k > 0 && it->second.info.splitk_num == p.split_k;
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
    if (p.split_k == 1) {
      // No split-K at all: forbid every reduction scheme.
      set_pref(pref_raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
               static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE));
    }
    // The heuristic's favourite kernels on Hopper often take no split-K parameter, so a forced
    // split-K looks further down its list.
    constexpr int kCandidatesForSplitK = 16;
    std::vector<cublasLtMatmulHeuristicResult_t> results(p.split_k > 1 ? kCandidatesForSplitK : 1);
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        lt.get(), out.desc.get(), out.a.get(), out.b.get(), out.d.get(), out.d.get(), pref_raw,
        static_cast<int>(results.size()), results.data(), &returned);
    if (status != CUBLAS_STATUS_SUCCESS || returned == 0) {
      reason = std::string("cublasLtMatmulAlgoGetHeuristic gave ") +
               (status != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusName(status) : "no algorithm") +
               " for the " + std::string(to_string(plan.epilogue)) + " epilogue";
      return false;
    }
    out.algo = results.front().algo;
    std::size_t workspace_needed = results.front().workspaceSize;
    float waves = results.front().wavesCount;
    out.info.split_k_forced = false;
    if (p.split_k > 1) {
      check_lt_split_k(p);
      for (int i = 0; i < returned && !out.info.split_k_forced; ++i)
        force_split_k(out, results[static_cast<std::size_t>(i)].algo, workspace_needed, waves);
      if (!out.info.split_k_forced) force_split_k_from_all_algorithms(out, workspace_needed, waves);
    }
    LtAlgoInfo& info = out.info.algo;
    info.algo_id = algo_attribute<std::int32_t>(out.algo, CUBLASLT_ALGO_CONFIG_ID);
    info.tile_id =
        static_cast<int>(algo_attribute<std::uint32_t>(out.algo, CUBLASLT_ALGO_CONFIG_TILE_ID));
    info.splitk_num = algo_attribute<std::int32_t>(out.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
    info.reduction_scheme = static_cast<int>(
        algo_attribute<std::uint32_t>(out.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
    info.stages_id =
        static_cast<int>(algo_attribute<std::uint32_t>(out.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID));
    info.workspace_bytes = workspace_needed;
    info.waves = waves;
    // split_k 1 is applied through the reduction-scheme mask, which leaves only unsplit kernels.
    if (p.split_k == 1) out.info.split_k_forced = info.splitk_num == 1;
    if (use_cache) {
      std::lock_guard lock(g_cache_mutex);
      g_heuristic_cache.emplace(key, HeuristicEntry{out.algo, info});
    }
    return true;
  }

  // None of the heuristic's candidates takes the split (its Hopper kernels mostly do not):
  // every algorithm cuBLASLt has for these types, with each tile and then each stage count it
  // supports, initialised and checked with the problem's split-K, as cuBLASLt's auto-tuning
  // examples search; the first that passes is used. An unset stage count comes first, since
  // cuBLASLt then picks one itself.
  void force_split_k_from_all_algorithms(Prepared& out, std::size_t& workspace_needed,
                                         float& waves) {
    const cudaDataType_t type = cuda_type(p.dtype);
    const cublasComputeType_t compute = p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    constexpr int kMaxAlgorithms = 256;
    std::vector<int> ids(kMaxAlgorithms);
    int count = 0;
    if (cublasLtMatmulAlgoGetIds(lt.get(), compute, CUDA_R_32F, type, type, type, type,
                                 kMaxAlgorithms, ids.data(), &count) != CUBLAS_STATUS_SUCCESS)
      return;
    for (int i = 0; i < count; ++i) {
      cublasLtMatmulAlgo_t algo{};
      if (cublasLtMatmulAlgoInit(lt.get(), compute, CUDA_R_32F, type, type, type, type,
                                 ids[static_cast<std::size_t>(i)], &algo) != CUBLAS_STATUS_SUCCESS)
        continue;
      std::vector<std::uint32_t> tiles = capability_list(algo, CUBLASLT_ALGO_CAP_TILE_IDS);
      if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
      std::vector<std::uint32_t> stages = capability_list(algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
      stages.insert(stages.begin(), CUBLASLT_MATMUL_STAGES_UNDEFINED);
      for (const std::uint32_t tile : tiles)
        for (const std::uint32_t stage : stages) {
          cublasLtMatmulAlgo_t candidate = algo;
          if (cublasLtMatmulAlgoConfigSetAttribute(&candidate, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                                   sizeof tile) != CUBLAS_STATUS_SUCCESS ||
              cublasLtMatmulAlgoConfigSetAttribute(&candidate, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                   &stage, sizeof stage) != CUBLAS_STATUS_SUCCESS)
            continue;
          if (force_split_k(out, candidate, workspace_needed, waves)) return;
        }
    }
  }

  // An algorithm capability that is a list of ids (tiles, stage counts); empty when it has none.
  static std::vector<std::uint32_t> capability_list(const cublasLtMatmulAlgo_t& algo,
                                                    cublasLtMatmulAlgoCapAttributes_t attribute) {
    std::size_t bytes = 0;
    std::vector<std::uint32_t> ids;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, nullptr, 0, &bytes) !=
            CUBLAS_STATUS_SUCCESS ||
        bytes == 0)
      return ids;
    ids.resize(bytes / sizeof(std::uint32_t));
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, ids.data(), bytes, &bytes) !=
        CUBLAS_STATUS_SUCCESS)
      ids.clear();
    return ids;
  }

  // Sets SPLITK_NUM and the reduction scheme the problem asks for on `candidate` and, when the
  // algorithm supports split-K with that scheme and cublasLtMatmulAlgoCheck accepts it within
  // the workspace, makes it `out`'s algorithm (split_k_forced says so).
  bool force_split_k(Prepared& out, cublasLtMatmulAlgo_t candidate, std::size_t& workspace_needed,
                     float& waves) {
    std::int32_t supported = 0;
    std::uint32_t schemes = 0;
    std::size_t written = 0;
    const std::uint32_t scheme = p.split_k_partials == DType::f32
                                     ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                                     : CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    if (cublasLtMatmulAlgoCapGetAttribute(&candidate, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &supported,
                                          sizeof supported, &written) != CUBLAS_STATUS_SUCCESS ||
        supported == 0 ||
        cublasLtMatmulAlgoCapGetAttribute(&candidate, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK,
                                          &schemes, sizeof schemes,
                                          &written) != CUBLAS_STATUS_SUCCESS ||
        (schemes & scheme) == 0)
      return false;
    const auto splits = static_cast<std::int32_t>(p.split_k);
    if (cublasLtMatmulAlgoConfigSetAttribute(&candidate, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                             sizeof splits) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigSetAttribute(&candidate, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                             &scheme, sizeof scheme) != CUBLAS_STATUS_SUCCESS)
      return false;
    cublasLtMatmulHeuristicResult_t checked{};
    if (cublasLtMatmulAlgoCheck(lt.get(), out.desc.get(), out.a.get(), out.b.get(), out.d.get(),
                                out.d.get(), &candidate, &checked) != CUBLAS_STATUS_SUCCESS ||
        checked.workspaceSize > static_cast<std::size_t>(p.workspace))
      return false;
    out.algo = candidate;
    workspace_needed = checked.workspaceSize;
    waves = checked.wavesCount;
    out.info.split_k_forced = true;
    return true;
  }

  Prepared& prepare(Impl impl, bool force_fallback = false, std::string reason = "") {
    Prepared out;
    out.info.requested = impl;
    out.info.plan = force_fallback
                        ? fallback_plan(p.epilogue, reason)
                        : plan_lt(impl, p.epilogue, reinterpret_cast<std::uintptr_t>(bias_ptr()));
    out.info.ran_gemm = p.m > 0 && p.n > 0 && p.k > 0;
    if (!out.info.ran_gemm || out.info.plan.executed == Impl::cublas)
      return store(impl, std::move(out));
    std::string why;
    describe_matmul(out, out.info.plan);
    if (choose_algorithm(out, out.info.plan, true, why)) return store(impl, std::move(out));
    if (out.info.plan.executed != Impl::unfused) {
      out.info.plan = fallback_plan(p.epilogue, why);
      describe_matmul(out, out.info.plan);
      if (choose_algorithm(out, out.info.plan, true, why)) return store(impl, std::move(out));
    }
    // Not even a plain GEMM has an algorithm (e.g. a degenerate shape): stay correct.
    out.info.plan = fallback_plan(p.epilogue, why + "; the GEMM runs as a simple CUDA kernel");
    out.info.simple_kernel = true;
    return store(impl, std::move(out));
  }

  Prepared& store(Impl impl, Prepared out) {
    prepared.erase(impl);
    return prepared.emplace(impl, std::move(out)).first->second;
  }

  // D = op(A) op(B) through cublasGemmEx (strided batched for a batch), on the same operands.
  cublasStatus_t enqueue_cublas(float alpha) {
    check_fits_cublas(ops);
    const cudaDataType_t type = cuda_type(p.dtype);
    const cublasComputeType_t compute = p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t ta = ops.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = ops.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const float beta = 0.0f;
    const auto i32 = [](std::int64_t v) { return static_cast<int>(v); };
    if (ops.batch == 1)
      return cublasGemmEx(blas.get(), ta, tb, i32(ops.m), i32(ops.n), i32(ops.k), &alpha, w_ptr(),
                          type, i32(ops.a.ld), x_ptr(), type, i32(ops.b.ld), &beta, y.get(), type,
                          i32(ops.d.ld), compute, CUBLAS_GEMM_DEFAULT);
    return cublasGemmStridedBatchedEx(
        blas.get(), ta, tb, i32(ops.m), i32(ops.n), i32(ops.k), &alpha, w_ptr(), type,
        i32(ops.a.ld), ops.a.batch_stride, x_ptr(), type, i32(ops.b.ld), ops.b.batch_stride, &beta,
        y.get(), type, i32(ops.d.ld), ops.d.batch_stride, i32(ops.batch), compute,
        CUBLAS_GEMM_DEFAULT);
  }

  // Enqueues the whole implementation on the stream; returns the GEMM library's status.
  cublasStatus_t enqueue(const Prepared& pr) {
    const LtPlan& plan = pr.info.plan;
    const void* b = has_bias(p.epilogue) ? bias_ptr() : nullptr;
    const std::int64_t rows = total_rows(p);
    if (!pr.info.ran_gemm) {
      // K = 0: the product is zero and Y = act(bias); empty Y: nothing to do. Only the logical
      // elements are zeroed: the padding of a wider ldy is no part of the output and keeps
      // what it held, as on every other path.
      if (rows * p.n == 0) return CUBLAS_STATUS_SUCCESS;
      const std::size_t es = element_size(p.dtype);
      MESHGATE_CHECK(cudaMemset2DAsync(y.get(), static_cast<std::size_t>(y_ld(p)) * es, 0,
                                       static_cast<std::size_t>(p.n) * es,
                                       static_cast<std::size_t>(rows), stream.get()));
      cuda::launch_bias_act(p.dtype, y.get(), b, rows, p.n, y_ld(p), p.epilogue, stream.get());
      return CUBLAS_STATUS_SUCCESS;
    }
    if (pr.info.simple_kernel) {
      cuda::launch_simple_gemm(p, x.get(), w.get(), y.get(), stream.get());
      if (plan.bias_act_kernel)
        cuda::launch_bias_act(p.dtype, y.get(), b, rows, p.n, y_ld(p), p.epilogue, stream.get());
      return CUBLAS_STATUS_SUCCESS;
    }
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    if (plan.executed == Impl::cublas) {
      status = enqueue_cublas(p.alpha);
    } else {
      float beta = 0.0f;
      if (plan.bias_through_c) {
        cuda::launch_broadcast_bias(p.dtype, y.get(), b, rows, p.n, y_ld(p), stream.get());
        beta = 1.0f;
      }
      const float alpha = p.alpha;
      status = cublasLtMatmul(lt.get(), pr.desc.get(), &alpha, w_ptr(), pr.a.get(), x_ptr(),
                              pr.b.get(), &beta, y.get(), pr.d.get(), y.get(), pr.d.get(), &pr.algo,
                              workspace.get(), static_cast<std::size_t>(p.workspace), stream.get());
    }
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    if (plan.bias_act_kernel)
      cuda::launch_bias_act(p.dtype, y.get(), b, rows, p.n, y_ld(p), p.epilogue, stream.get());
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
  if (info.plan.executed == Impl::cublas) {
    s << ", cublasGemmEx";
    return s.str();
  }
  s << ", algo " << info.algo.algo_id << " tile " << info.algo.tile_id << " splitk "
    << info.algo.splitk_num << (info.split_k_forced ? " (forced)" : "") << " reduction "
    << info.algo.reduction_scheme << " stages " << info.algo.stages_id << " workspace "
    << info.algo.workspace_bytes << " B" << (info.heuristic_cached ? " (cached)" : "");
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
  s_->ops = lt_operands(p);
  s_->device = device;
  MESHGATE_CHECK(cudaSetDevice(device));
  cublasLtHandle_t lt = nullptr;
  MESHGATE_CHECK(cublasLtCreate(&lt));
  s_->lt.reset(lt);
  cudaStream_t stream = nullptr;
  MESHGATE_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  s_->stream.reset(stream);
  cublasHandle_t blas = nullptr;
  MESHGATE_CHECK(cublasCreate(&blas));
  s_->blas.reset(blas);
  MESHGATE_CHECK(cublasSetStream(blas, stream));
  // The inputs go up on the case's own stream, the one every GEMM of the case runs on, so the
  // GEMMs are ordered after the copies (a non-blocking stream does not wait for the legacy
  // default stream that a plain cudaMemcpy would use).
  const auto upload = [&](const HostTensor& t) {
    DeviceBuffer buffer = device_alloc(t.bytes());
    if (t.bytes() > 0)
      MESHGATE_CHECK(cudaMemcpyAsync(buffer.get(), t.data(), t.bytes(), cudaMemcpyHostToDevice,
                                     s_->stream.get()));
    return buffer;
  };
  s_->x = upload(in.x);
  s_->w = upload(in.w);
  s_->bias = upload(in.bias);
  s_->y = device_alloc(s_->y_bytes());
  s_->workspace = device_alloc(static_cast<std::size_t>(p.workspace));
  // cuBLAS gets the same workspace as cuBLASLt, so that the two choose under the same budget.
  MESHGATE_CHECK(
      cublasSetWorkspace(blas, s_->workspace.get(), static_cast<std::size_t>(p.workspace)));
  int l2_bytes = 0;
  MESHGATE_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  s_->l2_flush_bytes = 2 * static_cast<std::size_t>(std::max(l2_bytes, 1 << 20));
  fill_output_nan();  // also waits for the uploads: the host buffers may go away after this
}

CudaGemm::~CudaGemm() = default;
CudaGemm::CudaGemm(CudaGemm&&) noexcept = default;
CudaGemm& CudaGemm::operator=(CudaGemm&&) noexcept = default;

CudaRunInfo CudaGemm::run(Impl impl) {
  MESHGATE_CHECK(cudaSetDevice(s_->device));
  Prepared* pr = &s_->prepare(impl);
  cublasStatus_t status = s_->enqueue(*pr);
  const auto failed = [&](std::string_view what) {
    return std::string(what) + " returned " + cublasLtGetStatusName(status);
  };
  // Any cuBLASLt failure falls back to the unfused path, as PyTorch's addmm retries without Lt
  // (#150147); the reason stays in the plan so that the fallback is never silent.
  if (status != CUBLAS_STATUS_SUCCESS && pr->info.plan.executed != Impl::unfused &&
      pr->info.plan.executed != Impl::cublas) {
    pr = &s_->prepare(impl, true,
                      failed("cublasLtMatmul") + " for the " +
                          std::string(to_string(pr->info.plan.epilogue)) + " epilogue");
    status = s_->enqueue(*pr);
  }
  if (status != CUBLAS_STATUS_SUCCESS) {
    Prepared simple;
    simple.info.requested = impl;
    simple.info.ran_gemm = true;
    simple.info.simple_kernel = true;
    simple.info.plan = fallback_plan(
        s_->p.epilogue,
        failed(pr->info.plan.executed == Impl::cublas ? "cublasGemmEx" : "cublasLtMatmul") +
            " without an epilogue; the GEMM runs as a simple CUDA kernel");
    pr = &s_->store(impl, std::move(simple));
    status = s_->enqueue(*pr);
  }
  MESHGATE_CHECK(status);
  MESHGATE_CHECK(cudaStreamSynchronize(s_->stream.get()));
  return pr->info;
}

double CudaGemm::sample(Impl impl, bool cold_l2) {
  MESHGATE_CHECK(cudaSetDevice(s_->device));
  auto it = s_->prepared.find(impl);
  if (it == s_->prepared.end()) {
    run(impl);
    it = s_->prepared.find(impl);
  }
  if (cold_l2) {
    if (!s_->l2_flush) s_->l2_flush = device_alloc(s_->l2_flush_bytes);
    MESHGATE_CHECK(cudaMemsetAsync(s_->l2_flush.get(), 0, s_->l2_flush_bytes, s_->stream.get()));
  }
  Event start = make_event(), stop = make_event();
  MESHGATE_CHECK(cudaEventRecord(start.get(), s_->stream.get()));
  MESHGATE_CHECK(s_->enqueue(it->second));
  MESHGATE_CHECK(cudaEventRecord(stop.get(), s_->stream.get()));
  MESHGATE_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0;
  MESHGATE_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return static_cast<double>(ms) * 1e-3;
}

double CudaGemm::sample_calls(Impl impl, std::int64_t calls) {
  if (calls < 1)
    throw Error(ErrorKind::value, "sample_calls: calls must be at least 1, got " +
                                      std::to_string(calls));
  MESHGATE_CHECK(cudaSetDevice(s_->device));
  auto it = s_->prepared.find(impl);
  if (it == s_->prepared.end()) {
    run(impl);
    it = s_->prepared.find(impl);
  }
  Event start = make_event(), stop = make_event();
  MESHGATE_CHECK(cudaEventRecord(start.get(), s_->stream.get()));
  for (std::int64_t i = 0; i < calls; ++i) MESHGATE_CHECK(s_->enqueue(it->second));
  MESHGATE_CHECK(cudaEventRecord(stop.get(), s_->stream.get()));
  MESHGATE_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0;
  MESHGATE_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return static_cast<double>(ms) * 1e-3;
}

LtSetupOverhead CudaGemm::measure_setup_overhead(Impl impl) {
  MESHGATE_CHECK(cudaSetDevice(s_->device));
  LtSetupOverhead o;
  const LtPlan plan =
      plan_lt(impl, s_->p.epilogue, reinterpret_cast<std::uintptr_t>(s_->bias_ptr()));
  if (plan.executed == Impl::cublas || s_->p.m * s_->p.n * s_->p.k == 0) return o;
  Prepared scratch;
  auto start = std::chrono::steady_clock::now();
  s_->describe_matmul(scratch, plan);
  o.descriptors_s = seconds_since(start);
  std::string ignored;
  start = std::chrono::steady_clock::now();
  s_->choose_algorithm(scratch, plan, false, ignored);
  o.heuristic_s = seconds_since(start);
  return o;
}

void CudaGemm::fill_output_nan() {
  MESHGATE_CHECK(cudaSetDevice(s_->device));
  // All-ones bytes are a NaN in every supported dtype (padding included).
  if (s_->y_bytes() > 0)
    MESHGATE_CHECK(cudaMemsetAsync(s_->y.get(), 0xFF, s_->y_bytes(), s_->stream.get()));
  MESHGATE_CHECK(cudaStreamSynchronize(s_->stream.get()));
}

HostTensor CudaGemm::output() const {
  MESHGATE_CHECK(cudaSetDevice(s_->device));
  HostTensor y(s_->p.dtype, y_elements(s_->p));
  if (y.bytes() > 0)
    MESHGATE_CHECK(cudaMemcpyAsync(y.data(), s_->y.get(), y.bytes(), cudaMemcpyDeviceToHost,
                                   s_->stream.get()));
  MESHGATE_CHECK(cudaStreamSynchronize(s_->stream.get()));
  return y;
}

std::string cuda_numerics_environment(int device) {
  cudaDeviceProp prop{};
  MESHGATE_CHECK(cudaGetDeviceProperties(&prop, device));
  int blas_major = 0, blas_minor = 0, blas_patch = 0;
  cublasGetProperty(MAJOR_VERSION, &blas_major);
  cublasGetProperty(MINOR_VERSION, &blas_minor);
  cublasGetProperty(PATCH_LEVEL, &blas_patch);
  return "cuda: " + std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + "), cuBLASLt " + std::to_string(cublasLtGetVersion()) +
         ", cuBLAS " + std::to_string(blas_major) + "." + std::to_string(blas_minor) + "." +
         std::to_string(blas_patch);
}

std::optional<BlasLibrary> cublaslt_library() {
  const std::size_t v = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  BlasLibrary lib;
  lib.version = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                std::to_string(v % 100);
  // The definition the loader bound, looked up by name: taking the function's address here may
  // give the executable's PLT entry, whose file is the runner, not the library.
  Dl_info where{};
  if (void* f = dlsym(RTLD_DEFAULT, "cublasLtGetVersion");
      f != nullptr && dladdr(f, &where) != 0 && where.dli_fname != nullptr)
    lib.path = where.dli_fname;
  return lib;
}

HostTensor run_cuda(Impl impl, const GemmProblem& p, const GemmInputs& in, CudaRunInfo* info) {
  CudaGemm g(p, in);
  CudaRunInfo i = g.run(impl);
  if (info != nullptr) *info = i;
  return g.output();
}

}  // namespace meshgate::gemm
