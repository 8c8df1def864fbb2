#include "gemm/reference.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "gemm/numeric.hpp"

namespace meshgate::gemm {
namespace {

// Folds (expected, actual) pairs of one row at a time into a Comparison.
class Comparator {
 public:
  Comparator(const Tolerance& tol, std::int64_t n) : tol_(tol), n_(n) {}

  void row(std::int64_t i, auto&& expected, auto&& actual) {
    double dot = 0, ee = 0, aa = 0;
    for (std::int64_t j = 0; j < n_; ++j) {
      const double e = expected(j);
      const double a = actual(j);
      const double d = std::fabs(a - e);
      const bool finite = std::isfinite(a) && std::isfinite(e);
      // An output that overflows the dtype is right when it is the reference's infinity, as
      // torch.testing.assert_close has it; NaN never matches (its equal_nan defaults to false).
      const bool same_infinity = std::isinf(a) && a == e;
      if (same_infinity) ++c_.equal_infinities;
      if (!finite && !same_infinity) ++c_.nonfinite_mismatches;
      if ((!finite && !same_infinity) || (finite && d > tol_.atol + tol_.rtol * std::fabs(e))) {
        if (c_.mismatches++ == 0) {
          c_.bad_row = i, c_.bad_col = j, c_.bad_expected = e, c_.bad_actual = a;
        }
      }
      if (!finite) continue;  // the error statistics and the cosine are over finite pairs
      c_.max_abs_err = std::max(c_.max_abs_err, d);
      if (std::fabs(e) > tol_.atol) c_.max_rel_err = std::max(c_.max_rel_err, d / std::fabs(e));
      sum_abs_err_ += d;
      ++elements_;
      sum_abs_ref_ += std::fabs(e);
      dot += a * e, ee += e * e, aa += a * a;
    }
    // A row that is zero within atol in both has no direction; it is checked elementwise only.
    const double floor = tol_.atol * tol_.atol * static_cast<double>(n_);
    double cosine = 1;
    if (ee > floor || aa > floor) cosine = dot / std::sqrt(std::max(ee * aa, 1e-300));
    if (!std::isfinite(dot + ee + aa)) cosine = 0;
    if (n_ > 0 && cosine < tol_.min_cosine) ++c_.low_cosine_rows;
    if (n_ > 0) c_.min_row_cosine = std::min(c_.min_row_cosine, cosine);
    ++c_.rows_checked;
  }

  Comparison finish() {
    c_.mean_rel_err = sum_abs_ref_ > 0 ? sum_abs_err_ / sum_abs_ref_ : 0;
    // The mean error is a statistic: with a handful of elements one rounding dominates it.
    constexpr std::int64_t kMinElementsForMean = 64;
    const bool mean_ok = elements_ < kMinElementsForMean || c_.mean_rel_err <= tol_.max_mean_rel;
    c_.ok = c_.mismatches == 0 && c_.low_cosine_rows == 0 && mean_ok;
    return c_;
  }

 private:
  Tolerance tol_;
  std::int64_t n_;
  Comparison c_;
  double sum_abs_err_ = 0;
  double sum_abs_ref_ = 0;
  std::int64_t elements_ = 0;
};

}  // namespace

std::vector<double> reference_rows(const GemmProblem& p, const GemmInputs& in,
                                   std::span<const std::int64_t> rows) {
  validate(p, in);
  for (const std::int64_t row : rows)
    if (row < 0 || row >= total_rows(p))
      throw Error(ErrorKind::index, "reference row " + std::to_string(row) + " is outside [0, " +
                                        std::to_string(total_rows(p)) + ")");
  std::vector<double> bias(static_cast<std::size_t>(p.n), 0.0);
  if (has_bias(p.epilogue))
    for (std::int64_t j = 0; j < p.n; ++j) bias[j] = in.bias.get(p.bias_offset + j);

  // op(W) of each batch that has a requested row, transposed to [N,K] so that the inner loop
  // runs over contiguous memory. Upcasting to float is exact for every dtype and a float product
  // is exact in double.
  // One entry per run of rows in the same batch, not one per row: a tall output's rows would
  // otherwise double what the reference holds per row.
  std::vector<std::int64_t> batches;
  for (const std::int64_t row : rows) {
    const std::int64_t batch = p.m > 0 ? row / p.m : 0;
    if (batches.empty() || batches.back() != batch) batches.push_back(batch);
  }
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  std::vector<std::vector<float>> w_of(batches.size());
  for (std::size_t b = 0; b < batches.size(); ++b) {
    w_of[b].resize(static_cast<std::size_t>(p.k * p.n));
    for (std::int64_t kk = 0; kk < p.k; ++kk)
      for (std::int64_t j = 0; j < p.n; ++j)
        w_of[b][static_cast<std::size_t>(j * p.k + kk)] = in.w.get(w_index(p, kk, j, batches[b]));
  }

  std::vector<double> out(rows.size() * static_cast<std::size_t>(p.n));
  // Rows are independent: each thread takes every `threads`-th one, so the result does not
  // depend on the thread count.
  const auto work = [&](std::size_t first, std::size_t step) {
    std::vector<double> x_row(static_cast<std::size_t>(p.k));
    for (std::size_t r = first; r < rows.size(); r += step) {
      const std::int64_t batch = rows[r] / std::max<std::int64_t>(p.m, 1);
      const std::int64_t i = rows[r] - batch * p.m;
      const std::vector<float>& w = w_of[static_cast<std::size_t>(
          std::lower_bound(batches.begin(), batches.end(), batch) - batches.begin())];
      for (std::int64_t kk = 0; kk < p.k; ++kk) x_row[kk] = in.x.get(x_index(p, i, kk, batch));
      for (std::int64_t j = 0; j < p.n; ++j) {
        const float* wj = w.data() + j * p.k;
        double acc = 0;
        for (std::int64_t kk = 0; kk < p.k; ++kk) acc += x_row[kk] * static_cast<double>(wj[kk]);
        out[r * p.n + j] = activate(p.epilogue, static_cast<double>(p.alpha) * acc + bias[j]);
      }
    }
  };
  const double macs = static_cast<double>(rows.size()) * static_cast<double>(p.n) *
                      static_cast<double>(std::max<std::int64_t>(p.k, 1));
  constexpr double kMacsPerThread = 1 << 20;  // below this a thread costs more than it saves
  const std::size_t threads = std::clamp<std::size_t>(
      static_cast<std::size_t>(macs / kMacsPerThread), 1,
      std::min<std::size_t>(std::max(1u, std::thread::hardware_concurrency()), rows.size() + 1));
  if (threads <= 1) {
    work(0, 1);
    return out;
  }
  std::vector<std::jthread> pool;
  for (std::size_t t = 0; t < threads; ++t) pool.emplace_back(work, t, threads);
  pool.clear();  // joins
  return out;
}

std::vector<double> reference(const GemmProblem& p, const GemmInputs& in) {
  if (!has_elements(p)) {
    validate(p, in);
    return {};
  }
  std::vector<std::int64_t> rows(
      static_cast<std::size_t>(std::max<std::int64_t>(total_rows(p), 0)));
  for (std::int64_t i = 0; i < total_rows(p); ++i) rows[i] = i;
  return reference_rows(p, in, rows);
}

void run_reference(const GemmProblem& p, const GemmInputs& in, HostTensor& y) {
  validate_output(p, y);
  const std::vector<double> ref = reference(p, in);
  for (std::int64_t r = 0; r < total_rows(p); ++r)
    for (std::int64_t j = 0; j < p.n; ++j)
      y.set(y_index(p, r, j), static_cast<float>(round_to(p.dtype, ref[r * p.n + j])));
}

std::vector<std::int64_t> rows_to_check(const GemmProblem& p, double max_macs) {
  std::vector<std::int64_t> rows;
  // Rows of N = 0 elements have nothing to check, however many there are.
  if (!has_elements(p)) return rows;
  const std::int64_t total = total_rows(p);
  const double row_macs = std::max(1.0, static_cast<double>(p.n) * static_cast<double>(p.k));
  const auto budget = static_cast<std::int64_t>(std::max(2.0, max_macs / row_macs));
  if (budget >= total) {
    for (std::int64_t i = 0; i < total; ++i) rows.push_back(i);
    return rows;
  }
  // r * (total - 1) / (budget - 1) without forming the product, which overflows int64 once
  // total * budget does: total - 1 = q * (budget - 1) + rem, and rem * r < budget^2.
  const std::int64_t q = (total - 1) / (budget - 1), rem = (total - 1) % (budget - 1);
  for (std::int64_t r = 0; r < budget; ++r) rows.push_back(q * r + rem * r / (budget - 1));
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

Tolerance tolerance_for(DType d, std::int64_t k) {
  switch (d) {
    case DType::f32:
      return {1e-4, 1e-4, 1e-4, 0.9999};  // TF32 has its own bound: tolerance_for(problem)
    case DType::f16:
      return k <= 4096 ? Tolerance{5e-3, 5e-3, 2e-3, 0.9999} : Tolerance{1e-2, 1e-2, 4e-3, 0.9999};
    case DType::bf16:
      return {2e-2, 2e-2, 4e-3, 0.9999};
  }
  return {};
}

Tolerance tolerance_for(const GemmProblem& p) {
  if (!p.tf32) return tolerance_for(p.dtype, p.k);
  // docs/kinds.md, GEMM: Correctness: atol = rtol = 5e-3 sqrt(K / 1024), never below its K = 1024
  // value. The inputs keep outputs O(1) (W scaled by sqrt(3/K)), so a single product of
  // TF32-rounded inputs is already off by up to 2^-10 of its size at K = 1: the error does not
  // shrink with K, and a bound that did would fail correct results.
  const double t = 5e-3 * std::sqrt(std::max<double>(static_cast<double>(p.k), 1024.0) / 1024.0);
  return {t, t, t, 0.9999};
}

std::string Comparison::describe() const {
  std::ostringstream s;
  s << "max_abs_err " << max_abs_err << ", max_rel_err " << max_rel_err << ", mean_rel_err "
    << mean_rel_err << ", min_row_cosine " << min_row_cosine << " over " << rows_checked << " rows";
  if (equal_infinities > 0) s << ", " << equal_infinities << " equal infinities";
  if (mismatches > 0) {
    s << "; " << mismatches << " elements out of tolerance";
    if (nonfinite_mismatches > 0) s << " (" << nonfinite_mismatches << " not finite)";
    s << ", first Y[" << bad_row << "," << bad_col << "] = " << bad_actual << ", expected "
      << bad_expected;
  }
  if (low_cosine_rows > 0) s << "; " << low_cosine_rows << " rows below the cosine bound";
  return s.str();
}

Comparison compare_to_reference(const GemmProblem& p, std::span<const std::int64_t> rows,
                                std::span<const double> ref, const HostTensor& y,
                                const Tolerance& tol) {
  validate_output(p, y);
  if (ref.size() != rows.size() * static_cast<std::size_t>(p.n))
    throw Error(ErrorKind::value, "reference has " + std::to_string(ref.size()) + " values for " +
                                      std::to_string(rows.size()) + " rows of " +
                                      std::to_string(p.n));
  Comparator c(tol, p.n);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::int64_t i = rows[r];
    c.row(
        i, [&](std::int64_t j) { return round_to(p.dtype, ref[r * p.n + j]); },
        [&](std::int64_t j) { return static_cast<double>(y.get(y_index(p, i, j))); });
  }
  return c.finish();
}

Comparison compare_outputs(const GemmProblem& p, const HostTensor& expected, const HostTensor& y,
                           const Tolerance& tol) {
  validate_output(p, expected);
  validate_output(p, y);
  Comparator c(tol, p.n);
  if (!has_elements(p)) return c.finish();
  for (std::int64_t i = 0; i < total_rows(p); ++i)
    c.row(
        i, [&](std::int64_t j) { return static_cast<double>(expected.get(y_index(p, i, j))); },
        [&](std::int64_t j) { return static_cast<double>(y.get(y_index(p, i, j))); });
  return c.finish();
}

}  // namespace meshgate::gemm
