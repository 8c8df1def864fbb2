// kind: gemm — bias-fused GEMM implementations against the fp64 reference and each other
// (spec/gemm.md sections 5 and 7). Keys: m, n, k, dtype, epilogue, layout, impls, device, alpha,
// bias_offset, workspace. With perf, run() also times every implementation and reports the
// fused-vs-best-alternative ratio; time_iteration() times the fused implementation only,
// because the runner's timing loop measures one number per iteration.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "byte_size.hpp"
#include "case_kind.hpp"
#include "core/error.hpp"
#include "gemm/cpu_gemm.hpp"
#include "gemm/gemm.hpp"
#include "gemm/reference.hpp"
#ifdef MESHGATE_GEMM_CUDA
#include "gemm/cuda_gemm.hpp"
#endif

namespace meshgate::runner {
namespace {

namespace g = meshgate::gemm;

// The case's values as written; resolved into a problem while parsing, so that bad values are
// rejected before anything executes.
struct GemmSpec {
  std::int64_t m = 0, n = 0, k = 0;
  std::string dtype, epilogue, layout = "nt", device = "cpu";
  std::optional<std::vector<std::string>> impls;
  double alpha = 1.0;
  std::int64_t bias_offset = 0;
  std::int64_t workspace = 32LL << 20;
};

struct Resolved {
  g::GemmProblem problem;
  g::Device device = g::Device::cpu;
  std::vector<g::Impl> impls;
};

// Resolves one field at a time; `on_error(key, message)` decides what a bad value becomes.
template <class OnError>
Resolved resolve(const GemmSpec& s, OnError&& on_error) {
  Resolved r;
  const auto guard = [&](std::string_view key, auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      on_error(key, e);
    }
  };
  guard("dtype", [&] { r.problem.dtype = g::parse_dtype(s.dtype); });
  guard("epilogue", [&] { r.problem.epilogue = g::parse_epilogue(s.epilogue); });
  guard("layout", [&] { r.problem.layout = g::parse_layout(s.layout); });
  guard("device", [&] { r.device = g::parse_device(s.device); });
  r.problem.m = s.m, r.problem.n = s.n, r.problem.k = s.k;
  r.problem.alpha = static_cast<float>(s.alpha);
  r.problem.bias_offset = s.bias_offset;
  r.problem.workspace = s.workspace;
  // Each field validated alone first, so that the error names the key that is wrong.
  const auto check_field = [&](std::string_view key, auto set) {
    guard(key, [&] {
      g::GemmProblem single;
      set(single);
      g::validate(single);
    });
  };
  check_field("m", [&](g::GemmProblem& q) { q.m = s.m; });
  check_field("n", [&](g::GemmProblem& q) { q.n = s.n; });
  check_field("k", [&](g::GemmProblem& q) { q.k = s.k; });
  check_field("alpha", [&](g::GemmProblem& q) { q.alpha = static_cast<float>(s.alpha); });
  check_field("bias_offset", [&](g::GemmProblem& q) { q.bias_offset = s.bias_offset; });
  check_field("workspace", [&](g::GemmProblem& q) { q.workspace = s.workspace; });
  guard("m", [&] { g::validate(r.problem); });
  guard("impls", [&] {
    if (!s.impls) {
      r.impls = g::impls_for(r.device);
      return;
    }
    if (s.impls->empty())
      throw Error(ErrorKind::value, "impls is empty: list at least one or omit the key");
    for (const std::string& name : *s.impls) {
      const g::Impl impl = g::parse_impl(name);
      if (std::find(r.impls.begin(), r.impls.end(), impl) != r.impls.end())
        throw Error(ErrorKind::value, "impl '" + name + "' is listed twice");
      r.impls.push_back(impl);
    }
  });
  return r;
}

// Sizes such as 1048576, "32MiB", "1 MiB", "64KiB".
std::int64_t read_bytes(const YAML::Node& value, CaseNode& node, std::string_view key) {
  const std::string text = value.Scalar();
  std::size_t used = 0;
  std::int64_t number = 0;
  try {
    number = std::stoll(text, &used);
  } catch (const std::exception&) {
    node.fail_at(value, key, "'" + text + "' is not a size: write bytes or e.g. 32MiB");
  }
  std::string unit = text.substr(used);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  if (unit.empty() || unit == "B") return number;
  if (unit == "KiB") return number << 10;
  if (unit == "MiB") return number << 20;
  if (unit == "GiB") return number << 30;
  node.fail_at(value, key, "unknown size unit '" + unit + "': use B, KiB, MiB or GiB");
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::json comparison_json(const g::Comparison& c) {
  return {{"max_abs_err", c.max_abs_err},
          {"max_rel_err", c.max_rel_err},
          {"mean_rel_err", c.mean_rel_err},
          {"min_row_cosine", c.min_row_cosine},
          {"rows_checked", c.rows_checked},
          {"mismatches", c.mismatches},
          {"ok", c.ok}};
}

class GemmCase final : public PreparedCase {
 public:
  GemmCase(GemmSpec spec, Resolved resolved, int warmup, int iters, bool perf)
      : spec_(std::move(spec)),
        resolved_(std::move(resolved)),
        warmup_(warmup),
        iters_(iters),
        perf_(perf) {}

  nlohmann::json params() const override {
    nlohmann::json p = {{"m", spec_.m},
                        {"n", spec_.n},
                        {"k", spec_.k},
                        {"dtype", spec_.dtype},
                        {"epilogue", spec_.epilogue},
                        {"layout", spec_.layout},
                        {"device", spec_.device},
                        {"alpha", spec_.alpha},
                        {"bias_offset", spec_.bias_offset},
                        {"workspace", spec_.workspace}};
    p["dtype"] = g::to_string(resolved_.problem.dtype);
    nlohmann::json impls = nlohmann::json::array();
    for (g::Impl i : resolved_.impls) impls.push_back(g::to_string(i));
    p["impls"] = impls;
    return p;
  }

  // Host memory of a run: X, W and the bias; one output per implementation (all kept for the
  // pairwise comparison) and one for timing; the fp64 reference rows that are checked.
  MemoryEstimate memory_estimate() const override {
    const g::GemmProblem& p = resolved_.problem;
    const double es = p.dtype == g::DType::f32 ? 4 : 2;
    const double m = static_cast<double>(p.m), n = static_cast<double>(p.n),
                 k = static_cast<double>(p.k);
    const double inputs = es * (m * k + k * n + n + static_cast<double>(p.bias_offset));
    const double outputs = es * m * n * static_cast<double>(resolved_.impls.size() + 1);
    // As many rows as rows_to_check(p, 2^30) picks, without listing them.
    const double checked_rows =
        std::min(m, std::max(2.0, std::ldexp(1.0, 30) / std::max(1.0, n * k)));
    const double reference = 8.0 * n * checked_rows;
    const std::string key = m >= n && m >= k ? "m" : (n >= k ? "n" : "k");
    return {inputs + outputs + reference, key,
            "inputs " + format_byte_size(inputs) + " + " +
                std::to_string(resolved_.impls.size() + 1) + " outputs " +
                format_byte_size(outputs) + " + fp64 reference rows " +
                format_byte_size(reference)};
  }

  Outcome run(RunContext&) override {
    const Resolved& r = resolved_;
    const g::GemmProblem& p = r.problem;

    const bool needs_cuda = std::any_of(r.impls.begin(), r.impls.end(), [](g::Impl i) {
      return g::device_of(i) == g::Device::cuda;
    });
    if (needs_cuda || r.device == g::Device::cuda) {
#ifndef MESHGATE_GEMM_CUDA
      return skipped(
          "meshgate was built without CUDA: configure with -DMESHGATE_CUDA=ON on a machine with "
          "nvcc");
#else
      if (g::cuda_device_count() == 0) return skipped("no CUDA device present");
#endif
    }

    inputs_ = g::make_inputs(p);
    // All rows up to 2^30 multiply-adds of fp64 reference, evenly spread rows beyond that.
    const std::vector<std::int64_t> rows = g::rows_to_check(p, 1 << 30);
    const std::vector<double> ref = g::reference_rows(p, inputs_, rows);
    const g::Tolerance tol = g::tolerance_for(p.dtype, p.k);

    Outcome outcome;
    std::vector<g::HostTensor> outputs;
    std::vector<std::string> failures;
    nlohmann::json impls = nlohmann::json::object();
    for (g::Impl impl : r.impls) {
      nlohmann::json entry;
      outputs.push_back(run_impl(impl, entry, outcome.plan));
      const g::Comparison c = g::compare_to_reference(p, rows, ref, outputs.back(), tol);
      entry.update(comparison_json(c));
      if (!c.ok)
        failures.push_back(std::string(g::to_string(impl)) + " vs fp64 reference: " + c.describe());
      impls[std::string(g::to_string(impl))] = entry;
    }
    // Every implementation within tolerance of every other: drift between paths is a failure
    // even when each one alone is close enough to the reference.
    nlohmann::json pairs = nlohmann::json::object();
    for (std::size_t a = 0; a < r.impls.size(); ++a)
      for (std::size_t b = a + 1; b < r.impls.size(); ++b) {
        const g::Comparison c = g::compare_outputs(p, outputs[a], outputs[b], tol);
        const std::string name =
            std::string(g::to_string(r.impls[a])) + "/" + std::string(g::to_string(r.impls[b]));
        pairs[name] = {
            {"max_abs_err", c.max_abs_err}, {"min_row_cosine", c.min_row_cosine}, {"ok", c.ok}};
        if (!c.ok) failures.push_back(name + " drift: " + c.describe());
      }
    outcome.metrics["impls"] = impls;
    outcome.metrics["pairs"] = pairs;
    outcome.metrics["tolerance"] = {{"atol", tol.atol},
                                    {"rtol", tol.rtol},
                                    {"max_mean_rel", tol.max_mean_rel},
                                    {"min_cosine", tol.min_cosine}};
    outcome.metrics["flops"] = g::flops(p);

    std::vector<std::string> flags;
    if (!failures.empty()) flags.push_back("numerics: " + failures.front());
    if (perf_) measure_all(outcome, flags);
    outcome.metrics["flags"] = flags;

    if (!failures.empty()) {
      outcome.status = Status::fail;
      std::ostringstream message;
      for (std::size_t i = 0; i < failures.size(); ++i) message << (i ? "; " : "") << failures[i];
      outcome.message = message.str();
    } else if (!flags.empty()) {
      outcome.message = "flagged: " + flags.front();
    }
    return outcome;
  }

  // One iteration of the fused implementation (or of the first listed when none is fused).
  double time_iteration(RunContext&) override {
    const g::Impl impl = timed_impl();
#ifdef MESHGATE_GEMM_CUDA
    if (g::device_of(impl) == g::Device::cuda) return cuda().time(impl, 1);
#endif
    const g::GemmProblem& p = resolved_.problem;
    if (timing_output_.size() != p.m * p.n) timing_output_ = g::HostTensor(p.dtype, p.m * p.n);
    const auto start = std::chrono::steady_clock::now();
    g::run_cpu(impl, p, inputs_, timing_output_);
    return seconds_since(start);
  }

 private:
  static Outcome skipped(std::string reason) {
    Outcome o;
    o.status = Status::skip;
    o.message = std::move(reason);
    return o;
  }

  g::Impl timed_impl() const {
    const std::vector<g::Impl>& impls = resolved_.impls;
    for (g::Impl fused : {g::Impl::lt_epilogue, g::Impl::cpu_epilogue})
      if (std::find(impls.begin(), impls.end(), fused) != impls.end()) return fused;
    return impls.front();
  }

  g::HostTensor run_impl(g::Impl impl, nlohmann::json& entry, std::vector<std::string>& plan) {
    const g::GemmProblem& p = resolved_.problem;
    entry["device"] = g::to_string(g::device_of(impl));
#ifdef MESHGATE_GEMM_CUDA
    if (g::device_of(impl) == g::Device::cuda) {
      cuda().fill_output_nan();
      const g::CudaRunInfo info = cuda().run(impl);
      entry["executed"] = g::to_string(info.plan.executed);
      entry["lt_epilogue"] = g::to_string(info.plan.epilogue);
      if (!info.plan.fallback_reason.empty()) entry["fallback_reason"] = info.plan.fallback_reason;
      if (info.simple_kernel) entry["simple_kernel"] = true;
      if (info.ran_gemm && !info.simple_kernel)
        entry["algo"] = {{"id", info.algo.algo_id},
                         {"tile", info.algo.tile_id},
                         {"splitk_num", info.algo.splitk_num},
                         {"reduction_scheme", info.algo.reduction_scheme},
                         {"stages", info.algo.stages_id},
                         {"workspace_bytes", info.algo.workspace_bytes},
                         { "heuristic_cached",
                           info.heuristic_cached }};
      plan.push_back(g::describe(info));
      return cuda().output();
    }
#endif
    g::HostTensor y(p.dtype, p.m * p.n);
    y.fill_nan();
    g::run_cpu(impl, p, inputs_, y);
    entry["executed"] = g::to_string(impl);
    plan.push_back(std::string(g::to_string(impl)));
    return y;
  }

  double time_impl(g::Impl impl) {
#ifdef MESHGATE_GEMM_CUDA
    if (g::device_of(impl) == g::Device::cuda) {
      cuda().time(impl, std::max(warmup_, 1));
      return cuda().time(impl, iters_);
    }
#endif
    const g::GemmProblem& p = resolved_.problem;
    g::HostTensor y(p.dtype, p.m * p.n);
    for (int i = 0; i < warmup_; ++i) g::run_cpu(impl, p, inputs_, y);
    std::vector<double> samples;
    for (int i = 0; i < iters_; ++i) {
      const auto start = std::chrono::steady_clock::now();
      g::run_cpu(impl, p, inputs_, y);
      samples.push_back(seconds_since(start));
    }
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    return samples[samples.size() / 2];
  }

  void measure_all(Outcome& outcome, std::vector<std::string>& flags) {
    const Resolved& r = resolved_;
    const double f = g::flops(r.problem);
    nlohmann::json& impls = outcome.metrics["impls"];
    std::optional<double> fused_time, best_alternative;
    std::string best_name;
    const g::Impl fused = timed_impl();
    for (g::Impl impl : r.impls) {
      if (impl == g::Impl::cpu_reference) continue;  // a triple loop in fp64, not a contender
      const double t = time_impl(impl);
      nlohmann::json& entry = impls[std::string(g::to_string(impl))];
      entry["time_s"] = t;
      entry["gflops"] = t > 0 ? f / t * 1e-9 : 0.0;
      if (impl == fused) {
        fused_time = t;
      } else if (!best_alternative || t < *best_alternative) {
        best_alternative = t;
        best_name = g::to_string(impl);
      }
    }
    if (fused_time && best_alternative && *best_alternative > 0) {
      const double ratio = *fused_time / *best_alternative;
      outcome.metrics["fused_impl"] = g::to_string(fused);
      outcome.metrics["best_alternative"] = best_name;
      outcome.metrics["fused_vs_best_alternative"] = ratio;
      if (ratio > 1.05) {
        std::ostringstream s;
        s.precision(3);
        s << "perf: " << g::to_string(fused) << " is " << (ratio - 1) * 100 << "% slower than "
          << best_name;
        flags.push_back(s.str());
      }
    }
  }

#ifdef MESHGATE_GEMM_CUDA
  g::CudaGemm& cuda() {
    if (!cuda_) cuda_ = std::make_unique<g::CudaGemm>(resolved_.problem, inputs_);
    return *cuda_;
  }
  std::unique_ptr<g::CudaGemm> cuda_;
#endif

  GemmSpec spec_;
  Resolved resolved_;
  int warmup_;
  int iters_;
  bool perf_;
  g::GemmInputs inputs_;
  g::HostTensor timing_output_;
};

}  // namespace

std::unique_ptr<PreparedCase> parse_gemm_case(CaseNode& node, bool /*expect_error*/) {
  GemmSpec s;
  s.m = node.required<std::int64_t>("m");
  s.n = node.required<std::int64_t>("n");
  s.k = node.required<std::int64_t>("k");
  s.dtype = node.required<std::string>("dtype");
  s.epilogue = node.required<std::string>("epilogue");
  s.layout = node.optional<std::string>("layout").value_or("nt");
  s.device = node.optional<std::string>("device").value_or("cpu");
  s.impls = node.optional<std::vector<std::string>>("impls");
  s.alpha = node.optional<double>("alpha").value_or(1.0);
  s.bias_offset = node.optional<std::int64_t>("bias_offset").value_or(0);
  if (const YAML::Node w = node.raw("workspace"); w && !w.IsNull()) {
    if (!w.IsScalar()) node.fail_at(w, "workspace", "must be a size in bytes or e.g. 32MiB");
    s.workspace = read_bytes(w, node, "workspace");
  }

  // The runner consumed `perf` already; the kind only needs to know its iteration counts to
  // time every implementation itself.
  const YAML::Node perf = node.node()["perf"];
  const bool has_perf = perf && perf.IsMap();
  int warmup = 5, iters = 20;
  if (has_perf) {
    if (perf["warmup"]) warmup = perf["warmup"].as<int>(5);
    if (perf["iters"]) iters = std::max(perf["iters"].as<int>(20), 1);
  }

  Resolved resolved =
      resolve(s, [&](std::string_view key, const Error& e) { reject_value(node, key, e.what()); });
  return std::make_unique<GemmCase>(std::move(s), std::move(resolved), warmup, iters, has_perf);
}

}  // namespace meshgate::runner
