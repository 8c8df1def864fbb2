// The gemm kind handed to another implementation (docs/impl-protocol.md): the stored inputs,
// and the outputs it answers, judged by the same OutputJudge.

#include "kinds/gemm/gemm_case.hpp"

namespace meshgate::runner::gemm_kind {

std::optional<nlohmann::json> GemmCase::impl_request(const std::filesystem::path& dir,
                                           std::string& why) {
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

Outcome GemmCase::check_observables(const nlohmann::json& observables,
                          const std::filesystem::path& dir) {
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

}  // namespace meshgate::runner::gemm_kind
