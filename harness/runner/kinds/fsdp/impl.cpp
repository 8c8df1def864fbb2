// The fsdp kind handed to another implementation (docs/impl-protocol.md): the request, and the
// answer's parameters and collectives read back.

#include "kinds/fsdp/fsdp_case.hpp"

namespace meshgate::runner::fsdp_kind {

std::optional<nlohmann::json> FsdpCase::impl_request(const std::filesystem::path&, std::string&) {
  return request();
}

nlohmann::json FsdpCase::request() const {
  return nlohmann::json{
      {"world", ranks()},
      {"mesh", {{"shape", mesh_shape}, {"names", mesh_names}}},
      {"model", {{"layers", layers}, {"bias", bias}, {"activation", activation}}},
      {"seed", seed},
      {"dtype", dtype},
      {"shard", shard},
      {"reshard_after_forward", reshard_after_forward},
      {"steps", steps},
      {"batch", batch},
      {"lr", lr}};
}

std::vector<StepComms> read_steps(const nlohmann::json& steps, const std::string& rank,
                                  std::int64_t expected_steps) {
  const std::string where = "steps." + rank;
  if (!steps.is_array()) throw ImplFailure("answered no list of steps for rank " + rank + " (" + where + ")");
  if (static_cast<std::int64_t>(steps.size()) != expected_steps) {
    throw ImplFailure("answered " + std::to_string(steps.size()) + " steps for rank " + rank +
                      ", the case runs " + std::to_string(expected_steps) + " (" + where + ")");
  }
  std::vector<StepComms> out;
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const nlohmann::json& step = steps[s];
    const std::string at = where + "[" + std::to_string(s) + "]";
    if (!step.is_object()) throw ImplFailure("answered " + at + " that is not an object");
    StepComms comms;
    for (const auto& [phase, ops] : step.items()) {
      if (std::find(phases().begin(), phases().end(), phase) == phases().end()) {
        throw ImplFailure("answered " + at + " with the phase '" + phase +
                          "' (known: forward, backward, optimizer)");
      }
      if (!ops.is_object()) throw ImplFailure("answered " + at + "." + phase + " that is not an object");
      PhaseComms& pc = comms[phase];
      for (const auto& [op, entry] : ops.items()) {
        const bool ok = entry.is_object() && entry.contains("count") && entry.contains("bytes") &&
                        entry["count"].is_number_integer() && entry["bytes"].is_number_integer() &&
                        entry["count"].get<std::int64_t>() >= 0 &&
                        entry["bytes"].get<std::int64_t>() >= 0 && entry.size() == 2;
        if (op.empty() || !ok) {
          throw ImplFailure("answered " + at + "." + phase + "." + op +
                            " that is not {\"count\": N, \"bytes\": B} with N, B >= 0");
        }
        pc.count[op] = entry["count"].get<std::int64_t>();
        pc.bytes[op] = entry["bytes"].get<std::int64_t>();
      }
    }
    for (const std::string& phase : phases()) comms[phase];  // a phase without comms is empty
    out.push_back(std::move(comms));
  }
  return out;
}

Parameters read_parameters(const nlohmann::json& tensors, const std::filesystem::path& dir,
                           const std::string& where) {
  if (!tensors.is_object() || tensors.empty()) {
    throw ImplFailure("answered no parameters at " + where + " (an object of name -> tensor)");
  }
  Parameters out;
  for (const auto& [name, descriptor] : tensors.items()) {
    const TensorFile file = read_tensor_file(descriptor, dir, where + "." + name);
    if (file.dtype != "float32" && file.dtype != "float64") {
      throw ImplFailure("answered " + where + "." + name + " of dtype " + file.dtype +
                        " (parameters are float32 or float64)");
    }
    std::vector<double> values;
    if (file.dtype == "float32") {
      values.resize(file.bytes.size() / 4);
      for (std::size_t i = 0; i < values.size(); ++i) {
        float v;
        std::memcpy(&v, file.bytes.data() + 4 * i, 4);
        values[i] = v;
      }
    } else {
      values.resize(file.bytes.size() / 8);
      std::memcpy(values.data(), file.bytes.data(), file.bytes.size());
    }
    if (!out.dtype.empty() && out.dtype != file.dtype) {
      throw ImplFailure("answered parameters of two dtypes at " + where);
    }
    out.dtype = file.dtype;
    out.shapes[name] = file.shape;
    out.values[name] = std::move(values);
    out.bits[name] = file.bytes;
  }
  return out;
}

}  // namespace meshgate::runner::fsdp_kind
