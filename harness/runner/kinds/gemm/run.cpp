// The gemm kind on meshgate's implementations: run every implementation on every configuration,
// judge the outputs, time them with perf; in a child process when the case is isolated.

#include "kinds/gemm/gemm_case.hpp"
#include "kinds/gemm/executors.hpp"

namespace meshgate::runner::gemm_kind {

GemmCase::GemmCase(GemmSpec spec, Resolved resolved, bool timed, std::string file,
                   std::string case_id, CpuGemmFunction run_cpu)
    : spec_(std::move(spec)),
      resolved_(std::move(resolved)),
      timed_(timed),
      file_(std::move(file)),
      case_id_(std::move(case_id)),
      run_cpu_(std::move(run_cpu)) {}

GemmCase::~GemmCase() = default;

nlohmann::json GemmCase::params() const {
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

Outcome GemmCase::run(RunContext& ctx) {
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

double GemmCase::time_calls(RunContext&, std::int64_t calls) {
  if (isolated() && !in_isolated_child())
    throw std::logic_error("gemm: the isolated process of case " + case_id_ +
                           " passed without timed samples");
  const g::Impl impl = timed_impl();
  return executor(0, g::device_of(impl)).time_hot(impl, calls);
}

void GemmCase::release() {
  executors_.clear();
}

Outcome GemmCase::skipped(std::string reason) {
  Outcome o;
  o.status = Status::skip;
  o.message = std::move(reason);
  return o;
}

bool GemmCase::uses_cuda() const {
  return resolved_.device == g::Device::cuda ||
         std::any_of(resolved_.impls.begin(), resolved_.impls.end(),
                     [](g::Impl i) { return g::device_of(i) == g::Device::cuda; });
}

bool GemmCase::isolated() const {
  if (spec_.isolate) return *spec_.isolate;
  return uses_cuda();
}

Outcome GemmCase::run_in_child() {
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

g::GemmProblem GemmCase::problem_of(const Config& config) const {
  g::GemmProblem q = resolved_.problem;
  q.workspace = config.workspace;
  q.split_k = config.split_k;
  return q;
}

Executor& GemmCase::executor(std::size_t config, g::Device device) {
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

void GemmCase::release_config(std::size_t config) {
  std::erase_if(executors_, [&](const auto& e) { return e.first.first == config; });
}

g::Impl GemmCase::timed_impl() const {
  const std::vector<g::Impl>& impls = resolved_.impls;
  for (g::Impl fused : {g::Impl::lt_epilogue, g::Impl::cpu_epilogue})
    if (std::find(impls.begin(), impls.end(), fused) != impls.end()) return fused;
  for (g::Impl impl : impls)
    if (impl != g::Impl::cpu_reference) return impl;
  return impls.front();
}

TimedSamples GemmCase::hot_samples(g::Impl impl) {
  Executor& e = executor(0, g::device_of(impl));
  return measure_calls([&](std::int64_t calls) { return e.time_hot(impl, calls); }, *perf_);
}

std::vector<double> GemmCase::cold_samples(g::Impl impl) {
  Executor& e = executor(0, g::device_of(impl));
  for (int i = 0; i < perf_->warmup; ++i) e.time_cold(impl);
  std::vector<double> out;
  for (int i = 0; i < perf_->iters; ++i) out.push_back(e.time_cold(impl));
  return out;
}

void GemmCase::measure_all(Outcome& outcome, std::vector<std::string>& flags) {
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

}  // namespace meshgate::runner::gemm_kind
