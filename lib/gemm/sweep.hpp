#pragma once
// A shape sweep that hunts GEMM bugs which random inputs hide (docs/kinds.md, gemm_sweep):
// deterministic shape and configuration draws, inputs whose exact product every correct
// implementation reproduces bit for bit, and the classification of a wrong output by the shape
// of its error.
//
// Why exact inputs: a split-K kernel that drops the last 24 of 38424 terms is 6e-4 off in
// relative terms, inside a bf16 tolerance with random inputs. With the inputs below every term
// is +1 or -1 times 1, every partial sum is a small integer that fp32 accumulation and the output
// dtype hold exactly, so a lost or doubled term is a whole-number error in every element.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gemm/gemm.hpp"

namespace meshgate::gemm {

// uniform: M, N, K each uniform over its range, every integer alike (no rounding to multiples
// of 8: aligned draws miss the shapes where a kernel's tail handling breaks).
// extreme: skinny and deep: M, N uniform over their (small) ranges, K log-uniform over its
// range, so that every order of magnitude up to hundreds of thousands gets its share.
enum class ShapeMode { uniform, extreme };
std::string_view to_string(ShapeMode m);
ShapeMode parse_shape_mode(std::string_view s);  // Error(value) naming the accepted modes

struct SizeRange {
  std::int64_t lo = 1;
  std::int64_t hi = 1;
};

struct ShapeSpace {
  ShapeMode mode = ShapeMode::uniform;
  SizeRange m, n, k;
};

struct SweepShape {
  std::int64_t m = 0, n = 0, k = 0;
  double volume() const { return double(m) * double(n) * double(k); }
};

// Shape `index` of the sweep of `seed`: a pure function of (seed, index), so that a sweep
// resumed at any index draws what an uninterrupted one would have.
SweepShape draw_shape(const ShapeSpace& space, std::uint64_t seed, std::int64_t index);

// One value of `choices` for (seed, index, field): the configuration of a shape, drawn like the
// shape itself. `field` keeps the choices of different settings independent.
std::size_t draw_choice(std::size_t choices, std::uint64_t seed, std::int64_t index,
                        std::uint64_t field);

// The largest integer up to which every integer is exact in `d`: 2^24 (fp32), 2^11 (fp16),
// 2^8 (bf16).
std::int64_t exact_integer_limit(DType d);

// The exact inputs of a problem: W is all ones, X[i, k] = a_k for every row i but the first
// term, and bias[j] = 1 + (5 j mod 8). The a_k start with 16 + r_i, r_i = i mod 7 (so that
// every pre-activation value the output can hold is >= 16, where the tanh GELU is the identity
// in fp32 and ReLU is too, and rows differ: a row written to another row's place is seen; 7
// because tiles are powers of two, so rows one or more tiles apart still differ), then
// alternate +1 and -1, then climb by +1 for the last `climb` terms to the output's final value:
// every prefix sum is a value the output dtype holds exactly, and the full sum is reached only
// by the last term, so a dropped tail of any length lowers the result.
inline constexpr std::int64_t kRowOffsets = 7;
// Changes when the exact inputs or the failure classes do: a sweep checkpointed under other
// inputs is not continued.
inline constexpr int kExactInputsVersion = 2;
struct ExactPattern {
  std::int64_t climb = 0;       // the last `climb` terms are +1
  double sum = 0;               // sum of the a_k of row 0: every output's pre-bias value, + r_i
  std::vector<double> bias;     // bias[j], j < N
  static double row_offset(std::int64_t i) { return static_cast<double>(i % kRowOffsets); }
};
ExactPattern exact_pattern(const GemmProblem& p);
// Inputs of `p` filled with the pattern (offsets and leading dimensions honoured; padding 0).
GemmInputs make_exact_inputs(const GemmProblem& p, const ExactPattern& pattern);
// The exact output before rounding, M x N row-major (the same in every batch):
// element (i, j) = act(alpha (sum + r_i) + bias[j]), in double.
std::vector<double> exact_output(const GemmProblem& p, const ExactPattern& pattern);

// How an output is wrong, by the shape of its error.
enum class FailureClass {
  k_tail,        // every element off by the same whole number: terms lost (or counted twice)
  bias_missing,  // every element short by exactly its column's bias
  bias_doubled,  // every element over by exactly its column's bias
  unwritten,     // a NaN or infinity where a finite value belongs (the NaN sentinel survived)
  misplaced,     // every wrong element holds another row's exact value: rows written astray
  drift,         // off beyond the dtype's tolerance in no pattern above (fp64 reference)
  fallback,      // the requested epilogue, algorithm or split-K was not the one that ran
};
inline constexpr int kFailureClassCount = 7;
std::string_view to_string(FailureClass c);

struct OutputVerdict {
  bool ok = true;
  FailureClass failure = FailureClass::drift;
  double offset = 0;      // k_tail: expected - actual (> 0: short), the same in every element
  std::int64_t bad = 0;   // elements that differ from the exact output
  std::string detail;     // one line: what the first wrong element holds
};
// Judges `y` (the output of `p` with the exact inputs of `pattern`): ok when every element
// equals the exact value rounded to the dtype, or differs only within the dtype's tolerance
// outside every pattern above.
OutputVerdict classify_output(const GemmProblem& p, const ExactPattern& pattern,
                              const HostTensor& y);

}  // namespace meshgate::gemm
