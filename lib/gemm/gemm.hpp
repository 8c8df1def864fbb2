#pragma once
// Bias-fused GEMM as PyTorch sees it (spec/gemm.md): Y[M,N] = act(alpha * op(X) * op(W) + bias[N]),
// every matrix row-major and packed, fp32 accumulation for every dtype. This header holds the
// problem description, its validation, host tensors and deterministic inputs; the fp64
// reference and the comparison live in gemm/reference.hpp, the CPU implementations in
// gemm/cpu_gemm.hpp and the cuBLASLt ones in gemm/cuda_gemm.hpp.
#include <cstddef>
#include <cstdint>
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
};

// Error(value) naming the field, its value and the remedy: negative sizes or offsets,
// a non-finite alpha, element counts that overflow int64.
void validate(const GemmProblem& p);
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
// element bias_offset + j (so a case can make the bias pointer misaligned on purpose).
struct GemmInputs {
  HostTensor x;     // M*K elements, stored as the layout says
  HostTensor w;     // K*N elements, stored as the layout says
  HostTensor bias;  // bias_offset + N elements
};

// Deterministic inputs from (seed, tensor, index): X ~ U(-1,1), W ~ U(-1,1)*sqrt(3/K) so that
// outputs stay O(1) for every K, bias ~ U(-0.5,0.5); each value already rounded to the dtype.
GemmInputs make_inputs(const GemmProblem& p, std::uint64_t seed = 0x5eed);
// Error(value) when a tensor's dtype or element count does not match the problem.
void validate(const GemmProblem& p, const GemmInputs& in);
void validate_output(const GemmProblem& p, const HostTensor& y);

// Element (i, kk) of op(X) and (kk, j) of op(W) as stored flat indices.
std::int64_t x_index(const GemmProblem& p, std::int64_t i, std::int64_t kk);
std::int64_t w_index(const GemmProblem& p, std::int64_t kk, std::int64_t j);

// Number of CUDA devices meshgate can use: 0 when built without CUDA or when none is present.
int cuda_device_count();

}  // namespace meshgate::gemm
