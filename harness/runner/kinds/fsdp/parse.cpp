// Reading an fsdp case: its mesh, model, training and expected collectives; its keys, params and
// memory estimate.

#include "kinds/fsdp/fsdp_case.hpp"

namespace meshgate::runner::fsdp_kind {

const std::vector<std::string>& counted_ops() {
  static const std::vector<std::string> ops = {"all_gather", "reduce_scatter", "all_reduce"};
  return ops;
}

// The phases of one training step, in the order they run.
const std::vector<std::string>& phases() {
  static const std::vector<std::string> p = {"forward", "backward", "optimizer"};
  return p;
}

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

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

int FsdpCase::ranks() const {
  std::int64_t n = 1;
  for (const std::int64_t s : mesh_shape) n *= s;
  return static_cast<int>(n);
}

std::int64_t FsdpCase::parameter_count() const {
  std::int64_t n = 0;
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) {
    n += layers[i] * layers[i + 1] + (bias ? layers[i + 1] : 0);
  }
  return n;
}

MemoryEstimate FsdpCase::memory_estimate() const {
  // The runner reads every rank's parameters and the reference, each as its bytes and as
  // doubles, while it judges an answer; its own run allocates nothing.
  const double element = dtype == "float64" ? 8 : 4;
  const double copies = static_cast<double>(ranks()) + 1;
  const double bytes = copies * static_cast<double>(parameter_count()) * (element + 8);
  return {bytes, "model.layers",
          std::to_string(ranks()) + " ranks' parameters and the reference's, " +
              std::to_string(parameter_count()) + " elements each"};
}

nlohmann::json FsdpCase::params() const {
  nlohmann::json p = request();
  p.erase("world");
  p["tolerance"] = tolerance;
  p["ranks"] = ranks();
  return p;
}

}  // namespace meshgate::runner::fsdp_kind

namespace meshgate::runner {

using namespace fsdp_kind;

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

namespace fsdp_kind {
namespace {

// `mesh`: 1 dim (FSDP) or 2 (HSDP), its names.
void read_mesh(CaseNode& node, FsdpCase& c) {
  CaseNode mesh = node.child("mesh");
  c.mesh_shape = mesh.required<std::vector<std::int64_t>>("shape");
  if (c.mesh_shape.empty() || c.mesh_shape.size() > 2) {
    mesh.fail("shape", "expected 1 dim (FSDP) or 2 dims (HSDP: replicate, shard), got " +
                           std::to_string(c.mesh_shape.size()));
  }
  std::int64_t ranks = 1;
  for (const std::int64_t s : c.mesh_shape) {
    if (s < 1) mesh.fail("shape", "every dim must be >= 1, got " + shape_text(c.mesh_shape));
    ranks *= s;
    if (ranks > kMaxRanks) {
      mesh.fail("shape", "needs more than " + std::to_string(kMaxRanks) + " ranks");
    }
  }
  const std::vector<std::string> default_names =
      c.mesh_shape.size() == 1 ? std::vector<std::string>{"shard"}
                                : std::vector<std::string>{"replicate", "shard"};
  c.mesh_names = mesh.optional<std::vector<std::string>>("names").value_or(default_names);
  if (c.mesh_names.size() != c.mesh_shape.size()) {
    mesh.fail("names", "names " + std::to_string(c.mesh_names.size()) + " dims, the shape has " +
                           std::to_string(c.mesh_shape.size()));
  }
  if (c.mesh_names.size() == 2 && c.mesh_names[0] == c.mesh_names[1]) {
    mesh.fail("names", "names one dim twice: '" + c.mesh_names[0] + "'");
  }
  for (const std::string& n : c.mesh_names) {
    if (n.empty()) mesh.fail("names", "a dim name is empty");
  }
}

// `model`: the sizes of its Linear layers, bias and activation.
void read_model(CaseNode& node, FsdpCase& c) {
  CaseNode model = node.child("model");
  c.layers = model.required<std::vector<std::int64_t>>("layers");
  if (c.layers.size() < 2 || static_cast<std::int64_t>(c.layers.size()) > kMaxLayers + 1) {
    model.fail("layers", "expected 2 to " + std::to_string(kMaxLayers + 1) +
                             " sizes (input, then each Linear layer's output), got " +
                             std::to_string(c.layers.size()));
  }
  for (const std::int64_t w : c.layers) {
    if (w < 1 || w > kMaxWidth) {
      model.fail("layers", "every size must be 1 to " + std::to_string(kMaxWidth) + ", got " +
                               shape_text(c.layers));
    }
  }
  c.bias = model.optional<bool>("bias").value_or(true);
  c.activation = model.optional<std::string>("activation").value_or("relu");
  if (c.activation != "relu" && c.activation != "none") {
    model.fail("activation", "unknown activation '" + c.activation + "': expected relu or none");
  }
}

// The training: seed, dtype, how it is sharded, steps, batch, learning rate, tolerance.
void read_training(CaseNode& node, FsdpCase& c) {
  c.seed = node.optional<std::int64_t>("seed").value_or(0);
  if (c.seed < 0) node.fail("seed", "must be >= 0, got " + std::to_string(c.seed));
  c.dtype = node.optional<std::string>("dtype").value_or("float32");
  if (c.dtype != "float32" && c.dtype != "float64") {
    node.fail("dtype", "unknown dtype '" + c.dtype + "' for fsdp: expected float32 or float64");
  }
  c.shard = node.optional<std::string>("shard").value_or("per_layer");
  if (c.shard != "per_layer" && c.shard != "root") {
    node.fail("shard", "unknown value '" + c.shard +
                           "': expected per_layer (fully_shard on every Linear, then the root) or "
                           "root (fully_shard on the root only)");
  }
  c.reshard_after_forward = node.optional<bool>("reshard_after_forward").value_or(true);
  c.steps = node.optional<std::int64_t>("steps").value_or(1);
  if (c.steps < 1 || c.steps > kMaxSteps) {
    node.fail("steps", "must be 1 to " + std::to_string(kMaxSteps) + ", got " +
                           std::to_string(c.steps));
  }
  c.batch = node.optional<std::int64_t>("batch").value_or(4);
  if (c.batch < 1 || c.batch > kMaxBatch) {
    node.fail("batch", "must be 1 to " + std::to_string(kMaxBatch) + " (rows per rank), got " +
                           std::to_string(c.batch));
  }
  c.lr = node.optional<double>("lr").value_or(0.1);
  if (!(c.lr > 0) || !std::isfinite(c.lr)) node.fail("lr", "must be a number > 0");
  // Relative to max(1, |value|): the sharded run reduces its gradients in another order than
  // the single-process one, a few ulps per step.
  c.tolerance = node.optional<double>("tolerance").value_or(c.dtype == "float64" ? 1e-12 : 1e-5);
  if (!(c.tolerance >= 0) || !std::isfinite(c.tolerance)) {
    node.fail("tolerance", "must be a number >= 0");
  }
}

}  // namespace
}  // namespace fsdp_kind

std::unique_ptr<PreparedCase> parse_fsdp_case(CaseNode& node, bool expect_error) {
  auto c = std::make_unique<FsdpCase>();

  read_mesh(node, *c);
  read_model(node, *c);
  read_training(node, *c);

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
