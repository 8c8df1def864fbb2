#pragma once
// Bias-fused GEMM as PyTorch sees it (docs/kinds.md, GEMM): Y[M,N] = act(alpha * op(X) * op(W) +
// bias[N]), every matrix row-major (packed or with a padded leading dimension), optionally a
// strided batch of such GEMMs sharing one bias, fp32 accumulation for every dtype. This header
// holds the problem description, its validation, host tensors and deterministic inputs; the fp64
// reference and the comparison live in gemm/reference.hpp, the CPU implementations in
// gemm/cpu_gemm.hpp and the cuBLASLt ones in gemm/cuda_gemm.hpp.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshgate::gemm {

enum class DType { f32, f16, bf16 };
enum class Epilogue { none, bias, relu_bias, gelu_bias };  // gelu = tanh approximation
// Two letters op(X), op(W). X is stored [M,K] for 'n' and [K,M] for 't' (a .t() view);
// W is stored [K,N] for 'n' and [N,K] for 't', so the default `nt` is nn.Linear.
enum class GemmLayout { nt, nn, tn, tt };
enum class Device { cpu, cuda };
enum class Impl {
  cpu_reference,  // the fp64 reference, rounded once to the output dtype
  cpu_epilogue,   // blocked GEMM, bias + activation applied while storing each block
  cpu_unfused,    // GEMM, then a bias pass, then an activation pass (a rounding after each)
  cpu_beta_bias,  // bias broadcast into Y, GEMM accumulating with beta = 1, activation pass
  lt_epilogue,    // cuBLASLt BIAS / RELU_BIAS / GELU_BIAS epilogue
  lt_beta_bias,   // cuBLASLt with the broadcast bias as C and beta = 1
  unfused,        // cuBLASLt GEMM, then one bias + activation kernel
  cublas,         // plain cuBLAS (cublasGemmEx), then one bias + activation kernel
};

std::string_view to_string(DType d);
std::string_view to_string(Epilogue e);
std::string_view to_string(GemmLayout l);
std::string_view to_string(Device d);
std::string_view to_string(Impl i);
// Parsers accept exactly the names above (and the dtype aliases fp32/float32, fp16/float16/half,
// bfloat16); anything else is Error(value) listing the accepted names.
DType parse_dtype(std::string_view s);
Epilogue parse_epilogue(std::string_view s);
GemmLayout parse_layout(std::string_view s);
Device parse_device(std::string_view s);
Impl parse_impl(std::string_view s);

std::size_t element_size(DType d);
bool has_bias(Epilogue e);
Device device_of(Impl i);
// Every implementation that runs on `d`, in enum order.
std::vector<Impl> impls_for(Device d);
// The fused implementation of a device (cpu_epilogue, lt_epilogue) and the alternatives it is
// measured against (the other implementations that compute the same thing, not the reference).
Impl fused_impl(Device d);
std::vector<Impl> alternative_impls(Device d);

struct GemmProblem {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  DType dtype = DType::f32;
  Epilogue epilogue = Epilogue::bias;
  GemmLayout layout = GemmLayout::nt;
  float alpha = 1.0f;                   // scales the product only, never the bias
  std::int64_t bias_offset = 0;         // elements between the bias buffer start and bias[0]
  std::int64_t workspace = 32LL << 20;  // cuBLASLt workspace bytes (32 MiB, Hopper default)
  // Leading dimensions of the stored matrices in elements; 0 = packed (the stored row length).
  // X is stored [M,K] ('n') or [K,M] ('t'), W [K,N] ('n') or [N,K] ('t'), Y [M,N].
  std::int64_t ldx = 0;
  std::int64_t ldw = 0;
  std::int64_t ldy = 0;
  std::int64_t x_offset = 0;  // elements between the X buffer start and X[0] (misaligned A/B)
  std::int64_t w_offset = 0;
  std::int64_t batch = 1;  // a strided batch of GEMMs; one bias for all (bias batch stride 0)
  bool tf32 = false;       // fp32 only: inputs rounded to TF32 (CUBLAS_COMPUTE_32F_FAST_TF32)
  // Split-K: K cut into this many slices whose partial sums are reduced; 0 = the library's
  // choice (cuBLASLt's heuristic; one slice on the CPU). The partial sums are stored in
  // `split_k_partials` before the reduction: float32 keeps them at compute precision, the output
  // dtype is cuBLASLt's OUTPUT_TYPE reduction scheme (the numerics of PyTorch #180875).
  std::int64_t split_k = 0;
  DType split_k_partials = DType::f32;
};

// Error(value) naming the field, its value and the remedy: negative sizes or offsets,
// a non-finite alpha, element counts that overflow int64 (offsets included), a leading
// dimension below the stored row length, TF32 on a 16-bit dtype, a batch below 1.
void validate(const GemmProblem& p);

// Effective leading dimensions, batch strides and element counts of the stored tensors.
std::int64_t x_ld(const GemmProblem& p);
std::int64_t w_ld(const GemmProblem& p);
std::int64_t y_ld(const GemmProblem& p);
std::int64_t x_batch_stride(const GemmProblem& p);
std::int64_t w_batch_stride(const GemmProblem& p);
std::int64_t y_batch_stride(const GemmProblem& p);  // M * ldy
std::int64_t x_elements(const GemmProblem& p);      // x_offset + batch * x_batch_stride
std::int64_t w_elements(const GemmProblem& p);
std::int64_t y_elements(const GemmProblem& p);  // batch * M * ldy
// batch * M: the output rows of every GEMM of the batch, numbered batch-major.
std::int64_t total_rows(const GemmProblem& p);
// Whether Y has any logical element (total_rows and N both above 0). Without one there is
// nothing to compute, check, hash or compare, however large the other sizes or the batch are:
// every loop over rows or batches is skipped, so that no work grows with them.
bool has_elements(const GemmProblem& p);
// 2 * M * N * K.
double flops(const GemmProblem& p);

// A packed host buffer of `dtype` elements. fp16/bf16 hold their bit patterns.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::int64_t size);  // zero-filled

  DType dtype() const noexcept { return dtype_; }
  std::int64_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return storage_.size(); }
  const void* data() const noexcept { return storage_.data(); }
  void* data() noexcept { return storage_.data(); }

  float get(std::int64_t i) const;        // exact upcast of element i
  void set(std::int64_t i, float value);  // rounds to nearest even
  void fill_nan();                        // so that unwritten elements fail every comparison

 private:
  DType dtype_ = DType::f32;
  std::int64_t size_ = 0;
  std::vector<std::byte> storage_;
};

// The inputs of one problem. `bias` holds bias_offset + N elements; bias[j] of the problem is
// element bias_offset + j (so a case can make the bias pointer misaligned on purpose); X and W
// likewise start at x_offset / w_offset and have x_elements / w_elements elements.
struct GemmInputs {
  HostTensor x;     // stored as the layout, ldx and batch say
  HostTensor w;     // stored as the layout, ldw and batch say
  HostTensor bias;  // bias_offset + N elements
};

// Deterministic inputs from (seed, tensor, index): X ~ U(-1,1), W ~ U(-1,1)*sqrt(3/K) so that
// outputs stay O(1) for every K, bias ~ U(-0.5,0.5); each value already rounded to the dtype.
GemmInputs make_inputs(const GemmProblem& p, std::uint64_t seed = 0x5eed);
// Error(value) when a tensor's dtype or element count does not match the problem.
void validate(const GemmProblem& p, const GemmInputs& in);
void validate_output(const GemmProblem& p, const HostTensor& y);

// Element (i, kk) of op(X), (kk, j) of op(W) and (row, j) of Y of GEMM `batch` as stored flat
// indices (offsets, leading dimensions and batch strides included). y_index takes a row of
// total_rows(p).
std::int64_t x_index(const GemmProblem& p, std::int64_t i, std::int64_t kk, std::int64_t batch = 0);
std::int64_t w_index(const GemmProblem& p, std::int64_t kk, std::int64_t j, std::int64_t batch = 0);
std::int64_t y_index(const GemmProblem& p, std::int64_t row, std::int64_t j);
bool x_transposed(const GemmProblem& p);
bool w_transposed(const GemmProblem& p);

// Bitwise identity of an output: a 64-bit FNV-1a hash over the bit patterns of Y's logical
// elements (padding excluded), as 16 hex digits. Equal outputs give equal fingerprints on every
// machine; any changed bit changes it.
std::string fingerprint(const GemmProblem& p, const HostTensor& y);

// Distance in units in the last place of the dtype between two values of it (both already
// representable): the number of representable values between them. NaN against anything but
// the same NaN, or infinities of different sign, count as the largest distance.
std::uint64_t ulp_distance(DType d, float a, float b);
struct UlpSummary {
  std::uint64_t max = 0;
  double mean = 0;
  std::int64_t differing = 0;  // elements that are not bitwise equal
  std::int64_t compared = 0;
};
// Y against `expected` (both outputs of `p`) over every logical element.
UlpSummary ulp_summary(const GemmProblem& p, const HostTensor& expected, const HostTensor& y);

// Number of CUDA devices meshgate can use: 0 when built without CUDA or when none is present.
int cuda_device_count();

// The cuBLASLt this process loaded, or nullopt in a build without CUDA; needs no GPU. The
// dynamic loader picks the build (LD_LIBRARY_PATH first), so one runner can run a case against
// two builds of the library, and its results say which one answered.
struct BlasLibrary {
  std::string version;  // "13.4.1", from cublasLtGetVersion
  std::string path;     // the file the loader mapped
};
std::optional<BlasLibrary> cublaslt_library();

}  // namespace meshgate::gemm
