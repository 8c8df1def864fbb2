// kind: gemm — bias-fused GEMM implementations against the fp64 reference and each other
// (docs/kinds.md, GEMM: Correctness, Performance). Keys: m, n, k, dtype, epilogue, layout, impls,
// device, alpha, bias_offset, x_offset, w_offset, ldx, ldw, ldy, batch, tf32, workspace, split_k,
// split_k_partials, isolate.
//
// `workspace` and `split_k` may be lists: every implementation then runs in every combination
// (a configuration), the first one is the pinned configuration, and an output that is not
// bitwise equal to the pinned one is reported as drift even when it is within tolerance
// (PyTorch #180875, #183923). Every output carries a fingerprint (a hash of its bits) and a
// ulp-distance summary, so a changed fingerprint on the same device and library shows up in
// the deterministic signals.
//
// Timing, with perf, is one method for every implementation, after the same warm-up: hot samples
// are batches of back-to-back calls sized to the case's minimum sample time as the runner sizes
// its own (timing.hpp; CUDA events around the batch on the GPU, a monotonic clock on the CPU)
// and report the time per call; cold samples are one call each, caches flushed before it. The
// fused-vs-best-alternative ratio is the ratio of the hot medians; the runner's samples
// (time_calls) are hot batches of the fused implementation (else of the first listed other than
// cpu_reference) timed by the same function.
//
// Another implementation under test (docs/impl-protocol.md, gemm) gets the stored inputs and
// answers its outputs; the same OutputJudge that checks meshgate's implementations in run()
// checks them, so a tolerance, a fingerprint or a drift means the same whoever computed it.
#include "kinds/gemm_kind.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "byte_size.hpp"
#include "case_kind.hpp"
#include "core/error.hpp"
#include "external_impl.hpp"
#include "gemm/cpu_gemm.hpp"
#include "gemm/gemm.hpp"
#include "gemm/numeric.hpp"
#include "gemm/lt_plan.hpp"
#include "gemm/reference.hpp"
#include "isolation.hpp"
#include "timing.hpp"
#ifdef MESHGATE_GEMM_CUDA
#include "gemm/cuda_gemm.hpp"
#endif

namespace meshgate::runner {
namespace {

namespace g = meshgate::gemm;

// A fused path slower than the best alternative by more than this is flagged (docs/kinds.md, GEMM: Performance).
constexpr double kSlowerFusedFlag = 1.05;

// The case's values as written; resolved into a problem while parsing, so that bad values are
// rejected before anything executes.
struct GemmSpec {
  std::int64_t m = 0, n = 0, k = 0;
  std::string dtype, epilogue, layout = "nt", device = "cpu";
  std::optional<std::vector<std::string>> impls;
  double alpha = 1.0;
  std::int64_t bias_offset = 0, x_offset = 0, w_offset = 0;
  std::int64_t ldx = 0, ldw = 0, ldy = 0, batch = 1;
  bool tf32 = false;
  std::vector<std::int64_t> workspaces{32LL << 20};
  std::vector<std::int64_t> split_ks{0};
  std::string split_k_partials = "float32";
  std::optional<bool> isolate;
};

// One combination of the library settings that may change the numerics.
struct Config {
  std::int64_t workspace = 0;
  std::int64_t split_k = 0;
  std::string label;
};

struct Resolved {
  g::GemmProblem problem;  // with the pinned configuration
  g::Device device = g::Device::cpu;
  std::vector<g::Impl> impls;
  std::vector<Config> configs;
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
  g::GemmProblem& p = r.problem;
  guard("dtype", [&] { p.dtype = g::parse_dtype(s.dtype); });
  guard("epilogue", [&] { p.epilogue = g::parse_epilogue(s.epilogue); });
  guard("layout", [&] { p.layout = g::parse_layout(s.layout); });
  guard("device", [&] { r.device = g::parse_device(s.device); });
  guard("split_k_partials", [&] { p.split_k_partials = g::parse_dtype(s.split_k_partials); });
  p.m = s.m, p.n = s.n, p.k = s.k;
  p.alpha = static_cast<float>(s.alpha);
  p.bias_offset = s.bias_offset, p.x_offset = s.x_offset, p.w_offset = s.w_offset;
  p.ldx = s.ldx, p.ldw = s.ldw, p.ldy = s.ldy, p.batch = s.batch;
  p.tf32 = s.tf32;
  p.workspace = s.workspaces.front();
  p.split_k = s.split_ks.front();
  // Each field validated alone first (on the case's layout and dtype, which the leading
  // dimensions and tf32 depend on), so that the error names the key that is wrong.
  const auto check_field = [&](std::string_view key, auto set) {
    guard(key, [&] {
      g::GemmProblem single;
      single.layout = p.layout, single.dtype = p.dtype;
      set(single);
      g::validate(single);
    });
  };
  check_field("m", [&](g::GemmProblem& q) { q.m = s.m; });
  check_field("n", [&](g::GemmProblem& q) { q.n = s.n; });
  check_field("k", [&](g::GemmProblem& q) { q.k = s.k; });
  guard("alpha", [&] {
    // The product's scale is a float (cuBLASLt's CUDA_R_32F scale type): a finite alpha beyond
    // its range would become infinity without a word.
    if (std::isfinite(s.alpha) && !std::isfinite(static_cast<float>(s.alpha))) {
      std::ostringstream message;
      message << "gemm alpha = " << s.alpha
              << " is outside float32's range (the scale type): use |alpha| <= 3.4e38";
      throw Error(ErrorKind::value, message.str());
    }
  });
  check_field("alpha", [&](g::GemmProblem& q) { q.alpha = static_cast<float>(s.alpha); });
  check_field("bias_offset", [&](g::GemmProblem& q) { q.bias_offset = s.bias_offset; });
  check_field("x_offset", [&](g::GemmProblem& q) { q.x_offset = s.x_offset; });
  check_field("w_offset", [&](g::GemmProblem& q) { q.w_offset = s.w_offset; });
  check_field("batch", [&](g::GemmProblem& q) { q.batch = s.batch; });
  check_field("tf32", [&](g::GemmProblem& q) { q.tf32 = s.tf32; });
  for (const std::int64_t w : s.workspaces)
    check_field("workspace", [&](g::GemmProblem& q) { q.workspace = w; });
  for (const std::int64_t k : s.split_ks)
    check_field("split_k", [&](g::GemmProblem& q) { q.split_k = k; });
  // Element counts overflow, and leading dimensions fall short, only in combination: the
  // problem grows one key at a time, in the order its element counts are built (sizes, batch,
  // leading dimensions, offsets), and the key whose value made it invalid is named.
  g::GemmProblem grown = p;
  grown.m = grown.n = grown.k = 0;
  grown.batch = 1;
  grown.ldx = grown.ldw = grown.ldy = 0;
  grown.x_offset = grown.w_offset = grown.bias_offset = 0;
  const auto grow = [&](std::string_view key, auto set) {
    guard(key, [&] {
      set(grown);
      g::validate(grown);
    });
  };
  grow("m", [&](g::GemmProblem& q) { q.m = s.m; });
  grow("n", [&](g::GemmProblem& q) { q.n = s.n; });
  grow("k", [&](g::GemmProblem& q) { q.k = s.k; });
  grow("batch", [&](g::GemmProblem& q) { q.batch = s.batch; });
  grow("ldx", [&](g::GemmProblem& q) { q.ldx = s.ldx; });
  grow("ldw", [&](g::GemmProblem& q) { q.ldw = s.ldw; });
  grow("ldy", [&](g::GemmProblem& q) { q.ldy = s.ldy; });
  grow("x_offset", [&](g::GemmProblem& q) { q.x_offset = s.x_offset; });
  grow("w_offset", [&](g::GemmProblem& q) { q.w_offset = s.w_offset; });
  grow("bias_offset", [&](g::GemmProblem& q) { q.bias_offset = s.bias_offset; });
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
  // What the CUDA libraries can express, checked here rather than when the case runs.
  const auto uses = [&](auto pred) { return std::any_of(r.impls.begin(), r.impls.end(), pred); };
  if (uses([](g::Impl i) { return g::device_of(i) == g::Device::cuda; })) {
    guard("batch", [&] { g::lt_operands(p); });
    for (const std::int64_t k : s.split_ks)
      guard("split_k_partials", [&] {
        g::GemmProblem q = p;
        q.split_k = k;
        g::check_lt_split_k(q);
      });
  }
  if (uses([](g::Impl i) { return i == g::Impl::cublas; }))
    guard("impls", [&] { g::check_fits_cublas(g::lt_operands(p)); });
  // Likewise what sgemm can take, named by the size that does not fit: the CPU impls are the
  // default, so `impls` may not be in the case at all.
  if (uses(g::uses_cpu_blas))
    for (const g::BlasArgument& a : g::cpu_blas_arguments(p))
      guard(a.field, [&] { g::check_fits_cpu_blas(a); });
  for (const std::int64_t w : s.workspaces)
    for (const std::int64_t k : s.split_ks)
      r.configs.push_back({w, k,
                           "workspace=" +
                               format_byte_size(static_cast<double>(w), ByteSizeStyle::label) +
                               " split_k=" + (k == 0 ? "auto" : std::to_string(k))});
  return r;
}

// A split-K count: an integer >= 0 or `auto` (0: the library's choice).
std::int64_t read_split_k(const YAML::Node& value, CaseNode& node) {
  if (!value.IsScalar()) node.fail_at(value, "split_k", "must be an integer or auto");
  if (value.Scalar() == "auto") return 0;
  try {
    std::size_t used = 0;
    const std::int64_t v = std::stoll(value.Scalar(), &used);
    if (used == value.Scalar().size()) return v;
  } catch (const std::exception&) {
  }
  node.fail_at(value, "split_k",
               "'" + value.Scalar() + "' is not a split-K count: write auto or an integer");
}

// A scalar or a non-empty list of scalars, each read by `read`.
template <class Read>
std::optional<std::vector<std::int64_t>> read_one_or_list(CaseNode& node, std::string_view key,
                                                          Read&& read) {
  const YAML::Node value = node.raw(key);
  if (!value || value.IsNull()) return std::nullopt;
  std::vector<std::int64_t> out;
  if (value.IsSequence()) {
    if (value.size() == 0) node.fail_at(value, key, "is an empty list: give at least one value");
    for (const YAML::Node& item : value) out.push_back(read(item));
  } else {
    out.push_back(read(value));
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

nlohmann::json comparison_json(const g::Comparison& c) {
  return {{"max_abs_err", c.max_abs_err},
          {"max_rel_err", c.max_rel_err},
          {"mean_rel_err", c.mean_rel_err},
          {"min_row_cosine", c.min_row_cosine},
          {"rows_checked", c.rows_checked},
          {"mismatches", c.mismatches},
          {"nonfinite_mismatches", c.nonfinite_mismatches},
          {"equal_infinities", c.equal_infinities},
          {"ok", c.ok}};
}

nlohmann::json ulp_json(const g::UlpSummary& u) {
  return {{"max", u.max}, {"mean", u.mean}, {"differing", u.differing}, {"compared", u.compared}};
}

// Ulp distances of y to the reference rounded once to the dtype, over the checked rows: the
// pinned reference configuration every implementation and configuration is measured against.
g::UlpSummary ulp_to_reference(const g::GemmProblem& p, const std::vector<std::int64_t>& rows,
                               const std::vector<double>& ref, const g::HostTensor& y) {
  g::UlpSummary s;
  long double sum = 0;
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::int64_t j = 0; j < p.n; ++j) {
      const float expected = static_cast<float>(g::round_to(p.dtype, ref[r * p.n + j]));
      const std::uint64_t d = g::ulp_distance(p.dtype, expected, y.get(g::y_index(p, rows[r], j)));
      s.max = std::max(s.max, d);
      sum += static_cast<long double>(d);
      s.differing += d != 0;
      ++s.compared;
    }
  s.mean = s.compared ? static_cast<double>(sum / s.compared) : 0.0;
  return s;
}

// Twice the last-level cache, written before each cold CPU sample: the GEMM starts with none
// of its operands cached.
std::size_t cold_flush_bytes() {
  const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? 2 * static_cast<std::size_t>(l3) : std::size_t{64} << 20;
}

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

Status parse_status(const std::string& s) {
  if (s == "pass") return Status::pass;
  if (s == "fail") return Status::fail;
  if (s == "skip") return Status::skip;
  return Status::error;
}

// Judges the outputs of one problem, whoever computed them (meshgate's implementations in run(),
// another implementation's answers in check_observables()): each output against the fp64
// reference of the checked rows with the dtype's tolerance and row cosine, each output of a
// configuration after the pinned one against the same implementation's pinned output (drift),
// and every pair of implementations of the pinned configuration against each other.
class OutputJudge {
 public:
  OutputJudge(const Resolved& r, const g::GemmInputs& inputs)
      : r_(r),
        // All rows up to 2^30 multiply-adds of fp64 reference, evenly spread rows beyond that.
        rows_(g::rows_to_check(r.problem, 1 << 30)),
        ref_(g::reference_rows(r.problem, inputs, rows_)),
        tol_(g::tolerance_for(r.problem)) {}

  // Judges `y`, the output of implementation `name` under configuration `c` (0: the pinned
  // one), with what the run recorded of it in `entry`. The implementations of a configuration
  // come in the same order as those of the pinned one.
  void add(std::size_t c, const std::string& name, nlohmann::json entry,
           const std::string& plan_line, g::HostTensor y) {
    const Config& config = r_.configs[c];
    g::GemmProblem q = r_.problem;
    q.workspace = config.workspace;
    q.split_k = config.split_k;
    const g::Comparison cmp = g::compare_to_reference(q, rows_, ref_, y, tol_);
    entry["fingerprint"] = g::fingerprint(q, y);
    entry["ulp_vs_reference"] = ulp_json(ulp_to_reference(q, rows_, ref_, y));
    entry.update(comparison_json(cmp));
    if (config.split_k > 1 && entry.contains("algo"))
      split_k_requests_.push_back(
          {name, config.label, config.split_k, entry["algo"].value("split_k_forced", false)});
    const std::string where = r_.configs.size() > 1 ? " [" + config.label + "]" : "";
    if (!cmp.ok) failures_.push_back(name + where + " vs fp64 reference: " + cmp.describe());
    outcome_.plan.push_back(c == 0 ? plan_line : "[" + config.label + "] " + plan_line);
    if (c == 0) {
      impls_[name] = std::move(entry);
      names_.push_back(name);
      pinned_.push_back(std::move(y));
      return;
    }
    const auto at = std::find(names_.begin(), names_.end(), name);
    if (at == names_.end())
      throw std::logic_error("gemm: " + name + " has no output in the pinned configuration");
    const g::UlpSummary vs_pinned = g::ulp_summary(q, pinned_[at - names_.begin()], y);
    entry["ulp_vs_pinned"] = ulp_json(vs_pinned);
    if (vs_pinned.differing > 0) {
      nlohmann::json& d = drift_[name];
      d["configs"].push_back(config.label);
      d["max_ulp_vs_pinned"] =
          std::max<std::uint64_t>(d.value("max_ulp_vs_pinned", std::uint64_t{0}), vs_pinned.max);
    }
    config_impls_[name] = std::move(entry);
  }

  // After the last output of configuration `c`.
  void end_config(std::size_t c) {
    if (c == 0) return;
    const Config& config = r_.configs[c];
    configs_.push_back({{"label", config.label},
                        {"workspace", config.workspace},
                        {"split_k", config.split_k},
                        {"impls", config_impls_}});
    config_impls_ = nlohmann::json::object();
  }

  // Compares the implementations with each other and writes the metrics; returns the flags of
  // numerics, drift and split-K, which the caller may extend before conclude().
  std::vector<std::string> summarize(const std::vector<std::string>& environments) {
    const g::GemmProblem& p = r_.problem;
    // Every implementation within tolerance of every other: drift between paths is a failure
    // even when each one alone is close enough to the reference.
    nlohmann::json pairs = nlohmann::json::object();
    for (std::size_t a = 0; a < names_.size(); ++a)
      for (std::size_t b = a + 1; b < names_.size(); ++b) {
        const g::Comparison c = g::compare_outputs(p, pinned_[a], pinned_[b], tol_);
        const std::string name = names_[a] + "/" + names_[b];
        pairs[name] = {
            {"max_abs_err", c.max_abs_err},
            {"min_row_cosine", c.min_row_cosine},
            {"bitwise_equal", g::fingerprint(p, pinned_[a]) == g::fingerprint(p, pinned_[b])},
            {"ok", c.ok}};
        if (!c.ok) failures_.push_back(name + " drift: " + c.describe());
      }
    nlohmann::json& metrics = outcome_.metrics;
    metrics["impls"] = impls_;
    metrics["pairs"] = pairs;
    metrics["pinned_config"] = r_.configs.front().label;
    if (r_.configs.size() > 1) {
      metrics["configs"] = configs_;
      metrics["drift"] = drift_;
    }
    std::string joined_env;
    for (const std::string& e : environments) joined_env += (joined_env.empty() ? "" : " + ") + e;
    metrics["numerics_env"] = joined_env;
    metrics["tolerance"] = {{"atol", tol_.atol},
                            {"rtol", tol_.rtol},
                            {"max_mean_rel", tol_.max_mean_rel},
                            {"min_cosine", tol_.min_cosine}};
    metrics["flops"] = g::flops(p);

    std::vector<std::string> flags;
    if (!failures_.empty()) flags.push_back("numerics: " + failures_.front());
    for (const auto& [name, d] : drift_.items()) {
      std::ostringstream s;
      s << "drift: " << name << " is not bitwise equal to its output at "
        << r_.configs.front().label << " under " << d["configs"].size()
        << " other configuration(s) (max " << d["max_ulp_vs_pinned"].get<std::uint64_t>()
        << " ulp)";
      flags.push_back(s.str());
    }
    if (std::string flag = split_k_flag(split_k_requests_); !flag.empty())
      flags.push_back(flag);
    return flags;
  }

  // The metrics written by summarize() (perf adds to them before conclude()).
  Outcome& outcome() { return outcome_; }

  // The verdict: fail naming every failure, else pass (saying the first flag when there is one).
  Outcome conclude(std::vector<std::string> flags) {
    outcome_.metrics["flags"] = flags;
    if (!failures_.empty()) {
      outcome_.status = Status::fail;
      std::ostringstream message;
      for (std::size_t i = 0; i < failures_.size(); ++i)
        message << (i ? "; " : "") << failures_[i];
      outcome_.message = message.str();
    } else if (!flags.empty()) {
      outcome_.message = "flagged: " + flags.front();
    }
    return std::move(outcome_);
  }

 private:
  const Resolved& r_;
  std::vector<std::int64_t> rows_;
  std::vector<double> ref_;
  g::Tolerance tol_;
  Outcome outcome_;
  std::vector<std::string> failures_;
  std::vector<std::string> names_;    // the implementations, in the order of the pinned outputs
  std::vector<g::HostTensor> pinned_;  // outputs of the pinned configuration, per implementation
  nlohmann::json impls_ = nlohmann::json::object();
  nlohmann::json config_impls_ = nlohmann::json::object();
  nlohmann::json configs_ = nlohmann::json::array();
  nlohmann::json drift_ = nlohmann::json::object();
  std::vector<SplitKRequest> split_k_requests_;
};

// Runs the implementations of one device on one configuration of the problem.
class Executor {
 public:
  virtual ~Executor() = default;
  // Runs `impl` into a NaN-filled Y, records the executed path in `entry` and returns Y.
  virtual g::HostTensor run(g::Impl impl, nlohmann::json& entry, std::string& plan_line) = 0;
  // Seconds of `calls` back-to-back calls, the caches as the previous calls left them.
  virtual double time_hot(g::Impl impl, std::int64_t calls) = 0;
  // Seconds of one call after flushing the caches (untimed).
  virtual double time_cold(g::Impl impl) = 0;
  // Per-call host overhead measured without caches, when the implementation has one.
  virtual nlohmann::json setup_overhead(g::Impl) { return nullptr; }
};

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const g::GemmProblem& p, const g::GemmInputs& in, CpuGemmFunction run_cpu)
      : p_(p), in_(in), run_cpu_(std::move(run_cpu)) {}

  g::HostTensor run(g::Impl impl, nlohmann::json& entry, std::string& plan_line) override {
    g::HostTensor y(p_.dtype, g::y_elements(p_));
    y.fill_nan();
    run_cpu_(impl, p_, in_, y);
    entry["executed"] = g::to_string(impl);
    plan_line = std::string(g::to_string(impl));
    return y;
  }

  double time_hot(g::Impl impl, std::int64_t calls) override {
    prepare_output();
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < calls; ++i) run_cpu_(impl, p_, in_, timing_output_);
    return seconds_since(start);
  }

  double time_cold(g::Impl impl) override {
    prepare_output();
    flush_.resize(cold_flush_bytes());
    std::memset(flush_.data(), static_cast<int>(++flushes_ & 0xff), flush_.size());
    const auto start = std::chrono::steady_clock::now();
    run_cpu_(impl, p_, in_, timing_output_);
    return seconds_since(start);
  }

 private:
  void prepare_output() {
    if (timing_output_.size() != g::y_elements(p_))
      timing_output_ = g::HostTensor(p_.dtype, g::y_elements(p_));
  }

  g::GemmProblem p_;
  const g::GemmInputs& in_;
  CpuGemmFunction run_cpu_;
  g::HostTensor timing_output_;
  std::vector<unsigned char> flush_;
  unsigned flushes_ = 0;
};

#ifdef MESHGATE_GEMM_CUDA
class CudaExecutor final : public Executor {
 public:
  CudaExecutor(const g::GemmProblem& p, const g::GemmInputs& in) : gemm_(p, in) {}

  g::HostTensor run(g::Impl impl, nlohmann::json& entry, std::string& plan_line) override {
    gemm_.fill_output_nan();
    const g::CudaRunInfo info = gemm_.run(impl);
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
                       {"split_k_forced", info.split_k_forced},
                       {"heuristic_cached", info.heuristic_cached}};
    plan_line = g::describe(info);
    return gemm_.output();
  }

  double time_hot(g::Impl impl, std::int64_t calls) override {
    return gemm_.sample_calls(impl, calls);
  }
  double time_cold(g::Impl impl) override { return gemm_.sample(impl, true); }

  nlohmann::json setup_overhead(g::Impl impl) override {
    if (impl == g::Impl::cublas) return nullptr;  // cublasGemmEx has no descriptors to build
    const g::LtSetupOverhead o = gemm_.measure_setup_overhead(impl);
    return {{"descriptors_s", o.descriptors_s}, {"heuristic_s", o.heuristic_s}};
  }

 private:
  g::CudaGemm gemm_;
};
#endif

class GemmCase final : public PreparedCase {
 public:
  GemmCase(GemmSpec spec, Resolved resolved, bool timed, std::string file, std::string case_id,
           CpuGemmFunction run_cpu)
      : spec_(std::move(spec)),
        resolved_(std::move(resolved)),
        timed_(timed),
        file_(std::move(file)),
        case_id_(std::move(case_id)),
        run_cpu_(std::move(run_cpu)) {}

  nlohmann::json params() const override {
    nlohmann::json p = {
        {"m", spec_.m},
        {"n", spec_.n},
        {"k", spec_.k},
        {"dtype", spec_.dtype},
        {"epilogue", spec_.epilogue},
        {"layout", spec_.layout},
        {"device", spec_.device},
        {"alpha", spec_.alpha},
        {"bias_offset", spec_.bias_offset},
        {"x_offset", spec_.x_offset},
        {"w_offset", spec_.w_offset},
        {"ldx", spec_.ldx},
        {"ldw", spec_.ldw},
        {"ldy", spec_.ldy},
        {"batch", spec_.batch},
        {"tf32", spec_.tf32},
        {"workspace", spec_.workspaces.size() == 1 ? nlohmann::json(spec_.workspaces.front())
                                                   : nlohmann::json(spec_.workspaces)},
        {"split_k", spec_.split_ks.size() == 1 ? nlohmann::json(spec_.split_ks.front())
                                               : nlohmann::json(spec_.split_ks)},
        {"split_k_partials", spec_.split_k_partials},
        {"isolate", isolated()}};
    p["dtype"] = g::to_string(resolved_.problem.dtype);
    p["split_k_partials"] = g::to_string(resolved_.problem.split_k_partials);
    nlohmann::json impls = nlohmann::json::array();
    for (g::Impl i : resolved_.impls) impls.push_back(g::to_string(i));
    p["impls"] = impls;
    return p;
  }

  // Host memory of a run, an upper bound: what lives through the whole run (X, W and the bias
  // as stored, padding, offsets and the batch included; one output per implementation, all
  // kept for the pairwise comparison, and one for timing; the fp64 reference of the checked
  // rows and their list), the largest working set one step holds while it runs (the
  // reference's fp32 op(W) per batch; cpu_reference's whole fp64 result and row list; a BLAS
  // implementation's fp32 copies of X and W and its fp32 product buffers; the cache flush of
  // cold timing) and a fixed overhead. The key named is the one the largest part grows with.
  MemoryEstimate memory_estimate() const override {
    const g::GemmProblem& p = resolved_.problem;
    const std::vector<g::Impl>& impls = resolved_.impls;
    const auto uses = [&](auto pred) { return std::any_of(impls.begin(), impls.end(), pred); };
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

    struct Working {
      MemoryPart part;
      std::string what;
    };
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
      const bool split = std::any_of(resolved_.configs.begin(), resolved_.configs.end(),
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
    if (timed_ && uses([](g::Impl i) { return g::device_of(i) == g::Device::cpu; }))
      working.push_back(
          {{static_cast<double>(cold_flush_bytes()), "perf"}, "the cache flush of cold timing"});
    const Working& step = *std::max_element(
        working.begin(), working.end(),
        [](const Working& a, const Working& b) { return a.part.bytes < b.part.bytes; });

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

  Outcome run(RunContext& ctx) override {
    perf_ = ctx.perf();
    const Resolved& r = resolved_;
    const g::GemmProblem& p = r.problem;

    bool needs_cuda = r.device == g::Device::cuda;
    bool needs_cpu = false;
    for (g::Impl i : r.impls) (g::device_of(i) == g::Device::cuda ? needs_cuda : needs_cpu) = true;
#ifndef MESHGATE_GEMM_CUDA
    if (needs_cuda)
      return skipped(
          "meshgate was built without CUDA: configure with -DMESHGATE_CUDA=ON on a machine with "
          "nvcc");
#endif
    // The parent of an isolated case touches no device: the child does all of it.
    if (isolated() && !in_isolated_child()) return run_in_child();
    std::vector<std::string> environments;
    if (needs_cuda) {
#ifdef MESHGATE_GEMM_CUDA
      if (g::cuda_device_count() == 0) return skipped("no CUDA device present");
      environments.push_back(g::cuda_numerics_environment());
#endif
    }
    if (needs_cpu) environments.push_back(g::cpu_numerics_environment());

    inputs_ = g::make_inputs(p);
    OutputJudge judge(r, inputs_);
    for (std::size_t c = 0; c < r.configs.size(); ++c) {
      for (const g::Impl impl : r.impls) {
        const std::string name(g::to_string(impl));
        nlohmann::json entry = {{"device", g::to_string(g::device_of(impl))}};
        std::string plan_line;
        g::HostTensor y = executor(c, g::device_of(impl)).run(impl, entry, plan_line);
        if (c == 0 && (perf_ || r.configs.size() > 1)) {
          if (nlohmann::json o = executor(c, g::device_of(impl)).setup_overhead(impl);
              !o.is_null())
            entry["setup_overhead_s"] = o;
        }
        judge.add(c, name, std::move(entry), plan_line, std::move(y));
      }
      judge.end_config(c);
      if (c > 0 && !perf_) release_config(c);  // only the pinned configuration is timed
    }
    std::vector<std::string> flags = judge.summarize(environments);
    if (perf_) measure_all(judge.outcome(), flags);
    Outcome outcome = judge.conclude(std::move(flags));
    if (!perf_) release();
    return outcome;
  }

  // Hot calls of timed_impl(), by the same time_hot() that times every implementation in run().
  // An isolated case hands over the samples its child process measured from run() instead.
  double time_calls(RunContext&, std::int64_t calls) override {
    if (isolated() && !in_isolated_child())
      throw std::logic_error("gemm: the isolated process of case " + case_id_ +
                             " passed without timed samples");
    const g::Impl impl = timed_impl();
    return executor(0, g::device_of(impl)).time_hot(impl, calls);
  }

  void release() override {
    executors_.clear();
  }

  // The case for another implementation (docs/impl-protocol.md, gemm): the problem's keys and
  // the stored input buffers exactly as meshgate's implementations read them (offsets, padded
  // leading dimensions and batch strides included), each with the strided view of the stored
  // matrix inside it. The layout's transposes are the implementation's to apply.
  std::optional<nlohmann::json> impl_request(const std::filesystem::path& dir,
                                             std::string& why) override {
    const Resolved& r = resolved_;
    const g::GemmProblem& p = r.problem;
    if (r.configs.size() > 1) {
      why = "the case compares " + std::to_string(r.configs.size()) +
            " configurations of workspace and split_k; the protocol's gemm request carries one";
      return std::nullopt;
    }
    inputs_ = g::make_inputs(p);
    const std::string dtype(g::to_string(p.dtype));
    const auto write = [&](const char* name, const g::HostTensor& t) {
      return write_tensor_file(dir / (std::string(name) + ".bin"), dtype, {t.size()}, t.data(),
                               t.bytes());
    };
    const auto view = [](std::int64_t offset, std::vector<std::int64_t> shape,
                         std::vector<std::int64_t> stride) {
      return nlohmann::json{{"offset", offset}, {"shape", shape}, {"stride", stride}};
    };
    const bool xt = g::x_transposed(p), wt = g::w_transposed(p);
    const bool bias = g::has_bias(p.epilogue);
    nlohmann::json request = {
        {"m", p.m},
        {"n", p.n},
        {"k", p.k},
        {"batch", p.batch},
        {"dtype", dtype},
        {"epilogue", g::to_string(p.epilogue)},
        {"layout", g::to_string(p.layout)},
        {"alpha", static_cast<double>(p.alpha)},
        {"device", request_device()},
        {"tf32", p.tf32},
        {"workspace", p.workspace},
        {"split_k", p.split_k},
        {"split_k_partials", g::to_string(p.split_k_partials)},
        {"ldy", g::y_ld(p)},
        {"inputs",
         {{"x", write("x", inputs_.x)},
          {"w", write("w", inputs_.w)},
          {"bias", bias ? write("bias", inputs_.bias) : nlohmann::json()}}},
        {"views",
         {{"x", view(p.x_offset, {p.batch, xt ? p.k : p.m, xt ? p.m : p.k},
                     {g::x_batch_stride(p), g::x_ld(p), 1})},
          {"w", view(p.w_offset, {p.batch, wt ? p.n : p.k, wt ? p.k : p.n},
                     {g::w_batch_stride(p), g::w_ld(p), 1})},
          {"bias", bias ? view(p.bias_offset, {p.n}, {1}) : nlohmann::json()}}}};
    return request;
  }

  // Every output the implementation answered, judged by the same OutputJudge as meshgate's own
  // implementations in run(): against the fp64 reference and against each other.
  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path& dir) override {
    const Resolved& r = resolved_;
    const g::GemmProblem& p = r.problem;
    const auto shorten = [](const nlohmann::json& v) {
      std::string text = v.dump();
      return text.size() > 200 ? text.substr(0, 200) + "..." : text;
    };
    if (!observables.is_object() || !observables.contains("impls") ||
        !observables["impls"].is_object() || observables["impls"].empty())
      throw ImplFailure("answered gemm observables without a non-empty object 'impls': " +
                        shorten(observables));
    std::string environment;
    if (observables.contains("numerics_env")) {
      if (!observables["numerics_env"].is_string())
        throw ImplFailure("answered a 'numerics_env' that is not a string: " +
                          shorten(observables["numerics_env"]));
      environment = observables["numerics_env"].get<std::string>();
    }
    const std::string dtype(g::to_string(p.dtype));
    const std::int64_t ldy = g::y_ld(p);
    OutputJudge judge(r, inputs_);
    for (const auto& [name, answered] : observables["impls"].items()) {
      // Pairs are named "a/b": a name with a slash would make them ambiguous.
      if (name.empty() || name.find('/') != std::string::npos)
        throw ImplFailure("answered an output named '" + name +
                          "': a name is non-empty and has no '/'");
      if (!answered.is_object() || !answered.contains("output") ||
          !answered.contains("fused") || !answered["fused"].is_boolean() ||
          !answered.contains("path") || !answered["path"].is_string())
        throw ImplFailure("answered '" + name +
                          "' without {output: TENSOR, fused: bool, path: string}: " +
                          shorten(answered));
      const TensorFile t = read_tensor_file(answered["output"], dir, "the output of '" + name + "'");
      if (t.dtype != dtype)
        throw ImplFailure("answered the output of '" + name + "' as " + t.dtype +
                          "; the case's dtype is " + dtype);
      const std::vector<std::int64_t> stored = {p.batch, p.m, ldy};
      const bool shaped =
          t.shape == stored || (p.batch == 1 && t.shape == std::vector<std::int64_t>{p.m, ldy});
      if (!shaped)
        throw ImplFailure("answered the output of '" + name + "' with shape " +
                          nlohmann::json(t.shape).dump() + "; Y as stored is " +
                          nlohmann::json(stored).dump() + " ([batch, m, ldy])");
      // read_tensor_file checked that the file holds exactly its shape, which is Y's.
      g::HostTensor y(p.dtype, g::y_elements(p));
      if (!t.bytes.empty()) std::memcpy(y.data(), t.bytes.data(), t.bytes.size());
      const std::string path = answered["path"].get<std::string>();
      nlohmann::json entry = {{"device", request_device()},
                              {"executed", path},
                              {"fused", answered["fused"].get<bool>()}};
      judge.add(0, name, std::move(entry), name + ": " + path, std::move(y));
    }
    judge.end_config(0);
    std::vector<std::string> flags =
        judge.summarize(environment.empty() ? std::vector<std::string>{}
                                            : std::vector<std::string>{environment});
    return judge.conclude(std::move(flags));
  }

 private:
  static Outcome skipped(std::string reason) {
    Outcome o;
    o.status = Status::skip;
    o.message = std::move(reason);
    return o;
  }

  // A case is a CUDA case when its device is cuda or it lists a CUDA implementation.
  bool uses_cuda() const {
    return resolved_.device == g::Device::cuda ||
           std::any_of(resolved_.impls.begin(), resolved_.impls.end(),
                       [](g::Impl i) { return g::device_of(i) == g::Device::cuda; });
  }
  std::string request_device() const { return uses_cuda() ? "cuda" : "cpu"; }

  // CUDA cases run in a child process unless the case says otherwise: a sticky device fault
  // then costs one error row, not the rest of the suite. A case is a CUDA case when it lists a
  // CUDA implementation, whatever its `device` (which only picks the default impls).
  bool isolated() const {
    if (spec_.isolate) return *spec_.isolate;
    return uses_cuda();
  }

  Outcome run_in_child() {
    std::vector<std::string> options;
    if (perf_) {
      // The child times as this process would: a --min-sample-time given here applies there too.
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.17g", perf_->min_sample_time());
      options = {"--min-sample-time", seconds};
    }
    const IsolatedRun child = run_case_isolated(file_, case_id_, options);
    Outcome o;
    if (!child.row) {
      o.status = Status::error;
      o.message = "case " + case_id_ + ": its isolated process (pid " +
                  std::to_string(child.exit.pid) + ") " + child.exit.describe() +
                  " before it wrote a result; only this case is lost, the next one starts in a "
                  "fresh process";
      if (!child.exit.stderr_tail.empty())
        o.message += "; its stderr ends: " + child.exit.stderr_tail;
      return o;
    }
    const nlohmann::json& row = *child.row;
    o.status = parse_status(row.value("status", "error"));
    o.message = row.value("message", "");
    if (row.contains("plan") && row["plan"].is_array())
      for (const auto& line : row["plan"]) o.plan.push_back(line.get<std::string>());
    if (row.contains("metrics") && row["metrics"].is_object()) o.metrics = row["metrics"];
    // The runner summarises the child's samples itself, as those of a case timed in run().
    if (const auto calls = o.metrics.find("time_s");
        calls != o.metrics.end() && calls->is_object() && calls->contains("calls_per_sample"))
      o.measured_calls_per_sample = (*calls)["calls_per_sample"].get<std::int64_t>();
    o.metrics.erase("time_s");
    o.metrics["isolation"] = {{"pid", child.exit.pid}, {"exit", child.exit.describe()}};
    if (row.contains("samples") && row["samples"].contains("time_s") &&
        row["samples"]["time_s"].is_array() && !row["samples"]["time_s"].empty())
      o.measured_time_s = row["samples"]["time_s"][0].get<std::vector<double>>();
    return o;
  }

  g::GemmProblem problem_of(const Config& config) const {
    g::GemmProblem q = resolved_.problem;
    q.workspace = config.workspace;
    q.split_k = config.split_k;
    return q;
  }

  Executor& executor(std::size_t config, g::Device device) {
    std::unique_ptr<Executor>& slot = executors_[{config, device}];
    if (slot) return *slot;
    const g::GemmProblem q = problem_of(resolved_.configs[config]);
#ifdef MESHGATE_GEMM_CUDA
    if (device == g::Device::cuda) {
      slot = std::make_unique<CudaExecutor>(q, inputs_);
      return *slot;
    }
#endif
    slot = std::make_unique<CpuExecutor>(q, inputs_, run_cpu_);
    return *slot;
  }

  void release_config(std::size_t config) {
    std::erase_if(executors_, [&](const auto& e) { return e.first.first == config; });
  }

  // The fused implementation, else the first listed that is not the fp64 reference (a triple
  // loop, not a contender), else the reference.
  g::Impl timed_impl() const {
    const std::vector<g::Impl>& impls = resolved_.impls;
    for (g::Impl fused : {g::Impl::lt_epilogue, g::Impl::cpu_epilogue})
      if (std::find(impls.begin(), impls.end(), fused) != impls.end()) return fused;
    for (g::Impl impl : impls)
      if (impl != g::Impl::cpu_reference) return impl;
    return impls.front();
  }

  // The case's hot samples of `impl` (perf_): per-call seconds of batches sized as the runner
  // sizes its own, after the untimed warm-up.
  TimedSamples hot_samples(g::Impl impl) {
    Executor& e = executor(0, g::device_of(impl));
    return measure_calls([&](std::int64_t calls) { return e.time_hot(impl, calls); }, *perf_);
  }

  // The case's cold samples of `impl`: one call each, after as many untimed warm-up calls.
  std::vector<double> cold_samples(g::Impl impl) {
    Executor& e = executor(0, g::device_of(impl));
    for (int i = 0; i < perf_->warmup; ++i) e.time_cold(impl);
    std::vector<double> out;
    for (int i = 0; i < perf_->iters; ++i) out.push_back(e.time_cold(impl));
    return out;
  }

  void measure_all(Outcome& outcome, std::vector<std::string>& flags) {
    const Resolved& r = resolved_;
    const double f = g::flops(r.problem);
    nlohmann::json& impls = outcome.metrics["impls"];
    struct Times {
      double hot, cold;
    };
    std::map<g::Impl, Times> times;
    for (g::Impl impl : r.impls) {
      if (impl == g::Impl::cpu_reference) continue;  // a triple loop in fp64, not a contender
      const TimedSamples hot = hot_samples(impl);
      const Times t{median(hot.per_call_s), median(cold_samples(impl))};
      times[impl] = t;
      nlohmann::json& entry = impls[std::string(g::to_string(impl))];
      entry["time_s"] = t.hot;
      entry["calls_per_sample"] = hot.calls_per_sample;
      entry["time_cold_s"] = t.cold;
      entry["gflops"] = t.hot > 0 ? f / t.hot * 1e-9 : 0.0;
    }
    const g::Impl fused = timed_impl();
    const auto fused_it = times.find(fused);
    if (fused_it == times.end()) return;
    const std::string fused_name(g::to_string(fused));
    const std::string executed = impls[fused_name].value("executed", fused_name);
    outcome.metrics["fused_impl"] = fused_name;
    outcome.metrics["fused_executed"] = executed;
    std::optional<g::Impl> best;
    for (const auto& [impl, t] : times)
      if (impl != fused && (!best || t.hot < times[*best].hot)) best = impl;
    if (!best) return;
    outcome.metrics["best_alternative"] = g::to_string(*best);
    if (executed != fused_name) {
      // The fused path did not run: a ratio would compare the fallback with itself and read
      // as "no difference". Say what ran instead.
      outcome.metrics["fused_vs_best_alternative"] = nullptr;
      outcome.metrics["fused_vs_best_alternative_cold"] = nullptr;
      flags.push_back("fallback: " + fused_name + " executed as " + executed + " (" +
                      impls[fused_name].value("fallback_reason", std::string("no reason given")) +
                      "); no fused timing to compare");
      return;
    }
    const Times& ft = fused_it->second;
    const Times& bt = times[*best];
    const double ratio = bt.hot > 0 ? ft.hot / bt.hot : 0.0;
    outcome.metrics["fused_vs_best_alternative"] = ratio;
    outcome.metrics["fused_vs_best_alternative_cold"] = bt.cold > 0 ? ft.cold / bt.cold : 0.0;
    if (ratio > kSlowerFusedFlag) {
      std::ostringstream s;
      s.precision(3);
      s << "perf: " << fused_name << " is " << (ratio - 1) * 100 << "% slower than "
        << g::to_string(*best);
      flags.push_back(s.str());
    }
  }

  GemmSpec spec_;
  Resolved resolved_;
  // The case has perf: settings. Known when it is read, for the memory estimate; run() gets
  // the settings themselves from its RunContext.
  bool timed_;
  std::optional<PerfSpec> perf_;  // RunContext::perf() of the last run()
  std::string file_;
  std::string case_id_;
  CpuGemmFunction run_cpu_;
  g::GemmInputs inputs_;
  std::map<std::pair<std::size_t, g::Device>, std::unique_ptr<Executor>> executors_;
};

}  // namespace

const std::vector<std::string>& gemm_case_keys() {
  static const std::vector<std::string> keys = {
      "m",        "n",        "k",         "dtype",   "epilogue",
      "layout",   "device",   "impls",     "alpha",   "bias_offset",
      "x_offset", "w_offset", "ldx",       "ldw",     "ldy",
      "batch",    "tf32",     "workspace", "split_k", "split_k_partials",
      "isolate"};
  return keys;
}

std::unique_ptr<PreparedCase> parse_gemm_case_with(CaseNode& node, bool expect_error,
                                                   CpuGemmFunction run_cpu) {
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
  s.x_offset = node.optional<std::int64_t>("x_offset").value_or(0);
  s.w_offset = node.optional<std::int64_t>("w_offset").value_or(0);
  s.ldx = node.optional<std::int64_t>("ldx").value_or(0);
  s.ldw = node.optional<std::int64_t>("ldw").value_or(0);
  s.ldy = node.optional<std::int64_t>("ldy").value_or(0);
  s.batch = node.optional<std::int64_t>("batch").value_or(1);
  s.tf32 = node.optional<bool>("tf32").value_or(false);
  s.split_k_partials = node.optional<std::string>("split_k_partials").value_or("float32");
  s.isolate = node.optional<bool>("isolate");
  // A workspace of 0 bytes is none.
  if (auto w = read_one_or_list(node, "workspace", [&](const YAML::Node& v) {
        return read_byte_size(node, v, "workspace", ZeroBytes::allowed);
      }))
    s.workspaces = *w;
  if (auto k = read_one_or_list(node, "split_k",
                                [&](const YAML::Node& v) { return read_split_k(v, node); }))
    s.split_ks = *k;

  // The runner reads perf: and hands it to run() as RunContext::perf(); whether there is one
  // is known here because the memory estimate, made before anything runs, depends on it.
  const bool timed = node.has("perf") && !node.raw("perf").IsNull();
  // A rejection is what an expect_error case tests: it runs in this process, where the runner
  // judges it once.
  if (expect_error) s.isolate = false;

  Resolved resolved =
      resolve(s, [&](std::string_view key, const Error& e) { reject_value(node, key, e.what()); });
  return std::make_unique<GemmCase>(std::move(s), std::move(resolved), timed, node.file(),
                                    node.case_id(), std::move(run_cpu));
}

std::string split_k_flag(const std::vector<SplitKRequest>& requests) {
  std::string names;
  for (const SplitKRequest& r : requests)
    if (!r.applied) names += (names.empty() ? "" : ", ") + r.impl + " [" + r.config + "]";
  if (names.empty()) return "";
  return "split-K not applied: " + names +
         " ran the library's own choice (no algorithm took the split), so these configurations "
         "cannot show split-K drift";
}

std::unique_ptr<PreparedCase> parse_gemm_case(CaseNode& node, bool expect_error) {
  return parse_gemm_case_with(node, expect_error, &gemm::run_cpu);
}

}  // namespace meshgate::runner
