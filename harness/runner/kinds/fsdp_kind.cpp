// The fsdp kind: a small model trained for a few steps under PyTorch's FSDP2 (`fully_shard`) on
// a world of ranks, judged against the same model trained in one process on the concatenated
// batch, and on the collectives each step issues (docs/kinds.md, "FSDP (fsdp)").
//
// meshgate has no FSDP of its own: its own run answers every case `skip`, saying so, as it does
// for the redistribute kind's reductions of a DTensor (it has no sharding propagation). Another
// implementation (--impl torch) computes the observables, and this file is the one judge of them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "case_kind.hpp"
#include "external_impl.hpp"
#include "kinds/case_values.hpp"

namespace meshgate::runner {

namespace {

// The collectives a case may count; the adapter may report others (their names as it knows
// them), which are shown and summed but not expected by a case.
const std::vector<std::string>& counted_ops() {
  static const std::vector<std::string> ops = {"all_gather", "reduce_scatter", "all_reduce"};
  return ops;
}

// The phases of one training step, in the order they run.
const std::vector<std::string>& phases() {
  static const std::vector<std::string> p = {"forward", "backward", "optimizer"};
  return p;
}

// Bounds that keep a case a test rather than a workload: every rank holds the whole model
// at some point, and the single-process reference trains it on the whole batch.
constexpr std::int64_t kMaxWidth = 4096;
constexpr std::int64_t kMaxLayers = 64;
constexpr std::int64_t kMaxSteps = 1000;
constexpr std::int64_t kMaxBatch = 4096;
constexpr std::int64_t kMaxRanks = 64;

// Expected collective counts of one phase (or of a whole step): absent means not judged.
struct Counts {
  std::map<std::string, std::int64_t> ops;
  bool empty() const { return ops.empty(); }
};

Counts read_counts(CaseNode& expect, const std::string& key) {
  Counts out;
  if (!expect.has(key)) return out;
  CaseNode counts = expect.child(key);
  for (const std::string& op : counted_ops()) {
    if (const auto n = counts.optional<std::int64_t>(op)) {
      if (*n < 0) counts.fail(op, "must be >= 0, got " + std::to_string(*n));
      out.ops[op] = *n;
    }
  }
  return out;
}

std::string counts_text(const std::map<std::string, std::int64_t>& counts) {
  std::string text;
  for (const auto& [op, n] : counts) {
    if (n == 0) continue;
    text += (text.empty() ? "" : ", ") + op + " x" + std::to_string(n);
  }
  return text.empty() ? "none" : text;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// One rank's collectives of one phase of one step: op -> {count, bytes}.
struct PhaseComms {
  std::map<std::string, std::int64_t> count;
  std::map<std::string, std::int64_t> bytes;
  bool operator==(const PhaseComms&) const = default;
};
using StepComms = std::map<std::string, PhaseComms>;  // phase -> comms

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

std::map<std::string, std::int64_t> total(const StepComms& step, bool bytes) {
  std::map<std::string, std::int64_t> sum;
  for (const auto& [phase, pc] : step) {
    for (const auto& [op, n] : bytes ? pc.bytes : pc.count) sum[op] += n;
  }
  return sum;
}

// The count of `op` in `counts` (0 when the implementation issued none).
std::int64_t count_of(const std::map<std::string, std::int64_t>& counts, const std::string& op) {
  const auto it = counts.find(op);
  return it == counts.end() ? 0 : it->second;
}

struct Parameters {
  std::string dtype;
  std::map<std::string, std::vector<std::int64_t>> shapes;
  std::map<std::string, std::vector<double>> values;
  std::map<std::string, std::vector<unsigned char>> bits;
};

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

std::string names_text(const std::set<std::string>& names) {
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}

class FsdpCase final : public PreparedCase {
 public:
  std::vector<std::int64_t> mesh_shape;
  std::vector<std::string> mesh_names;
  std::vector<std::int64_t> layers;
  bool bias = true;
  std::string activation = "relu";
  std::int64_t seed = 0;
  std::string dtype = "float32";
  std::string shard = "per_layer";
  bool reshard_after_forward = true;
  std::int64_t steps = 1;
  std::int64_t batch = 4;
  double lr = 0.1;
  double tolerance = 0;
  Counts per_step;
  std::map<std::string, Counts> per_phase;  // forward, backward, optimizer

  int ranks() const override {
    std::int64_t n = 1;
    for (const std::int64_t s : mesh_shape) n *= s;
    return static_cast<int>(n);
  }

  std::int64_t parameter_count() const {
    std::int64_t n = 0;
    for (std::size_t i = 0; i + 1 < layers.size(); ++i) {
      n += layers[i] * layers[i + 1] + (bias ? layers[i + 1] : 0);
    }
    return n;
  }

  MemoryEstimate memory_estimate() const override {
    // The runner reads every rank's parameters and the reference, each as its bytes and as
    // doubles, while it judges an answer; its own run allocates nothing.
    const double element = dtype == "float64" ? 8 : 4;
    const double copies = static_cast<double>(ranks()) + 1;
    const double bytes = copies * static_cast<double>(parameter_count()) * (element + 8);
    return {bytes, "model.layers",
            std::to_string(ranks()) + " ranks' parameters and the reference's, " +
                std::to_string(parameter_count()) + " elements each"};
  }

  // The case as the implementation is asked it, with what only the judging uses.
  nlohmann::json params() const override {
    nlohmann::json p = request();
    p.erase("world");
    p["tolerance"] = tolerance;
    p["ranks"] = ranks();
    return p;
  }

  Outcome run(RunContext&) override {
    Outcome o;
    o.status = Status::skip;
    o.message =
        "meshgate has no FSDP (fully_shard is PyTorch's); the case is judged on another "
        "implementation (--impl torch): its parameters after the steps against the same model "
        "trained in one process, and the collectives of each step";
    return o;
  }

  double time_calls(RunContext&, std::int64_t) override {
    throw std::logic_error("an fsdp case is not timed by meshgate: its run is a skip");
  }

  std::optional<nlohmann::json> impl_request(const std::filesystem::path&, std::string&) override {
    return request();
  }

  nlohmann::json request() const {
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

  // Observables: {"params": {rank: {name: TENSOR}}, "reference": {name: TENSOR},
  // "steps": {rank: [{phase: {op: {"count", "bytes"}}}]}}.
  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path& dir) override {
    if (!observables.is_object()) throw ImplFailure("answered observables that are not an object");
    for (const char* key : {"params", "reference", "steps"}) {
      if (!observables.contains(key) || !observables[key].is_object()) {
        throw ImplFailure(std::string("answered no '") + key + "' object");
      }
    }
    const Parameters reference = read_parameters(observables["reference"], dir, "reference");
    std::vector<std::string> problems;
    std::int64_t wrong = 0, elements = 0, ranks_differing = 0;
    double max_error = 0;
    std::optional<Parameters> lowest;
    std::set<std::string> reference_names;
    for (const auto& [name, shape] : reference.shapes) reference_names.insert(name);
    std::vector<std::vector<StepComms>> rank_steps;
    for (int rank = 0; rank < ranks(); ++rank) {
      const std::string key = std::to_string(rank);
      if (!observables["params"].contains(key)) {
        throw ImplFailure("answered no parameters for rank " + key + " (params." + key + ")");
      }
      if (!observables["steps"].contains(key)) {
        throw ImplFailure("answered no steps for rank " + key + " (steps." + key + ")");
      }
      rank_steps.push_back(read_steps(observables["steps"][key], key, steps));
      Parameters got = read_parameters(observables["params"][key], dir, "params." + key);
      std::set<std::string> names;
      for (const auto& [name, shape] : got.shapes) names.insert(name);
      if (names != reference_names) {
        problems.push_back("rank " + key + " holds the parameters [" + names_text(names) +
                           "], the reference [" + names_text(reference_names) + "]");
        continue;
      }
      if (got.dtype != reference.dtype) {
        problems.push_back("rank " + key + "'s parameters are " + got.dtype + ", the reference's " +
                           reference.dtype);
        continue;
      }
      if (rank == 0) {
        for (const auto& [name, want] : reference.values) {
          if (got.shapes[name] != reference.shapes.at(name)) {
            problems.push_back("parameter " + name + " has the shape " +
                               shape_text(got.shapes[name]) + ", the reference's is " +
                               shape_text(reference.shapes.at(name)));
            continue;
          }
          const std::vector<double>& have = got.values[name];
          for (std::size_t i = 0; i < want.size(); ++i) {
            ++elements;
            const double error = std::abs(have[i] - want[i]) / std::max(1.0, std::abs(want[i]));
            if (std::isnan(have[i]) || std::isnan(want[i]) || !(error <= tolerance)) {
              ++wrong;
              if (!std::isnan(error)) max_error = std::max(max_error, error);
              else max_error = std::numeric_limits<double>::infinity();
            } else {
              max_error = std::max(max_error, error);
            }
          }
        }
        lowest = std::move(got);
      } else if (lowest && got.bits != lowest->bits) {
        // full_tensor() gathers the same shards on every rank: any difference is a wrong gather.
        ++ranks_differing;
      }
    }

    Outcome o;
    // Every rank of an SPMD program issues the same collectives; a rank that issues others
    // would hang a real job.
    std::int64_t ranks_other_comms = 0;
    for (std::size_t r = 1; r < rank_steps.size(); ++r) {
      if (rank_steps[r] != rank_steps[0]) ++ranks_other_comms;
    }
    nlohmann::json comms_per_step = nlohmann::json::array();
    nlohmann::json bytes_per_step = nlohmann::json::array();
    nlohmann::json phase_table = nlohmann::json::array();
    for (std::size_t s = 0; s < rank_steps[0].size(); ++s) {
      const StepComms& step = rank_steps[0][s];
      const auto counts = total(step, false);
      const auto bytes = total(step, true);
      comms_per_step.push_back(counts);
      bytes_per_step.push_back(bytes);
      nlohmann::json phases_json = nlohmann::json::object();
      for (const auto& [phase, pc] : step) phases_json[phase] = pc.count;
      phase_table.push_back(phases_json);
      std::string line = "step " + std::to_string(s + 1) + ":";
      for (const std::string& phase : phases()) {
        line += " " + phase + " [" + counts_text(step.at(phase).count) + "]";
      }
      o.plan.push_back(line);
      const std::string at = "step " + std::to_string(s + 1);
      for (const auto& [op, want] : per_step.ops) {
        const std::int64_t got = count_of(counts, op);
        if (got != want) {
          problems.push_back(at + ": expect.comms_per_step." + op + " " + std::to_string(want) +
                             " but rank 0 issued " + std::to_string(got));
        }
      }
      for (const auto& [phase, expected] : per_phase) {
        for (const auto& [op, want] : expected.ops) {
          const std::int64_t got = count_of(step.at(phase).count, op);
          if (got != want) {
            problems.push_back(at + ": expect." + phase + "." + op + " " + std::to_string(want) +
                               " but rank 0 issued " + std::to_string(got) + " in the " + phase);
          }
        }
      }
    }
    if (ranks_other_comms) {
      problems.push_back(std::to_string(ranks_other_comms) +
                         " rank(s) issued other collectives than rank 0");
    }
    if (wrong) {
      char text[256];  // the longest message (two 19-digit counts) needs 166
      std::snprintf(text, sizeof text,
                    "%lld of %lld parameter elements differ from the single-process reference "
                    "by more than %g (largest relative error %.3g)",
                    static_cast<long long>(wrong), static_cast<long long>(elements), tolerance,
                    max_error);
      problems.push_back(text);
    }
    if (ranks_differing) {
      problems.push_back(std::to_string(ranks_differing) +
                         " rank(s) gathered other parameters than rank 0 (full_tensor)");
    }
    o.metrics["comms_per_step"] = comms_per_step;
    o.metrics["bytes_per_step"] = bytes_per_step;
    o.metrics["phases"] = phase_table;
    std::int64_t collectives = 0, moved = 0;
    for (const auto& step : rank_steps[0]) {
      for (const auto& [op, n] : total(step, false)) collectives += n;
      for (const auto& [op, n] : total(step, true)) moved += n;
    }
    o.metrics["collectives"] = collectives;
    o.metrics["bytes_per_rank"] = moved;
    o.metrics["parameter_elements"] = elements;
    o.metrics["wrong_elements"] = wrong;
    o.metrics["max_relative_error"] = std::isfinite(max_error) ? nlohmann::json(max_error)
                                                               : nlohmann::json("inf");
    o.metrics["tolerance"] = tolerance;
    if (!problems.empty()) {
      o.status = Status::fail;
      for (std::size_t i = 0; i < problems.size(); ++i) o.message += (i ? "; " : "") + problems[i];
    }
    return o;
  }
};

}  // namespace

const std::vector<std::string>& fsdp_case_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = {"mesh",  "mesh.shape", "mesh.names", "model", "model.layers",
                                  "model.bias", "model.activation", "seed", "dtype", "shard",
                                  "reshard_after_forward", "steps", "batch", "lr", "tolerance",
                                  "expect", "expect.comms_per_step"};
    for (const std::string& op : counted_ops()) k.push_back("expect.comms_per_step." + op);
    for (const std::string& phase : phases()) {
      k.push_back("expect." + phase);
      for (const std::string& op : counted_ops()) k.push_back("expect." + phase + "." + op);
    }
    return k;
  }();
  return keys;
}

std::unique_ptr<PreparedCase> parse_fsdp_case(CaseNode& node, bool expect_error) {
  auto c = std::make_unique<FsdpCase>();

  CaseNode mesh = node.child("mesh");
  c->mesh_shape = mesh.required<std::vector<std::int64_t>>("shape");
  if (c->mesh_shape.empty() || c->mesh_shape.size() > 2) {
    mesh.fail("shape", "expected 1 dim (FSDP) or 2 dims (HSDP: replicate, shard), got " +
                           std::to_string(c->mesh_shape.size()));
  }
  std::int64_t ranks = 1;
  for (const std::int64_t s : c->mesh_shape) {
    if (s < 1) mesh.fail("shape", "every dim must be >= 1, got " + shape_text(c->mesh_shape));
    ranks *= s;
    if (ranks > kMaxRanks) {
      mesh.fail("shape", "needs more than " + std::to_string(kMaxRanks) + " ranks");
    }
  }
  const std::vector<std::string> default_names =
      c->mesh_shape.size() == 1 ? std::vector<std::string>{"shard"}
                                : std::vector<std::string>{"replicate", "shard"};
  c->mesh_names = mesh.optional<std::vector<std::string>>("names").value_or(default_names);
  if (c->mesh_names.size() != c->mesh_shape.size()) {
    mesh.fail("names", "names " + std::to_string(c->mesh_names.size()) + " dims, the shape has " +
                           std::to_string(c->mesh_shape.size()));
  }
  if (c->mesh_names.size() == 2 && c->mesh_names[0] == c->mesh_names[1]) {
    mesh.fail("names", "names one dim twice: '" + c->mesh_names[0] + "'");
  }
  for (const std::string& n : c->mesh_names) {
    if (n.empty()) mesh.fail("names", "a dim name is empty");
  }

  CaseNode model = node.child("model");
  c->layers = model.required<std::vector<std::int64_t>>("layers");
  if (c->layers.size() < 2 || static_cast<std::int64_t>(c->layers.size()) > kMaxLayers + 1) {
    model.fail("layers", "expected 2 to " + std::to_string(kMaxLayers + 1) +
                             " sizes (input, then each Linear layer's output), got " +
                             std::to_string(c->layers.size()));
  }
  for (const std::int64_t w : c->layers) {
    if (w < 1 || w > kMaxWidth) {
      model.fail("layers", "every size must be 1 to " + std::to_string(kMaxWidth) + ", got " +
                               shape_text(c->layers));
    }
  }
  c->bias = model.optional<bool>("bias").value_or(true);
  c->activation = model.optional<std::string>("activation").value_or("relu");
  if (c->activation != "relu" && c->activation != "none") {
    model.fail("activation", "unknown activation '" + c->activation + "': expected relu or none");
  }

  c->seed = node.optional<std::int64_t>("seed").value_or(0);
  if (c->seed < 0) node.fail("seed", "must be >= 0, got " + std::to_string(c->seed));
  c->dtype = node.optional<std::string>("dtype").value_or("float32");
  if (c->dtype != "float32" && c->dtype != "float64") {
    node.fail("dtype", "unknown dtype '" + c->dtype + "' for fsdp: expected float32 or float64");
  }
  c->shard = node.optional<std::string>("shard").value_or("per_layer");
  if (c->shard != "per_layer" && c->shard != "root") {
    node.fail("shard", "unknown value '" + c->shard +
                           "': expected per_layer (fully_shard on every Linear, then the root) or "
                           "root (fully_shard on the root only)");
  }
  c->reshard_after_forward = node.optional<bool>("reshard_after_forward").value_or(true);
  c->steps = node.optional<std::int64_t>("steps").value_or(1);
  if (c->steps < 1 || c->steps > kMaxSteps) {
    node.fail("steps", "must be 1 to " + std::to_string(kMaxSteps) + ", got " +
                           std::to_string(c->steps));
  }
  c->batch = node.optional<std::int64_t>("batch").value_or(4);
  if (c->batch < 1 || c->batch > kMaxBatch) {
    node.fail("batch", "must be 1 to " + std::to_string(kMaxBatch) + " (rows per rank), got " +
                           std::to_string(c->batch));
  }
  c->lr = node.optional<double>("lr").value_or(0.1);
  if (!(c->lr > 0) || !std::isfinite(c->lr)) node.fail("lr", "must be a number > 0");
  // Relative to max(1, |value|): the sharded run reduces its gradients in another order than
  // the single-process one, a few ulps per step.
  c->tolerance = node.optional<double>("tolerance").value_or(c->dtype == "float64" ? 1e-12 : 1e-5);
  if (!(c->tolerance >= 0) || !std::isfinite(c->tolerance)) {
    node.fail("tolerance", "must be a number >= 0");
  }

  if (!expect_error && node.has("expect")) {
    CaseNode expect = node.child("expect");
    c->per_step = read_counts(expect, "comms_per_step");
    for (const std::string& phase : phases()) {
      Counts counts = read_counts(expect, phase);
      if (!counts.empty()) c->per_phase[phase] = std::move(counts);
    }
  }
  return c;
}

}  // namespace meshgate::runner
