// Reading a gemm case: its keys, resolved into a problem so that bad values are rejected
// before anything executes.

#include "kinds/gemm/gemm_case.hpp"

namespace meshgate::runner {
namespace gemm_kind {
namespace {

// Runs `fn`; a meshgate error it throws goes to the case's `on_error(key, error)`.
template <class OnError>
struct Guard {
  OnError& on_error;
  template <class Fn>
  void operator()(std::string_view key, Fn&& fn) const {
    try {
      fn();
    } catch (const Error& e) {
      on_error(key, e);
    }
  }
};

// The problem's fields from the spec, each validated alone first (on the case's layout and
// dtype, which the leading dimensions and tf32 depend on), so that the error names the key that
// is wrong.
template <class G>
void resolve_fields(const GemmSpec& s, Resolved& r, const G& guard) {
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
}

// Element counts overflow, and leading dimensions fall short, only in combination: the
// problem grows one key at a time, in the order its element counts are built (sizes, batch,
// leading dimensions, offsets), and the key whose value made it invalid is named.
template <class G>
void check_grown(const GemmSpec& s, const g::GemmProblem& p, const G& guard) {
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
}

// `impls` (the device's by default), and what the libraries they call can express, checked
// here rather than when the case runs.
template <class G>
void resolve_impls(const GemmSpec& s, Resolved& r, const G& guard) {
  const g::GemmProblem& p = r.problem;
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
}

// Resolves one field at a time; `on_error(key, message)` decides what a bad value becomes.
template <class OnError>
Resolved resolve(const GemmSpec& s, OnError&& on_error) {
  Resolved r;
  const Guard<OnError> guard{on_error};
  resolve_fields(s, r, guard);
  check_grown(s, r.problem, guard);
  resolve_impls(s, r, guard);
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

}  // namespace
}  // namespace gemm_kind

using namespace gemm_kind;

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
