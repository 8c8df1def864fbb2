// The host memory of a gemm case, estimated from its keys before anything runs.

#include <unistd.h>

#include <initializer_list>
#include <string_view>
#include <utility>

#include "kinds/gemm/gemm_case.hpp"

namespace meshgate::runner::gemm_kind {

// Twice the last-level cache, written before each cold CPU sample: the GEMM starts with none
// of its operands cached. Defined beside the estimate, which counts it; the cold timing of the
// CPU executor (executors.hpp) allocates it.
std::size_t cold_flush_bytes() {
  const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? 2 * static_cast<std::size_t>(l3) : std::size_t{64} << 20;
}

namespace {

// One part of a memory estimate and the case key it grows with.
struct MemoryPart {
  double bytes = 0;
  std::string_view key;
};

// The key of the largest of a product's factors (the first on a tie).
std::string_view largest_factor(
    std::initializer_list<std::pair<std::string_view, double>> factors) {
  const auto* best = factors.begin();
  for (const auto* f = factors.begin(); f != factors.end(); ++f)
    if (f->second > best->second) best = f;
  return best->first;
}

struct Working {
  MemoryPart part;
  std::string what;
};

// The largest working set one step of a run holds while it runs: the reference's fp32 op(W) per
// batch; cpu_reference's whole fp64 result and row list; a BLAS implementation's fp32 copies of
// X and W and its fp32 product buffers; the cache flush of cold timing.
Working largest_working_set(const Resolved& resolved, bool timed, double checked_rows,
                            double total_rows, double x_stored, double w_stored,
                            const std::vector<MemoryPart>& inputs) {
  const g::GemmProblem& p = resolved.problem;
  const std::vector<g::Impl>& impls = resolved.impls;
  const auto uses = [&](auto pred) { return std::any_of(impls.begin(), impls.end(), pred); };
  const double m = static_cast<double>(p.m), n = static_cast<double>(p.n),
               k = static_cast<double>(p.k), batch = static_cast<double>(p.batch);
  std::vector<Working> working;
  // reference_rows keeps op(W) as fp32 for every batch its rows touch, and each of its
  // threads a row of X as fp64.
  const double threads = std::min(
      static_cast<double>(std::max(1u, std::thread::hardware_concurrency())), checked_rows + 1);
  const auto w_as_fp32 = [&](double batches) {
    return 4.0 * k * n * std::max(1.0, std::min(batches, batch)) + 8.0 * k * threads;
  };
  working.push_back({{w_as_fp32(checked_rows), largest_factor({{"k", k}, {"n", n}})},
                     "fp32 op(W) of the checked rows"});
  if (uses([](g::Impl i) { return i == g::Impl::cpu_reference; }))
    working.push_back({{w_as_fp32(batch) + 8.0 * total_rows * (n + 1),
                        largest_factor({{"m", m}, {"n", n}, {"k", k}, {"batch", batch}})},
                       "cpu_reference's fp64 result and fp32 op(W)"});
  if (uses(g::uses_cpu_blas)) {
    const bool copies = p.dtype != g::DType::f32 || p.tf32;
    const bool split = std::any_of(resolved.configs.begin(), resolved.configs.end(),
                                   [](const Config& c) { return c.split_k > 1; });
    // cpu_unfused and cpu_beta_bias hold one M x N fp32 product, cpu_epilogue a block of
    // rows of it (as its block size in cpu_gemm.cpp); split-K adds a running sum and a
    // partial of the same size.
    const double block_rows =
        std::min(std::max(m, 1.0), std::max(32.0, 262144.0 / std::max(n, 1.0)));
    const double product_rows =
        uses([](g::Impl i) { return i == g::Impl::cpu_unfused || i == g::Impl::cpu_beta_bias; })
            ? m
            : block_rows;
    const double products = 4.0 * product_rows * n * (split ? 3.0 : 1.0);
    const double x_all = x_stored + static_cast<double>(p.x_offset);
    const double w_all = w_stored + static_cast<double>(p.w_offset);
    const double fp32_copies = copies ? 4.0 * (x_all + w_all) : 0.0;
    const MemoryPart& largest_input = *std::max_element(
        inputs.begin(), inputs.end(),
        [](const MemoryPart& a, const MemoryPart& b) { return a.bytes < b.bytes; });
    working.push_back(
        {{fp32_copies + products,
          fp32_copies > products ? largest_input.key : largest_factor({{"m", m}, {"n", n}})},
         copies ? "fp32 copies of X and W and the fp32 product" : "the fp32 product"});
  }
  if (timed && uses([](g::Impl i) { return g::device_of(i) == g::Device::cpu; }))
    working.push_back(
        {{static_cast<double>(cold_flush_bytes()), "perf"}, "the cache flush of cold timing"});
  const Working& step = *std::max_element(
      working.begin(), working.end(),
      [](const Working& a, const Working& b) { return a.part.bytes < b.part.bytes; });
  return step;
}

}  // namespace

MemoryEstimate GemmCase::memory_estimate() const {
  const g::GemmProblem& p = resolved_.problem;
  const std::vector<g::Impl>& impls = resolved_.impls;
  const double es = static_cast<double>(g::element_size(p.dtype));
  const double m = static_cast<double>(p.m), n = static_cast<double>(p.n),
               k = static_cast<double>(p.k), batch = static_cast<double>(p.batch);
  const bool xt = g::x_transposed(p), wt = g::w_transposed(p);
  // Stored X is [M,K] ('n') or [K,M] ('t'), W [K,N] or [N,K]; an explicit ld is its own key.
  const std::pair<std::string_view, double> x_rows{xt ? "k" : "m", xt ? k : m};
  const std::pair<std::string_view, double> x_ld{p.ldx != 0 ? "ldx" : (xt ? "m" : "k"),
                                                 static_cast<double>(g::x_ld(p))};
  const std::pair<std::string_view, double> w_rows{wt ? "n" : "k", wt ? n : k};
  const std::pair<std::string_view, double> w_ld{p.ldw != 0 ? "ldw" : (wt ? "k" : "n"),
                                                 static_cast<double>(g::w_ld(p))};
  const std::pair<std::string_view, double> y_ld{p.ldy != 0 ? "ldy" : "n",
                                                 static_cast<double>(g::y_ld(p))};
  const double x_stored = batch * x_rows.second * x_ld.second;
  const double w_stored = batch * w_rows.second * w_ld.second;
  const double y_stored = batch * m * y_ld.second;

  const std::vector<MemoryPart> inputs = {
      {es * x_stored, largest_factor({x_rows, x_ld, {"batch", batch}})},
      {es * static_cast<double>(p.x_offset), "x_offset"},
      {es * w_stored, largest_factor({w_rows, w_ld, {"batch", batch}})},
      {es * static_cast<double>(p.w_offset), "w_offset"},
      {es * n, "n"},
      {es * static_cast<double>(p.bias_offset), "bias_offset"}};
  const double outputs_count = static_cast<double>(impls.size() + 1);
  const MemoryPart outputs{es * y_stored * outputs_count,
                           largest_factor({{"m", m}, y_ld, {"batch", batch}})};
  // As many rows as rows_to_check(p, 2^30) picks, without listing them.
  // Rows of no element are never listed nor computed (gemm::has_elements).
  const double total_rows = n > 0 ? batch * m : 0.0;
  const double checked_rows =
      std::min(total_rows, std::max(2.0, std::ldexp(1.0, 30) / std::max(1.0, n * k)));
  // Per checked row: N fp64 values and the row's index in the list of rows to check.
  const MemoryPart reference{8.0 * (n + 1) * checked_rows,
                             largest_factor({{"m", m}, {"n", n}, {"batch", batch}})};

  const Working step = largest_working_set(resolved_, timed_, checked_rows, total_rows, x_stored,
                                           w_stored, inputs);

  double input_bytes = 0;
  for (const MemoryPart& part : inputs) input_bytes += part.bytes;
  std::vector<MemoryPart> parts = inputs;
  parts.push_back(outputs);
  parts.push_back(reference);
  parts.push_back(step.part);
  // What any run adds whatever its sizes: the threads' stacks, sgemm's packing buffers, the
  // result's JSON (a few MiB measured, on top of every part above).
  constexpr double kFixedOverhead = 16 << 20;
  double total = kFixedOverhead;
  for (const MemoryPart& part : parts) total += part.bytes;
  const MemoryPart& largest = *std::max_element(
      parts.begin(), parts.end(),
      [](const MemoryPart& a, const MemoryPart& b) { return a.bytes < b.bytes; });
  return {total, std::string(largest.key),
          "inputs " + format_byte_size(input_bytes) + " + " + std::to_string(impls.size() + 1) +
              " outputs " + format_byte_size(outputs.bytes) + " + fp64 reference rows " +
              format_byte_size(reference.bytes) + " + at most " +
              format_byte_size(step.part.bytes) + " while running (" + step.what + ") + " +
              format_byte_size(kFixedOverhead) + " fixed"};
}

}  // namespace meshgate::runner::gemm_kind
