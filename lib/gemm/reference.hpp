#pragma once
// The fp64 reference (docs/kinds.md, GEMM: Correctness) and the comparisons every implementation is
// held to.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gemm/gemm.hpp"

namespace meshgate::gemm {

// Rows `rows` (of total_rows(p): batch-major) of the exact result: inputs upcast from their
// stored (already rounded) values, products accumulated in double, bias added after alpha
// scaling, activation in double. Returns rows.size() x N values, row by row, not yet rounded to
// the dtype. Large requests spread the rows over every core (std::thread); the values do not
// depend on the thread count.
std::vector<double> reference_rows(const GemmProblem& p, const GemmInputs& in,
                                   std::span<const std::int64_t> rows);
std::vector<double> reference(const GemmProblem& p, const GemmInputs& in);  // all M rows

// The cpu_reference implementation: the reference rounded once to the dtype into y.
void run_reference(const GemmProblem& p, const GemmInputs& in, HostTensor& y);

// Rows (of total_rows(p)) worth checking when the full reference is too expensive: all rows while
// batch * M * N * K <= max_macs, otherwise the first, the last and evenly spread rows in between;
// none when Y has no elements (has_elements).
std::vector<std::int64_t> rows_to_check(const GemmProblem& p, double max_macs = 1 << 28);

struct Tolerance {
  double atol = 0;
  double rtol = 0;
  double max_mean_rel = 1;     // mean |y - ref| / mean |ref|, checked from 64 elements on
  double min_cosine = 0.9999;  // per output row
};
// Per-dtype bounds of docs/kinds.md, GEMM: Correctness (fp16 relaxed beyond K = 4096).
Tolerance tolerance_for(DType d, std::int64_t k);
// The same, with the TF32 bound when the problem asks for TF32: 5e-3 sqrt(K / 1024), 5e-3 at
// K <= 1024.
Tolerance tolerance_for(const GemmProblem& p);

struct Comparison {
  // The error statistics and the row cosines are over the pairs where both values are finite.
  double max_abs_err = 0;
  double max_rel_err = 0;  // over elements with |ref| > atol
  double mean_rel_err = 0;
  double min_row_cosine = 1;
  std::int64_t rows_checked = 0;
  // Elements outside atol + rtol * |ref|, or non-finite on either side unless both are the same
  // infinity (NaN never matches, not even NaN).
  std::int64_t mismatches = 0;
  std::int64_t nonfinite_mismatches = 0;  // the mismatches with a NaN or an infinity
  std::int64_t equal_infinities = 0;      // elements where both are the same infinity
  std::int64_t low_cosine_rows = 0;
  // The first mismatching element, for the message.
  std::int64_t bad_row = -1;
  std::int64_t bad_col = -1;
  double bad_expected = 0;
  double bad_actual = 0;
  bool ok = true;

  std::string describe() const;  // one line: the metrics and the first mismatch if any
};

// y against reference rows (rows.size() x N, unrounded); the reference is rounded once to the
// dtype before comparing.
Comparison compare_to_reference(const GemmProblem& p, std::span<const std::int64_t> rows,
                                std::span<const double> ref, const HostTensor& y,
                                const Tolerance& tol);
// Two implementations' outputs against each other over every element (`expected` plays the
// reference).
Comparison compare_outputs(const GemmProblem& p, const HostTensor& expected, const HostTensor& y,
                           const Tolerance& tol);

}  // namespace meshgate::gemm
