#include "kinds/gemm_sweep/sweep_spec.hpp"

#include <algorithm>
#include <sstream>

#include "core/error.hpp"

namespace meshgate::runner {
namespace {

namespace g = meshgate::gemm;

// Field numbers of the configuration draws (gemm/sweep.hpp keeps 1-15 for the shape).
enum : std::uint64_t {
  kDrawDtype = 16, kDrawEpilogue, kDrawBias, kDrawLayout, kDrawXOffset, kDrawWOffset,
  kDrawBiasOffset, kDrawWorkspace, kDrawSplitK,
};

// A list of names, each parsed by `parse`; `fallback` when the key is absent.
template <class T, class Parse>
std::vector<T> read_names(CaseNode& node, std::string_view key, Parse parse,
                          std::vector<T> fallback) {
  const auto names = node.optional<std::vector<std::string>>(key);
  if (!names) return fallback;
  if (names->empty()) reject_value(node, key, "is empty: list at least one or omit the key");
  std::vector<T> out;
  for (const std::string& name : *names) {
    try {
      out.push_back(parse(name));
    } catch (const Error& e) {
      reject_value(node, key, e.what());
    }
  }
  return out;
}

std::vector<std::int64_t> read_counts(CaseNode& node, std::string_view key,
                                      std::vector<std::int64_t> fallback) {
  const auto values = node.optional<std::vector<std::int64_t>>(key);
  if (!values) return fallback;
  if (values->empty()) reject_value(node, key, "is empty: list at least one or omit the key");
  for (const std::int64_t v : *values)
    if (v < 0) reject_value(node, key, "holds " + std::to_string(v) + ": values are >= 0");
  return *values;
}

g::SizeRange read_range(CaseNode& node, std::string_view key, g::SizeRange fallback) {
  const auto values = node.optional<std::vector<std::int64_t>>(key);
  if (!values) return fallback;
  if (values->size() != 2 || (*values)[0] < 1 || (*values)[1] < (*values)[0])
    reject_value(node, key, "is a range [lo, hi] with 1 <= lo <= hi");
  if ((*values)[1] > (1LL << 31))
    reject_value(node, key, "reaches past 2^31: sgemm and cuBLASLt take 32-bit sizes");
  return {(*values)[0], (*values)[1]};
}

std::int64_t read_split_k_value(CaseNode& node, const std::string& text) {
  if (text == "auto") return 0;
  try {
    std::size_t used = 0;
    const std::int64_t v = std::stoll(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  reject_value(node, "split_k", "'" + text + "' is not a split-K count: write auto or an integer");
}

void read_shape_space(CaseNode& node, SweepSpec& s) {
  if (const auto shapes = node.optional<std::vector<std::vector<std::int64_t>>>("shapes")) {
    for (const auto& mnk : *shapes) {
      if (mnk.size() != 3 || *std::min_element(mnk.begin(), mnk.end()) < 1)
        reject_value(node, "shapes", "lists [m, n, k] triples of sizes >= 1");
      s.shapes.push_back({mnk[0], mnk[1], mnk[2]});
    }
    if (s.shapes.empty()) reject_value(node, "shapes", "is empty");
  }
  const auto count = node.optional<std::int64_t>("count");
  if (s.shapes.empty() && !count) node.fail("count", "is required unless shapes lists them");
  if (!s.shapes.empty() && count) reject_value(node, "count", "goes with drawn shapes, not shapes");
  s.count = s.shapes.empty() ? *count : static_cast<std::int64_t>(s.shapes.size());
  if (s.count < 1) reject_value(node, "count", "must be >= 1");
  s.seed = static_cast<std::uint64_t>(node.optional<std::int64_t>("seed").value_or(1));
  try {
    s.space.mode = g::parse_shape_mode(node.optional<std::string>("mode").value_or("uniform"));
  } catch (const Error& e) {
    reject_value(node, "mode", e.what());
  }
  const bool extreme = s.space.mode == g::ShapeMode::extreme;
  s.space.m = read_range(node, "m", extreme ? g::SizeRange{1, 64} : g::SizeRange{1, 256});
  s.space.n = read_range(node, "n", extreme ? g::SizeRange{1, 64} : g::SizeRange{1, 256});
  s.space.k = read_range(node, "k", extreme ? g::SizeRange{1024, 400000} : g::SizeRange{1, 4096});
}

}  // namespace

const std::vector<std::string>& gemm_sweep_case_keys() {
  static const std::vector<std::string> keys = {
      "seed", "count", "mode", "m", "n", "k", "shapes", "dtypes", "epilogues", "bias", "layouts",
      "x_offsets", "w_offsets", "bias_offsets", "workspaces", "split_k", "impls", "checkpoint"};
  return keys;
}

SweepSpec read_sweep_spec(CaseNode& node) {
  SweepSpec s;
  s.case_id = node.case_id();
  read_shape_space(node, s);
  s.dtypes = read_names<g::DType>(node, "dtypes", g::parse_dtype,
                                  {g::DType::f32, g::DType::f16, g::DType::bf16});
  s.epilogues = read_names<g::Epilogue>(node, "epilogues", g::parse_epilogue, {g::Epilogue::bias});
  s.layouts = read_names<g::GemmLayout>(node, "layouts", g::parse_layout, {g::GemmLayout::nt});
  s.bias = node.optional<std::vector<bool>>("bias").value_or(std::vector<bool>{true});
  if (s.bias.empty()) reject_value(node, "bias", "is empty: list true, false or both");
  s.x_offsets = read_counts(node, "x_offsets", {0});
  s.w_offsets = read_counts(node, "w_offsets", {0});
  s.bias_offsets = read_counts(node, "bias_offsets", {0});
  s.workspaces = read_counts(node, "workspaces", {32LL << 20});
  const auto split = node.optional<std::vector<std::string>>("split_k")
                         .value_or(std::vector<std::string>{"auto"});
  if (split.empty()) reject_value(node, "split_k", "is empty: list auto or counts");
  for (const std::string& text : split) s.split_ks.push_back(read_split_k_value(node, text));
  s.impls = read_names<g::Impl>(node, "impls", g::parse_impl,
                                {g::Impl::cpu_epilogue, g::Impl::cpu_unfused,
                                 g::Impl::cpu_beta_bias});
  for (std::size_t i = 0; i < s.impls.size(); ++i)
    if (std::count(s.impls.begin(), s.impls.end(), s.impls[i]) > 1)
      reject_value(node, "impls", "lists '" + std::string(g::to_string(s.impls[i])) + "' twice");
  s.checkpoint = node.optional<std::string>("checkpoint");
  if (!s.shapes.empty()) {
    const bool single = s.dtypes.size() == 1 && s.epilogues.size() == 1 && s.bias.size() == 1 &&
                        s.layouts.size() == 1 && s.x_offsets.size() == 1 &&
                        s.w_offsets.size() == 1 && s.bias_offsets.size() == 1 &&
                        s.workspaces.size() == 1 && s.split_ks.size() == 1;
    if (!single)
      reject_value(node, "shapes",
                   "takes one value per configuration list: explicit shapes are reproductions");
  }
  return s;
}

SweepPoint sweep_point(const SweepSpec& s, std::int64_t index) {
  SweepPoint pt;
  pt.index = index;
  pt.shape = s.shapes.empty() ? g::draw_shape(s.space, s.seed, index)
                              : s.shapes[static_cast<std::size_t>(index)];
  const auto pick = [&](const auto& list, std::uint64_t field) {
    return list[g::draw_choice(list.size(), s.seed, index, field)];
  };
  g::GemmProblem& p = pt.problem;
  p.m = pt.shape.m, p.n = pt.shape.n, p.k = pt.shape.k;
  p.dtype = pick(s.dtypes, kDrawDtype);
  p.epilogue = pick(s.bias, kDrawBias) ? pick(s.epilogues, kDrawEpilogue) : g::Epilogue::none;
  p.layout = pick(s.layouts, kDrawLayout);
  p.x_offset = pick(s.x_offsets, kDrawXOffset);
  p.w_offset = pick(s.w_offsets, kDrawWOffset);
  p.bias_offset = pick(s.bias_offsets, kDrawBiasOffset);
  p.workspace = pick(s.workspaces, kDrawWorkspace);
  p.split_k = pick(s.split_ks, kDrawSplitK);
  return pt;
}

nlohmann::json sweep_params(const SweepSpec& s) {
  const auto names = [](const auto& list) {
    std::vector<std::string> out;
    for (const auto& v : list) out.emplace_back(g::to_string(v));
    return out;
  };
  nlohmann::json j = {{"seed", s.seed},
                      {"count", s.count},
                      {"dtypes", names(s.dtypes)},
                      {"epilogues", names(s.epilogues)},
                      {"bias", s.bias},
                      {"layouts", names(s.layouts)},
                      {"x_offsets", s.x_offsets},
                      {"w_offsets", s.w_offsets},
                      {"bias_offsets", s.bias_offsets},
                      {"workspaces", s.workspaces},
                      {"split_k", s.split_ks},
                      {"impls", names(s.impls)}};
  if (s.shapes.empty()) {
    j["mode"] = g::to_string(s.space.mode);
    j["m"] = {s.space.m.lo, s.space.m.hi};
    j["n"] = {s.space.n.lo, s.space.n.hi};
    j["k"] = {s.space.k.lo, s.space.k.hi};
  } else {
    for (const g::SweepShape& sh : s.shapes) j["shapes"].push_back({sh.m, sh.n, sh.k});
  }
  return j;
}

std::string repro_case(const SweepPoint& pt, g::Impl impl) {
  const g::GemmProblem& p = pt.problem;
  std::ostringstream s;
  s << "{name: " << p.m << "x" << p.n << "x" << p.k << ", kind: gemm_sweep, shapes: [[" << p.m
    << ", " << p.n << ", " << p.k << "]], dtypes: [" << g::to_string(p.dtype)
    << "], epilogues: [" << g::to_string(p.epilogue == g::Epilogue::none ? g::Epilogue::bias
                                                                        : p.epilogue)
    << "], bias: [" << (p.epilogue != g::Epilogue::none ? "true" : "false") << "], layouts: ["
    << g::to_string(p.layout) << "], x_offsets: [" << p.x_offset << "], w_offsets: ["
    << p.w_offset << "], bias_offsets: [" << p.bias_offset << "], workspaces: [" << p.workspace
    << "], split_k: [" << (p.split_k == 0 ? "auto" : std::to_string(p.split_k))
    << "], impls: [" << g::to_string(impl) << "]}";
  return s.str();
}

}  // namespace meshgate::runner
