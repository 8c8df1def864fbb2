// kind: redistribute — plan a redistribution (docs/kinds.md, Redistribution) on every rank of the
// mesh, run it through the executor on each rank's source shard of a deterministic global tensor of
// integers (Partial sources: exact per-rank contributions), and check on every rank the local
// shape, the values against the global tensor's target shard, bitwise equality of replicas and that
// the collectives it issued are its own plan's. The unmerged plan runs too; whether both give the
// same bits is reported. Every rank checks its own shard and the counts of wrong results are summed
// over the communicator, so the threads and mpi backends agree.
//
// The world has the mesh's highest rank + 1 ranks. Ranks the mesh leaves out (a `ranks:` list
// that is not 0..n-1) sit idle, as DTensor's ranks outside a mesh do, joining only the
// world-wide calls; a mesh whose layout leaves ranks of its rank map to other rows runs every
// row, each on its own.
//
// Plans are made per rank coordinate, and with uneven shards they can differ between ranks
// (docs/kinds.md, Planning: logical shapes use the coordinate, so merge decisions can differ).
// Hence `expect.comms`, `expect.warnings` and `expect.local_shape` describe one rank, the mesh's
// lowest (rank 0 whenever the mesh holds it); the result row's `plan` is that rank's too, sent to
// every rank, and `plans_differ_between_ranks` says whether another rank's plan issues other
// collectives; `expect.distinct_plans` asserts how many different comm lists the ranks' plans issue
// (1: all the same). Every rank splits the groups that the merged and the unmerged plans of every
// coordinate use, in one order, before running anything, and every world-wide call here (splits,
// count sums, the report's broadcast, timing barriers and max) is made the same number of times on
// every rank whatever its plan.
//
// `steps:` replaces planning with a plan written out step by step (steps_from_text), such as
// the plan PyTorch issues, so that a case can show what another implementation's plan does to
// the data: `expect.wrong_shapes` and `expect.wrong_elements` then say how many ranks end with
// the wrong shape and how many elements are wrong, and the case fails unless exactly that
// happens. The plan meshgate would issue is reported beside it (`meshgate_plan`).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "byte_size.hpp"
#include "case_kind.hpp"
#include "comm/communicator.hpp"
#include "comm/threads_world.hpp"
#include "core/error.hpp"
#include "external_impl.hpp"
#include "kinds/case_values.hpp"
#include "kinds/memory_estimates.hpp"
#include "kinds/mesh_spec.hpp"
#include "kinds/torch_cost.hpp"
#include "mesh/device_mesh.hpp"
#include "placement/placement.hpp"
#include "plan/plan.hpp"
#include "redistribute/redistribute.hpp"
#include "redistribute/reference.hpp"
#include "timing.hpp"

namespace meshgate::runner {
namespace {

struct FlattenDims {
  std::vector<std::string> dims;
  std::optional<std::string> name;
};

// `reduce: {op: OP, dim: D, other: [..]}`: an op on the source DTensor, as torch computes it:
// a reduction (over every dim, or over `dim`), the transpose `t`, `mm` with a second operand
// (the tensor's transpose, placed as `other` says) or `full_tensor` (the source itself).
struct ReduceSpec {
  std::string op;
  std::optional<std::int64_t> dim;
  std::vector<std::string> other;  // mm's second operand's placements, as written
};

const std::vector<std::string>& reduce_ops() {
  static const std::vector<std::string> ops = {"sum", "mean", "amax", "amin", "vector_norm",
                                               "t", "mm", "full_tensor"};
  return ops;
}

bool is_reduction(const std::string& op) {
  return op != "t" && op != "mm" && op != "full_tensor";
}

// The op as called, for messages: torch.sum on a DTensor, DTensor.t(), torch.mm on DTensors,
// DTensor.full_tensor().
std::string op_call(const std::string& op) {
  if (op == "t") return "DTensor.t()";
  if (op == "full_tensor") return "DTensor.full_tensor()";
  if (op == "mm") return "torch.mm on DTensors";
  return "torch." + op + " on a DTensor";
}

// Splits a placement list as written ("SS(0,2),S(0)" or items) at the commas outside brackets.
std::vector<std::string> split_placement_items(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& text : items) {
    int depth = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= text.size(); ++i) {
      if (i < text.size() && (text[i] == '(' || text[i] == '[')) ++depth;
      if (i < text.size() && (text[i] == ')' || text[i] == ']')) --depth;
      if (i == text.size() || (text[i] == ',' && depth == 0)) {
        std::string item = text.substr(start, i - start);
        const auto b = item.find_first_not_of(" \t");
        const auto e = item.find_last_not_of(" \t");
        out.push_back(b == std::string::npos ? std::string() : item.substr(b, e - b + 1));
        start = i + 1;
      }
    }
  }
  return out;
}

// `SS(d,k)`: PyTorch's _StridedShard(dim d, split_factor k). meshgate models no strided shard;
// the runner hands such a case to another implementation and maps it to S(d) where it only
// validates the case. Returns {d, k}, nullopt for another placement; throws a message for an
// SS(..) it cannot read.
std::optional<std::pair<std::int64_t, std::int64_t>> parse_strided(const std::string& item) {
  static const std::regex form(R"(^SS\(\s*(-?[0-9]+)\s*,\s*(-?[0-9]+)\s*\)$)");
  if (item.rfind("SS(", 0) != 0 && item.rfind("SS ", 0) != 0) return std::nullopt;
  std::smatch m;
  if (!std::regex_match(item, m, form)) {
    throw std::runtime_error("cannot parse '" + item +
                             "': a strided shard is written SS(dim, split_factor), e.g. SS(0,2)");
  }
  const std::int64_t dim = std::stoll(m[1].str());
  const std::int64_t factor = std::stoll(m[2].str());
  if (factor < 1) {
    throw std::runtime_error("'" + item + "': the split factor must be >= 1, got " +
                             std::to_string(factor));
  }
  return std::pair{dim, factor};
}

std::string join(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + "]";
}

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Expected vs issued collectives, entry by entry.
std::string comm_diff(const std::vector<std::string>& want, const std::vector<std::string>& got) {
  std::string out = "collectives differ: expected " + join(want) + ", issued " + join(got);
  const std::size_t n = std::max(want.size(), got.size());
  for (std::size_t i = 0; i < n; ++i) {
    const std::string w = i < want.size() ? want[i] : "(none)";
    const std::string g = i < got.size() ? got[i] : "(none)";
    if (w != g) out += "\n  #" + std::to_string(i) + ": - " + w + "\n      + " + g;
  }
  return out;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Counts every rank adds to; summed over the case's communicator.
enum Count : std::size_t {
  wrong_shape,
  wrong_values,
  replica_mismatch,
  comm_mismatch,  // the reference rank's issued collectives against expect.comms
  plan_mismatch,  // a rank issued collectives other than its own plan's
  merged_unmerged_differ,
  local_shape_mismatch,
  warnings_mismatch,        // the reference rank's plan against expect.warnings
  distinct_plans_mismatch,  // the comm lists of all ranks' plans against expect.distinct_plans
  count_slots
};

// What the reference rank learned, which the row reports; sent from it to every rank, so that
// the process that writes the row (rank 0 of an mpi world, which may be outside the mesh) has
// it.
struct Report {
  std::vector<std::string> issued;
  std::vector<std::string> issued_unmerged;
  std::vector<std::string> planned;  // what meshgate plans, when `steps` replaces it
  std::int64_t bytes = 0;
  std::int64_t bytes_unmerged = 0;
  std::size_t warnings = 0;
  std::size_t distinct_plans = 1;  // distinct comm lists of the merged plans over all ranks
  double cost = 0;
  double greedy_cost = 0;
  double cost_unmerged = 0;
  Shape local_shape;  // the reference rank's result
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Report, issued, issued_unmerged, planned, bytes, bytes_unmerged,
                                   warnings, distinct_plans, cost, greedy_cost, cost_unmerged,
                                   local_shape)

// What one rank holds after run_rank: the reference rank's report and the world's sums.
struct RankResult {
  Report report;
  std::vector<std::int64_t> counts = std::vector<std::int64_t>(count_slots, 0);
  // With perf: the median per-call time of the max over ranks, and the calls each sample made.
  double time_merged = 0;
  double time_unmerged = 0;
  std::int64_t calls_merged = 1;
  std::int64_t calls_unmerged = 1;
};

// One rank's executor and plans, kept from run() for the timed iterations; no executor on a
// rank outside the mesh, which only joins the timing's barrier and maximum.
struct RankState {
  std::unique_ptr<Redistributor> executor;
  Plan plan;
  HostTensor source;
};

// Sends `text` from `root` to every rank of `world` (its length first).
void broadcast_text(comm::Communicator& world, std::string& text, int root) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  world.broadcast(&length, &length, 1, comm::DType::i64, root);
  text.resize(static_cast<std::size_t>(length));
  if (length > 0) world.broadcast(text.data(), text.data(), text.size(), comm::DType::u8, root);
}

class RedistributeCase final : public PreparedCase {
 public:
  MeshSpec mesh_spec;
  std::vector<FlattenDims> flatten;
  Shape shape;
  comm::DType dtype = comm::DType::f32;
  std::string from_text, to_text;
  PlanOptions options;
  std::optional<std::vector<std::string>> expect_comms;
  std::optional<Shape> expect_local_shape;
  std::optional<std::int64_t> expect_warnings;
  // How many different comm lists the plans of the mesh's ranks issue (1: every rank the same).
  std::optional<std::int64_t> expect_distinct_plans;
  std::optional<std::vector<std::string>> steps;  // a plan written out, replacing planning
  // `api: full_tensor`: DTensor.full_tensor(), planned as the public api to all-Replicate.
  bool full_tensor = false;
  // `reduce:` an op on the source DTensor (torch.sum, torch.amax, ...), then full_tensor();
  // meshgate has no sharding propagation, so only another implementation runs it.
  std::optional<ReduceSpec> reduce;
  // `from` names a strided shard (SS(d,k)): from_text holds S(d) in its place for the checks
  // meshgate can make, from_written the placements as written, handed to an implementation.
  bool strided = false;
  std::vector<std::string> from_written;
  std::optional<std::vector<std::string>> expect_placements;  // the op's result, with reduce
  // `torch_cost:` what PyTorch's cost model must say of the plan; only torch answers it.
  std::optional<TorchCostSpec> torch_cost;
  // `compile: true`: the redistribution under the implementation's compiler (torch.compile),
  // judged by the same expectations as eager; meshgate has no compiler, so only torch runs it.
  bool compile = false;
  std::optional<std::int64_t> expect_graph_breaks;
  // `shard_order:` the order in which the source shards a tensor dim over several mesh dims
  // (PyTorch's DTensorSpec.shard_order), [{dim, mesh_dims}] with mesh dims as indices.
  // meshgate shards in mesh-dim order only: such a source, like a strided one, is built by the
  // implementation from the global tensor and judged by the target's shards.
  std::optional<nlohmann::json> shard_order;

  // A source meshgate cannot shard itself (a strided shard, a shard order): every rank's input
  // is the global tensor.
  bool source_from_global() const { return strided || shard_order.has_value(); }
  // A rejection of the case's values (an integer avg, Partial placements of different reduce
  // ops) in a case that expects a rejection: raised when the case runs rather than while it is
  // read, so that another implementation is asked too.
  std::optional<Error> deferred_rejection;
  std::int64_t expect_wrong_shapes = 0;           // ranks
  std::int64_t expect_wrong_elements = 0;
  nlohmann::json params_json;
  int case_ranks = 1;               // the highest rank of the mesh (all its rows) + 1
  std::int64_t reference_rank = 0;  // the mesh's lowest rank: `expect` describes its plan

  int ranks() const override { return case_ranks; }
  nlohmann::json params() const override { return params_json; }

  // Every rank builds the whole global tensor and holds up to its size in each of: its source
  // shard, the merged and the unmerged results, the target shard to compare with, the
  // executor's gathered intermediate, and the float64 copy the check reduces; the replica check
  // gathers the result from every rank of the Replicate target dims. Shards count as the whole
  // tensor: an upper bound, exact for replicated placements.
  MemoryEstimate memory_estimate() const override {
    constexpr double kCopies = 6;  // global, source, merged, unmerged, target, intermediate
    double elements = 1;
    for (std::int64_t s : shape) elements *= static_cast<double>(s);
    const double tensor = elements * static_cast<double>(comm::element_size(dtype));
    double replicas = 1;
    const std::vector<double> dims = mesh_dim_sizes(mesh_spec);
    const std::vector<Placement> to = parse_placements(to_text);
    for (std::size_t m = 0; m < to.size() && m < dims.size(); ++m) {
      if (to[m].is_replicate()) replicas *= dims[m];
    }
    const double per_rank = tensor * (kCopies + replicas) + elements * 8;
    // Every row of a mesh whose layout leaves ranks of its rank map to other rows runs.
    const double n = rank_map_estimate(mesh_spec);
    char ranks_text[32];
    std::snprintf(ranks_text, sizeof ranks_text, "%.4g", n);
    return {per_rank * n, "tensor.shape",
            std::string(ranks_text) + " ranks x " + format_byte_size(per_rank) + ": a " +
                format_byte_size(tensor) + " tensor held " +
                std::to_string(static_cast<int>(kCopies + replicas)) +
                " times (global, shards, results, replicas) and once as float64"};
  }

  // The mesh with its flattened dims registered (a fresh family, so registries do not leak
  // between cases), and the two specs. Errors are the library's: rejections.
  struct Specs {
    DeviceMesh mesh;
    DTensorSpec src;
    DTensorSpec dst;
  };
  Specs build() const {
    DeviceMesh mesh = mesh_spec.build();
    for (const FlattenDims& f : flatten) mesh.slice(f.dims).flatten(f.name);
    const auto es = static_cast<std::int64_t>(comm::element_size(dtype));
    DTensorSpec src = DTensorSpec::create(mesh, parse_placements(from_text), shape, es);
    DTensorSpec dst = DTensorSpec::create(mesh, parse_placements(to_text), shape, es);
    return Specs{std::move(mesh), std::move(src), std::move(dst)};
  }

  Outcome run(RunContext& ctx) override {
    if (deferred_rejection) throw *deferred_rejection;
    if (torch_cost) {
      Outcome o;
      o.status = Status::skip;
      o.message = torch_cost_skip_reason();
      return o;
    }
    if (compile) {
      Outcome o;
      o.status = Status::skip;
      o.message =
          "`compile: true` runs the redistribution under another implementation's compiler "
          "(--impl torch: torch.compile); meshgate has no compiler, and its eager answer is "
          "what the case expects";
      return o;
    }
    if (source_from_global() && !reduce) {
      Outcome o;
      o.status = Status::skip;
      o.message = std::string(strided ? "meshgate has no strided shard (PyTorch's _StridedShard, "
                                        "written SS(d,k))"
                                      : "meshgate shards a tensor dim over mesh dims in mesh-dim "
                                        "order only, not in a `shard_order`") +
                  "; the case is judged on another implementation (--impl torch), which builds "
                  "the source from the global tensor, by the target's shards and the "
                  "collectives it issues";
      return o;
    }
    if (reduce) {
      Outcome o;
      o.status = Status::skip;
      const std::string judged =
          "; the case is judged on another implementation (--impl torch) by signals alone: "
          "its values against a single-process torch reference, the collectives it issues and "
          "its result's placements";
      if (strided) {
        o.message = "meshgate has no strided shard (PyTorch's _StridedShard, written SS(d,k)) "
                    "and does not model " + op_call(reduce->op) + judged;
      } else {
        o.message = "meshgate does not model " + op_call(reduce->op) +
                    " (it has no sharding propagation, only redistribution)" + judged;
      }
      return o;
    }
    const int n = ranks();
    const std::optional<PerfSpec> perf = ctx.perf();
    states_.clear();
    states_.resize(static_cast<std::size_t>(n));
    std::vector<RankResult> results(static_cast<std::size_t>(n));
    try {
      ctx.run_on_ranks(n, [&](int rank, comm::Communicator& world) {
        results[static_cast<std::size_t>(rank)] = run_rank(rank, world, perf);
      });
    } catch (...) {
      states_.clear();
      throw;
    }
    if (!perf) states_.clear();
    const RankResult& whole = results.at(static_cast<std::size_t>(ctx.lead_rank()));
    const Report& r = whole.report;

    Outcome o;
    o.plan = r.issued;
    o.metrics["collectives"] = r.issued.size();
    o.metrics["bytes_per_rank"] = r.bytes;
    o.metrics["modeled_cost_s"] = r.cost;
    o.metrics["greedy_cost_s"] = r.greedy_cost;
    o.metrics["warnings"] = r.warnings;
    o.metrics["distinct_plans"] = r.distinct_plans;
    o.metrics["plans_differ_between_ranks"] = r.distinct_plans > 1;
    if (steps) {
      o.metrics["meshgate_plan"] = r.planned;
      o.metrics["wrong_shapes"] = whole.counts[wrong_shape];
      o.metrics["wrong_elements"] = whole.counts[wrong_values];
    }
    o.metrics["unmerged"] = {{"plan", r.issued_unmerged},
                             {"collectives", r.issued_unmerged.size()},
                             {"bytes_per_rank", r.bytes_unmerged},
                             {"modeled_cost_s", r.cost_unmerged}};
    o.metrics["merged_equals_unmerged_bitwise"] = whole.counts[merged_unmerged_differ] == 0;
    o.metrics["merged_vs_unmerged_note"] =
        "a merged sum reduces in one order and the per-dim plan in another, so float results "
        "need not agree bitwise (docs/kinds.md, The flattened-mesh merge); the integer-valued "
        "inputs here are exact in both orders";
    if (perf) {
      o.metrics["merged_time_s"] = {{"median", whole.time_merged},
                                    {"calls_per_sample", whole.calls_merged}};
      o.metrics["unmerged_time_s"] = {{"median", whole.time_unmerged},
                                      {"calls_per_sample", whole.calls_unmerged}};
    }

    const std::vector<std::string> problems = this->problems(whole.counts, r);
    if (!problems.empty()) {
      o.status = Status::fail;
      for (std::size_t i = 0; i < problems.size(); ++i) o.message += (i ? "; " : "") + problems[i];
      states_.clear();
    }
    return o;
  }

  // The request of docs/impl-protocol.md: the case as written, the world size, the mesh's rank
  // map (row-major over its shape) and every mesh rank's source local tensor, made exactly as
  // run_rank makes it.
  std::optional<nlohmann::json> impl_request(const std::filesystem::path& dir,
                                             std::string& why) override {
    if (steps) {
      why = "`steps:` replays a plan written out step by step through meshgate's executor; "
            "another implementation plans the redistribution itself";
      return std::nullopt;
    }
    // Placements without specs: a case whose rejection is deferred to its run (mixed reduce
    // ops) holds no valid spec, and is handed over as written.
    DeviceMesh mesh = mesh_spec.build();
    for (const FlattenDims& f : flatten) mesh.slice(f.dims).flatten(f.name);
    const std::vector<Placement> src_placements = parse_placements(from_text);
    const std::vector<Placement> dst_placements = parse_placements(to_text);
    const std::vector<std::int64_t> mesh_shape = mesh.shape();
    // The ranks of every row (dim 0's groups hold every rank of every row).
    std::vector<std::int64_t> all_ranks;
    for (const auto& group : mesh.groups(std::int64_t{0}))
      all_ranks.insert(all_ranks.end(), group.begin(), group.end());
    if (static_cast<std::int64_t>(all_ranks.size()) != mesh.size()) {
      why = "the mesh's layout leaves ranks of its rank map to " +
            std::to_string(all_ranks.size() / static_cast<std::size_t>(mesh.size())) +
            " rows, each redistributing on its own; the protocol's mesh is one rank map";
      return std::nullopt;
    }
    std::vector<std::int64_t> rank_map(all_ranks.size(), -1);
    const HostTensor global = make_global_tensor(shape, dtype, mesh.size());
    nlohmann::json inputs = nlohmann::json::object();
    const std::string dtype_name(comm::to_string(dtype));
    // meshgate cannot shard by a strided shard: every rank's input is then the global tensor,
    // which the implementation distributes itself (torch: distribute_tensor).
    nlohmann::json global_file;
    if (reduce || source_from_global()) {
      global_file = write_tensor_file(dir / "global.bin", dtype_name, global.shape,
                                      global.data.data(), global.bytes());
    }
    for (std::int64_t rank : all_ranks) {
      const std::vector<std::int64_t> coord = *mesh.coordinate(rank);
      std::int64_t flat = 0;
      for (std::size_t d = 0; d < coord.size(); ++d) flat = flat * mesh_shape[d] + coord[d];
      rank_map.at(static_cast<std::size_t>(flat)) = rank;
      if (source_from_global()) {
        inputs[std::to_string(rank)] = global_file;
        continue;
      }
      const HostTensor source =
          source_local_tensor(global, mesh_shape, src_placements, coord, mesh.size());
      inputs[std::to_string(rank)] =
          write_tensor_file(dir / ("in-" + std::to_string(rank) + ".bin"), dtype_name,
                            source.shape, source.data.data(), source.bytes());
    }
    nlohmann::json flat_json = nlohmann::json::array();
    for (const FlattenDims& f : flatten) {
      flat_json.push_back({{"dims", f.dims},
                           {"name", f.name ? nlohmann::json(*f.name) : nlohmann::json()}});
    }
    std::vector<std::string> from, to;
    for (const Placement& p : src_placements) from.push_back(to_string(p));
    if (strided) from = from_written;
    for (const Placement& p : dst_placements) to.push_back(to_string(p));
    nlohmann::json request{
        {"mesh",
         {{"shape", mesh_shape},
          {"names", mesh_spec.names.empty() ? nlohmann::json() : nlohmann::json(mesh_spec.names)},
          {"layout", nullptr},
          {"ranks", rank_map}}},
        {"flatten", flat_json},
        {"tensor", {{"shape", shape}, {"dtype", dtype_name}}},
        {"from", from},
        {"to", to},
        {"optimize", options.optimize},
        {"api", api_name()},
        {"planner", std::string(to_string(options.planner))},
        {"world", case_ranks},
        {"inputs", inputs}};
    if (reduce) {
      request["reduce"] = {{"op", reduce->op},
                           {"dim", reduce->dim ? nlohmann::json(*reduce->dim) : nlohmann::json()}};
      if (reduce->op == "mm") request["reduce"]["other"] = reduce->other;
      request["global"] = global_file;
    }
    if (torch_cost) request["torch_cost"] = torch_cost_request(*torch_cost);
    if (compile) request["compile"] = true;
    if (shard_order) request["shard_order"] = *shard_order;
    return request;
  }

  std::string api_name() const {
    return full_tensor ? "full_tensor" : std::string(to_string(options.api));
  }

  // Judges another implementation's comms and outputs with the checks run() makes: judge_rank
  // on a threads world of the case's ranks, check_reference on the reference rank's answer,
  // expect.distinct_plans over every mesh rank's comm list.
  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path& dir) override {
    if (reduce) return check_reduce(observables, dir);
    const Specs specs = build();
    const DeviceMesh& mesh = specs.mesh;
    const std::vector<std::int64_t> mesh_shape = mesh.shape();
    if (!observables.is_object()) throw ImplFailure("answered observables that are not an object");
    for (const char* key : {"comms", "outputs"}) {
      if (!observables.contains(key) || !observables[key].is_object()) {
        throw ImplFailure(std::string("answered no '") + key + "' object of rank -> value");
      }
    }
    const nlohmann::json& comms = observables["comms"];
    const nlohmann::json& outputs = observables["outputs"];
    const nlohmann::json* warnings_json =
        observables.contains("warnings") && !observables["warnings"].is_null()
            ? &observables["warnings"]
            : nullptr;
    if (warnings_json && !warnings_json->is_object()) {
      throw ImplFailure("answered 'warnings' that is not an object of rank -> count");
    }
    for (const nlohmann::json* part : {&comms, &outputs, warnings_json}) {
      if (!part) continue;
      for (const auto& [key, value] : part->items()) {
        std::size_t used = 0;
        long long rank = -1;
        try {
          rank = std::stoll(key, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != key.size() || rank < 0 || !mesh.coordinate(rank)) {
          throw ImplFailure("answered a result for '" + key + "', which is no rank of the mesh");
        }
      }
    }

    const std::string case_dtype(comm::to_string(dtype));
    const int n = ranks();
    std::vector<HostTensor> outs(static_cast<std::size_t>(n));
    std::vector<std::vector<std::string>> issued(static_cast<std::size_t>(n));
    std::vector<std::int64_t> rank_warnings(static_cast<std::size_t>(n), 0);
    std::set<std::vector<std::string>> lists;
    std::vector<std::string> wrong_dtypes;
    for (int rank = 0; rank < n; ++rank) {
      if (!mesh.coordinate(rank)) continue;
      const std::string key = std::to_string(rank);
      const auto u = static_cast<std::size_t>(rank);
      if (!comms.contains(key) || !comms[key].is_array()) {
        throw ImplFailure("answered no list of collectives for rank " + key + " (comms." + key +
                          ")");
      }
      for (const nlohmann::json& item : comms[key]) {
        if (!item.is_string()) {
          throw ImplFailure("answered comms." + key + " with an entry that is not a string: " +
                            item.dump());
        }
        issued[u].push_back(item.get<std::string>());
      }
      lists.insert(issued[u]);
      if (!outputs.contains(key)) {
        throw ImplFailure("answered no output tensor for rank " + key + " (outputs." + key + ")");
      }
      TensorFile file = read_tensor_file(outputs[key], dir, "outputs." + key);
      if (file.dtype != case_dtype) {
        wrong_dtypes.push_back("rank " + key + " holds " + file.dtype);
        continue;
      }
      HostTensor& out = outs[u];
      out.shape = file.shape;
      out.dtype = dtype;
      out.data.resize(file.bytes.size());
      if (!file.bytes.empty()) std::memcpy(out.data.data(), file.bytes.data(), file.bytes.size());
      if (warnings_json) {
        if (!warnings_json->contains(key) || !(*warnings_json)[key].is_number_integer() ||
            (*warnings_json)[key].get<std::int64_t>() < 0) {
          throw ImplFailure("answered no warning count >= 0 for rank " + key + " (warnings." +
                            key + ")");
        }
        rank_warnings[u] = (*warnings_json)[key].get<std::int64_t>();
      }
    }

    Outcome o;
    const auto ref = static_cast<std::size_t>(reference_rank);
    Report r;
    r.issued = issued[ref];
    r.local_shape = outs[ref].shape;
    r.warnings = static_cast<std::size_t>(rank_warnings[ref]);
    r.distinct_plans = lists.size();
    o.plan = r.issued;
    o.metrics["collectives"] = r.issued.size();
    o.metrics["warnings"] = warnings_json ? nlohmann::json(r.warnings) : nlohmann::json();
    o.metrics["distinct_plans"] = r.distinct_plans;
    o.metrics["plans_differ_between_ranks"] = r.distinct_plans > 1;
    if (!source_from_global()) {  // else meshgate's plan would start from another source
      try {
        o.metrics["meshgate_plan"] = comm_strings(
            plan_redistribute(specs.src, specs.dst, *mesh.coordinate(reference_rank), options)
                .steps,
            mesh);
      } catch (const meshgate::Error& e) {
        o.metrics["meshgate_plan"] = std::string("meshgate rejects it: ") + e.what();
      }
    }
    if (!wrong_dtypes.empty()) {
      o.status = Status::fail;
      o.message = "the outputs' dtype is not the tensor's " + case_dtype + ": " + join(wrong_dtypes);
      return o;
    }

    std::vector<std::int64_t> c(count_slots, 0);
    check_reference(r, c, warnings_json != nullptr);
    std::vector<std::vector<std::int64_t>> counts(static_cast<std::size_t>(n),
                                                  std::vector<std::int64_t>(count_slots, 0));
    const HostTensor global = make_global_tensor(shape, dtype, mesh.size());
    comm::ThreadsWorld world(n);
    std::vector<std::exception_ptr> failures(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < n; ++rank) {
      threads.emplace_back([&, rank] {
        const auto u = static_cast<std::size_t>(rank);
        try {
          const std::unique_ptr<comm::Communicator> comm = world.communicator(rank);
          const auto coord = mesh.coordinate(rank);
          HostTensor want;
          if (coord) want = target_shard(global, mesh_shape, specs.dst.placements, *coord);
          judge_rank(*comm, mesh, specs.dst, coord.has_value(), outs[u], want, counts[u]);
        } catch (...) {
          failures[u] = std::current_exception();
          world.abort("rank " + std::to_string(rank) + " failed while checking");
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : failures) {
      if (e) std::rethrow_exception(e);
    }
    for (const auto& rank_counts : counts) {
      for (std::size_t k = 0; k < c.size(); ++k) c[k] += rank_counts[k];
    }
    std::vector<std::string> problems = this->problems(c, r);
    if (torch_cost) judge_torch_cost(*torch_cost, observables, o.metrics, problems);
    if (compile) judge_compile(observables, o.metrics, problems);
    if (!problems.empty()) {
      o.status = Status::fail;
      for (std::size_t i = 0; i < problems.size(); ++i) o.message += (i ? "; " : "") + problems[i];
    }
    return o;
  }

  // What torch.compile made of a `compile: true` case: its graph breaks and graphs as metrics
  // (signals the gate tracks across releases), and expect.graph_breaks when the case says it.
  void judge_compile(const nlohmann::json& observables, nlohmann::json& metrics,
                     std::vector<std::string>& problems) const {
    const auto found = observables.find("compile");
    if (found == observables.end() || !found->is_object() ||
        !found->value("graph_breaks", nlohmann::json()).is_number_integer() ||
        !found->value("graphs", nlohmann::json()).is_number_integer()) {
      throw ImplFailure(
          "answered a `compile: true` case without 'compile': {graph_breaks, graphs} counts");
    }
    const std::int64_t breaks = (*found)["graph_breaks"].get<std::int64_t>();
    metrics["graph_breaks"] = breaks;
    metrics["graphs"] = (*found)["graphs"].get<std::int64_t>();
    if (expect_graph_breaks && breaks != *expect_graph_breaks) {
      problems.push_back("graph breaks: expected " + std::to_string(*expect_graph_breaks) +
                         ", torch.compile made " + std::to_string(breaks));
    }
  }

  // A `reduce` case, judged by signals alone: every mesh rank's full_tensor() of the op's result
  // against the single-process torch reference the implementation computed from the global
  // tensor (same dtype and shape; values within the dtype's tolerance, exact for integers),
  // every rank's result bitwise equal to the lowest rank's, and `expect` (comms, placements,
  // local_shape, warnings, distinct_plans) against what the implementation reported. Observables:
  // {"comms", "outputs", "warnings"?, "placements": {rank: [..]}, "reference": TENSOR}.
  Outcome check_reduce(const nlohmann::json& observables, const std::filesystem::path& dir) const {
    DeviceMesh mesh = mesh_spec.build();
    for (const FlattenDims& f : flatten) mesh.slice(f.dims).flatten(f.name);
    if (!observables.is_object()) throw ImplFailure("answered observables that are not an object");
    for (const char* key : {"comms", "outputs", "placements"}) {
      if (!observables.contains(key) || !observables[key].is_object()) {
        throw ImplFailure(std::string("answered no '") + key + "' object of rank -> value");
      }
    }
    if (!observables.contains("reference")) {
      throw ImplFailure("answered no 'reference' tensor (the op on the global tensor, computed "
                        "in one process)");
    }
    const TensorFile ref_file = read_tensor_file(observables["reference"], dir, "reference");
    const auto to_host = [](const TensorFile& f) {
      HostTensor t;
      t.shape = f.shape;
      t.dtype = comm::parse_dtype(f.dtype);
      t.data.resize(f.bytes.size());
      if (!f.bytes.empty()) std::memcpy(t.data.data(), f.bytes.data(), f.bytes.size());
      return t;
    };
    const HostTensor reference = to_host(ref_file);
    // Relative to max(1, |reference|): the op reduces in another order on each side.
    double tolerance = 0;
    if (comm::is_floating(reference.dtype)) {
      tolerance = reference.dtype == comm::DType::f64   ? 1e-12
                  : reference.dtype == comm::DType::f32 ? 1e-5
                  : reference.dtype == comm::DType::f16 ? 2e-3
                                                        : 1.6e-2;
    }
    const nlohmann::json* warnings_json =
        observables.contains("warnings") && observables["warnings"].is_object()
            ? &observables["warnings"]
            : nullptr;
    Report r;
    std::set<std::vector<std::string>> lists;
    std::vector<std::string> placements;
    std::int64_t wrong_shapes = 0, wrong_elements = 0, replica_ranks = 0;
    std::vector<std::string> wrong_dtypes;
    std::optional<HostTensor> first;
    for (int rank = 0; rank < ranks(); ++rank) {
      if (!mesh.coordinate(rank)) continue;
      const std::string key = std::to_string(rank);
      const nlohmann::json& comms = observables["comms"];
      if (!comms.contains(key) || !comms[key].is_array()) {
        throw ImplFailure("answered no list of collectives for rank " + key + " (comms." + key +
                          ")");
      }
      std::vector<std::string> issued;
      for (const nlohmann::json& item : comms[key]) {
        if (!item.is_string()) {
          throw ImplFailure("answered comms." + key + " with an entry that is not a string");
        }
        issued.push_back(item.get<std::string>());
      }
      lists.insert(issued);
      const nlohmann::json& ps = observables["placements"];
      if (!ps.contains(key) || !ps[key].is_array()) {
        throw ImplFailure("answered no list of placements for rank " + key + " (placements." +
                          key + ")");
      }
      std::vector<std::string> rank_placements;
      for (const nlohmann::json& item : ps[key]) {
        if (!item.is_string()) {
          throw ImplFailure("answered placements." + key + " with an entry that is not a string");
        }
        rank_placements.push_back(item.get<std::string>());
      }
      if (!observables["outputs"].contains(key)) {
        throw ImplFailure("answered no output tensor for rank " + key + " (outputs." + key + ")");
      }
      const TensorFile file = read_tensor_file(observables["outputs"][key], dir, "outputs." + key);
      std::int64_t warnings = 0;
      if (warnings_json && warnings_json->contains(key) &&
          (*warnings_json)[key].is_number_integer()) {
        warnings = (*warnings_json)[key].get<std::int64_t>();
      }
      if (rank == reference_rank) {
        r.issued = issued;
        r.local_shape = file.shape;
        r.warnings = static_cast<std::size_t>(std::max<std::int64_t>(0, warnings));
        placements = rank_placements;
      }
      if (file.dtype != ref_file.dtype) {
        wrong_dtypes.push_back("rank " + key + " holds " + file.dtype);
        continue;
      }
      const HostTensor out = to_host(file);
      if (out.shape != reference.shape) {
        ++wrong_shapes;
        continue;
      }
      for (std::int64_t i = 0; i < out.numel(); ++i) {
        const double want = reference.get(i);
        const double got = out.get(i);
        const bool same = std::isnan(want) ? std::isnan(got)
                                           : std::abs(got - want) <=
                                                 tolerance * std::max(1.0, std::abs(want));
        if (!same) ++wrong_elements;
      }
      if (!first) {
        first = out;
      } else if (first->data != out.data) {
        ++replica_ranks;
      }
    }
    r.distinct_plans = lists.size();

    Outcome o;
    o.plan = r.issued;
    o.metrics["collectives"] = r.issued.size();
    o.metrics["warnings"] = warnings_json ? nlohmann::json(r.warnings) : nlohmann::json();
    o.metrics["distinct_plans"] = r.distinct_plans;
    o.metrics["plans_differ_between_ranks"] = r.distinct_plans > 1;
    o.metrics["result_placements"] = placements;
    o.metrics["meshgate_plan"] = "meshgate does not model " + op_call(reduce->op);
    o.metrics["wrong_elements"] = wrong_elements;
    std::vector<std::string> problems;
    if (!wrong_dtypes.empty()) {
      problems.push_back("the outputs' dtype is not the reference's " + ref_file.dtype + ": " +
                         join(wrong_dtypes));
    }
    if (wrong_shapes) {
      problems.push_back(std::to_string(wrong_shapes) +
                         " rank(s) ended with another shape than the reference's " +
                         shape_text(reference.shape));
    }
    if (wrong_elements) {
      problems.push_back(std::to_string(wrong_elements) +
                         " wrong element(s) against the single-process torch reference");
    }
    if (replica_ranks) {
      problems.push_back(std::to_string(replica_ranks) +
                         " rank(s) hold a full_tensor() that differs bitwise from the lowest "
                         "rank's");
    }
    std::vector<std::int64_t> c(count_slots, 0);
    check_reference(r, c, warnings_json != nullptr);
    for (const std::string& p : this->problems(c, r)) problems.push_back(p);
    if (expect_placements && placements != *expect_placements) {
      problems.push_back("expect.placements " + join(*expect_placements) + " but rank " +
                         std::to_string(reference_rank) + "'s result has " + join(placements));
    }
    if (!problems.empty()) {
      o.status = Status::fail;
      for (std::size_t i = 0; i < problems.size(); ++i) o.message += (i ? "; " : "") + problems[i];
    }
    return o;
  }

  // `calls` redistributions of the (merged) plan on every rank; the max over ranks.
  double time_calls(RunContext& ctx, std::int64_t calls) override {
    std::vector<double> times(static_cast<std::size_t>(ranks()), 0.0);
    ctx.run_on_ranks(ranks(), [&](int rank, comm::Communicator& world) {
      RankState& s = states_.at(static_cast<std::size_t>(rank));
      times[static_cast<std::size_t>(rank)] = timed(world, s, s.plan.steps, calls);
    });
    return times[static_cast<std::size_t>(ctx.lead_rank())];
  }

  void release() override { states_.clear(); }

 private:
  std::vector<RankState> states_;

  // How many different comm lists the (merged) plans of all the mesh's coordinates issue.
  std::size_t distinct_comm_lists(const DTensorSpec& src, const DTensorSpec& dst,
                                  const DeviceMesh& mesh) const {
    if (steps) return 1;  // every rank replays the same text
    std::set<std::vector<std::string>> lists;
    for (int rank = 0; rank < ranks(); ++rank) {
      const auto coord = mesh.coordinate(rank);
      if (!coord) continue;
      lists.insert(comm_strings(cached_plan_redistribute(src, dst, *coord, options)->steps, mesh));
    }
    return lists.size();
  }

  // Seconds of `calls` redistributions back to back, the max over the ranks of `world` (a rank
  // outside the mesh adds 0).
  static double timed(comm::Communicator& world, RankState& s,
                      std::span<const TransformStep> steps, std::int64_t calls) {
    world.barrier();
    double dt = 0;
    if (s.executor) {
      const double t0 = now_s();
      for (std::int64_t i = 0; i < calls; ++i) keep_result(s.executor->run(steps, s.source));
      dt = now_s() - t0;
    }
    world.all_reduce(&dt, &dt, 1, comm::DType::f64, comm::ReduceOp::max);
    return dt;
  }

  PlanOptions unmerged_options() const {
    PlanOptions plain = options;
    plain.optimize = false;
    plain.planner = Planner::greedy;
    return plain;
  }

  // Group splits are collective over the world and a rank's plans need only some groups: every
  // rank splits the union over all coordinates and both plans (and the written-out steps, the
  // same on every rank), in one order.
  std::vector<std::vector<std::int64_t>> all_groups(const DTensorSpec& src,
                                                    const DTensorSpec& dst) const {
    const std::vector<PlanOptions> both = {options, unmerged_options()};
    std::vector<std::vector<std::int64_t>> groups = groups_of_all_coordinates(src, dst, both);
    if (steps) {
      for (auto& g : collective_groups(steps_from_text(src, *steps)))
        groups.push_back(std::move(g));
    }
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    return groups;
  }

  // The checks every rank makes of its result, whoever computed it (meshgate's executor in
  // run_rank, another implementation in check_observables): the local shape against the target
  // shard `want`, the values against it, replicas bitwise equal. Collective over `world`: every
  // rank of the world calls it, those outside the mesh (in_mesh false, `out` and `want` empty)
  // only join the splits.
  static void judge_rank(comm::Communicator& world, const DeviceMesh& mesh, const DTensorSpec& dst,
                         bool in_mesh, const HostTensor& out, const HostTensor& want,
                         std::vector<std::int64_t>& c) {
    const std::vector<std::int64_t> mesh_shape = mesh.shape();
    if (in_mesh && out.shape != want.shape) c[wrong_shape] = 1;
    // Values: Partial target dims are reduced over their group (in float64, exact for these
    // integers) before comparing with the target shard. Every rank takes part in the splits
    // and the collectives, whatever its shape, so that no rank waits alone; ranks outside the
    // mesh are in no group.
    std::vector<std::int64_t> partial_dims, replicate_dims;
    ReduceOp op = ReduceOp::sum;
    std::int64_t avg_size = 1;
    for (std::size_t m = 0; m < mesh_shape.size(); ++m) {
      const Placement& p = dst.placements[m];
      if (p.is_replicate()) replicate_dims.push_back(static_cast<std::int64_t>(m));
      if (!p.is_partial()) continue;
      partial_dims.push_back(static_cast<std::int64_t>(m));
      if (p.reduce_op() == ReduceOp::avg) {
        avg_size *= mesh_shape[m];
      } else {
        op = p.reduce_op();
      }
    }
    const bool shape_ok = out.shape == want.shape;
    HostTensor value = HostTensor::zeros(shape_ok ? out.shape : want.shape, comm::DType::f64);
    if (in_mesh && shape_ok) {
      for (std::int64_t i = 0; i < out.numel(); ++i) value.set(i, out.get(i));
    }
    if (!partial_dims.empty()) {
      std::unique_ptr<comm::Communicator> g =
          world.split(mesh_groups(mesh, partial_dims, world.size()));
      if (g) {
        // An avg is summed here; the division by the avg dims' size follows below.
        const ReduceOp cop = op == ReduceOp::avg ? ReduceOp::sum : op;
        g->all_reduce(value.data.data(), value.data.data(), static_cast<std::size_t>(value.numel()),
                      comm::DType::f64, cop);
        if (op == ReduceOp::sum && avg_size > 1) divide(value, avg_size);
      }
    }
    if (in_mesh && shape_ok) {
      for (std::int64_t i = 0; i < want.numel(); ++i) {
        if (value.get(i) != want.get(i)) ++c[wrong_values];
      }
    }

    // Replicas: the ranks that differ only on Replicate dims hold the same bits.
    if (!replicate_dims.empty()) {
      std::unique_ptr<comm::Communicator> g =
          world.split(mesh_groups(mesh, replicate_dims, world.size()));
      if (g) {
        // Shapes agree within a group when the shapes are right; a wrong shape is counted
        // above.
        std::vector<std::byte> mine = shape_ok ? out.data : std::vector<std::byte>(want.bytes());
        std::vector<std::byte> all(mine.size() * static_cast<std::size_t>(g->size()));
        g->all_gather(mine.data(), all.data(), mine.size(), comm::DType::u8);
        for (int k = 0; k < g->size(); ++k) {
          if (!std::equal(mine.begin(), mine.end(),
                          all.begin() + static_cast<std::ptrdiff_t>(k * mine.size()))) {
            c[replica_mismatch] = 1;
          }
        }
      }
    }
  }

  // The reference rank's result against `expect`; `warnings` only when its implementation
  // reports them (meshgate's does).
  void check_reference(const Report& r, std::vector<std::int64_t>& c,
                       bool warnings_observed = true) const {
    if (expect_comms && r.issued != *expect_comms) c[comm_mismatch] = 1;
    if (warnings_observed && expect_warnings &&
        static_cast<std::int64_t>(r.warnings) != *expect_warnings) {
      c[warnings_mismatch] = 1;
    }
    if (expect_local_shape && r.local_shape != *expect_local_shape) c[local_shape_mismatch] = 1;
    if (expect_distinct_plans &&
        static_cast<std::int64_t>(r.distinct_plans) != *expect_distinct_plans) {
      c[distinct_plans_mismatch] = 1;
    }
  }

  // What the summed counts say, in words: empty when the case passes.
  std::vector<std::string> problems(const std::vector<std::int64_t>& c, const Report& r) const {
    const std::string who = "rank " + std::to_string(reference_rank);
    std::vector<std::string> problems;
    if (c[wrong_shape] != expect_wrong_shapes) {
      problems.push_back(std::to_string(c[wrong_shape]) +
                         " rank(s) ended with a local shape other than the target shard's" +
                         (expect_wrong_shapes ? " (expected " +
                                                    std::to_string(expect_wrong_shapes) + ")"
                                              : ""));
    }
    if (c[wrong_values] != expect_wrong_elements) {
      problems.push_back(std::to_string(c[wrong_values]) +
                         " wrong element(s) against the global tensor's target shard" +
                         (expect_wrong_elements ? " (expected " +
                                                      std::to_string(expect_wrong_elements) + ")"
                                                : ""));
    }
    if (c[replica_mismatch]) {
      problems.push_back(std::to_string(c[replica_mismatch]) +
                         " rank(s) hold replicas that differ bitwise from their group's");
    }
    if (c[comm_mismatch]) problems.push_back(who + ": " + comm_diff(*expect_comms, r.issued));
    if (c[plan_mismatch]) {
      problems.push_back(std::to_string(c[plan_mismatch]) +
                         " rank(s) issued collectives other than their own plan's");
    }
    if (c[local_shape_mismatch]) {
      problems.push_back("expect.local_shape " + shape_text(*expect_local_shape) + " but " + who +
                         " holds " + shape_text(r.local_shape));
    }
    if (c[warnings_mismatch]) {
      problems.push_back("expect.warnings " + std::to_string(*expect_warnings) + " but " + who +
                         "'s plan has " + std::to_string(r.warnings));
    }
    if (c[distinct_plans_mismatch]) {
      problems.push_back("expect.distinct_plans " + std::to_string(*expect_distinct_plans) +
                         " but the ranks' plans issue " + std::to_string(r.distinct_plans) +
                         " different lists of collectives");
    }
    return problems;
  }

  RankResult run_rank(int rank, comm::Communicator& world, const std::optional<PerfSpec>& perf) {
    const Specs specs = build();
    const DeviceMesh& mesh = specs.mesh;
    const DTensorSpec& src = specs.src;
    const DTensorSpec& dst = specs.dst;
    RankState& state = states_.at(static_cast<std::size_t>(rank));
    const std::vector<std::int64_t> mesh_shape = mesh.shape();
    const std::vector<std::vector<std::int64_t>> groups = all_groups(src, dst);
    // A rank outside the mesh holds no shard and joins only the world-wide calls below.
    const bool in_mesh = mesh.coordinate(rank).has_value();

    RankResult result;
    Report& r = result.report;
    auto& c = result.counts;
    Plan unmerged;
    HostTensor out, want;
    if (in_mesh) {
      state.executor = std::make_unique<Redistributor>(world, mesh);
      Redistributor& ex = *state.executor;
      const std::vector<std::int64_t> coord = ex.coordinate();
      const Plan planned = plan_redistribute(src, dst, coord, options);
      if (steps) {
        state.plan = Plan{};
        state.plan.steps = steps_from_text(src, *steps, coord);
        state.plan.unmerged = state.plan.steps;
        for (const TransformStep& s : state.plan.steps) state.plan.cost += s.modeled_time;
        state.plan.greedy_cost = state.plan.cost;
      } else {
        state.plan = planned;
      }
      unmerged = plan_redistribute(src, dst, coord, unmerged_options());
      ex.create_groups(groups);

      const HostTensor global = make_global_tensor(shape, dtype, mesh.size());
      state.source = source_local_tensor(global, mesh_shape, src.placements, coord, mesh.size());
      CommLog log, log_unmerged;
      out = ex.run(state.plan.steps, state.source, &log);
      const HostTensor out_unmerged = ex.run(unmerged.steps, state.source, &log_unmerged);

      r.issued = log.strings();
      r.issued_unmerged = log_unmerged.strings();
      r.planned = comm_strings(planned.steps, mesh);
      r.bytes = log.bytes();
      r.bytes_unmerged = log_unmerged.bytes();
      r.warnings = state.plan.warnings.size();
      r.distinct_plans = distinct_comm_lists(src, dst, mesh);
      r.cost = state.plan.cost;
      r.greedy_cost = state.plan.greedy_cost;
      for (const TransformStep& s : unmerged.steps) r.cost_unmerged += s.modeled_time;
      r.local_shape = out.shape;

      want = target_shard(global, mesh_shape, dst.placements, coord);
      if (out != out_unmerged) c[merged_unmerged_differ] = 1;
      if (r.issued != comm_strings(state.plan.steps, mesh) ||
          r.issued_unmerged != comm_strings(unmerged.steps, mesh)) {
        c[plan_mismatch] = 1;
      }
      // Checks of the reference rank's plan are counts too, so that on the mpi backend, where
      // each process reads its own rank's results, every rank reaches the same verdict.
      if (rank == reference_rank) check_reference(r, c);
    } else {
      join_group_splits(world, mesh, groups);
    }

    judge_rank(world, mesh, dst, in_mesh, out, want, c);

    world.all_reduce(c.data(), c.data(), c.size(), comm::DType::i64, comm::ReduceOp::sum);
    std::string report = rank == reference_rank ? nlohmann::json(r).dump() : std::string();
    broadcast_text(world, report, static_cast<int>(reference_rank));
    r = nlohmann::json::parse(report).get<Report>();

    if (perf) {
      const AgreeOnCalls agree = [&](std::int64_t calls) {
        world.all_reduce(&calls, &calls, 1, comm::DType::i64, comm::ReduceOp::max);
        return calls;
      };
      for (const Plan* p : std::initializer_list<const Plan*>{&state.plan, &unmerged}) {
        const TimedSamples samples = measure_calls(
            [&](std::int64_t calls) { return timed(world, state, p->steps, calls); }, *perf,
            agree);
        const bool merged = p == &state.plan;
        (merged ? result.time_merged : result.time_unmerged) = median(samples.per_call_s);
        (merged ? result.calls_merged : result.calls_unmerged) = samples.calls_per_sample;
      }
    }
    return result;
  }
};

std::vector<std::string> read_placements_text(const YAML::Node& v, const CaseNode& at,
                                              std::string_view key) {
  std::vector<std::string> items;
  if (v.IsScalar()) {
    items.push_back(v.Scalar());
  } else if (v.IsSequence()) {
    for (const auto& item : v) {
      if (!item.IsScalar())
        at.fail_at(item, key, "each placement is a string such as S(0), R, P(sum)");
      items.push_back(item.Scalar());
    }
  } else {
    at.fail_at(v, key, "expected a list of placements such as [P(sum), R, S(0)]");
  }
  return items;
}

std::string placements_text(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + items[i];
  return out;
}

// Expectations no run can meet are input errors naming the entry: a local shape of another
// rank than the tensor's or with a size outside [0, the tensor's], more ranks with a wrong
// shape than the case runs on, and comm strings that the executor never writes (they must
// parse as steps do, name dims of the mesh and tensor dims of the tensor, be collectives, and
// be written as issued, e.g. with their dims in ascending order).
void check_expect(const RedistributeCase& c, CaseNode& expect, const DeviceMesh& mesh) {
  if (c.expect_local_shape && c.reduce) {
    // The op's result, gathered: the tensor's shape without the reduced dim (all dims: []);
    // t reverses the 2-D shape, mm of [n, k] with its transpose is [n, n], full_tensor keeps it.
    Shape reduced;
    if (c.reduce->op == "t") {
      reduced = {c.shape.at(1), c.shape.at(0)};
    } else if (c.reduce->op == "mm") {
      reduced = {c.shape.at(0), c.shape.at(0)};
    } else if (c.reduce->op == "full_tensor") {
      reduced = c.shape;
    } else if (c.reduce->dim) {
      const auto rank = static_cast<std::int64_t>(c.shape.size());
      const std::int64_t dim = *c.reduce->dim < 0 ? *c.reduce->dim + rank : *c.reduce->dim;
      for (std::int64_t d = 0; d < rank; ++d) {
        if (d != dim) reduced.push_back(c.shape[static_cast<std::size_t>(d)]);
      }
    }
    if (*c.expect_local_shape != reduced) {
      const std::string what =
          !is_reduction(c.reduce->op)
              ? op_call(c.reduce->op)
              : c.reduce->op + " over " +
                    (c.reduce->dim ? "dim " + std::to_string(*c.reduce->dim)
                                   : std::string("every dim"));
      expect.fail("local_shape", shape_text(*c.expect_local_shape) + " is not the shape of " +
                                     what + " of " + shape_text(c.shape) + ", " +
                                     shape_text(reduced));
    }
  } else if (c.expect_local_shape) {
    const Shape& want = *c.expect_local_shape;
    if (want.size() != c.shape.size()) {
      expect.fail("local_shape",
                  shape_text(want) + " has another rank than the tensor " + shape_text(c.shape));
    }
    for (std::size_t d = 0; d < want.size(); ++d) {
      if (want[d] < 0 || want[d] > c.shape[d]) {
        expect.fail_at(expect.raw("local_shape")[d], "local_shape",
                       "size " + std::to_string(want[d]) + " of dim " + std::to_string(d) +
                           " is outside [0, " + std::to_string(c.shape[d]) +
                           "], the tensor's size there");
      }
    }
  }
  if (c.expect_wrong_shapes > c.case_ranks) {
    expect.fail("wrong_shapes", std::to_string(c.expect_wrong_shapes) +
                                    " ranks, but the case runs on " + std::to_string(c.case_ranks));
  }
  if (!c.expect_comms) return;
  const auto es = static_cast<std::int64_t>(comm::element_size(c.dtype));
  const DTensorSpec src = DTensorSpec::create(mesh, parse_placements(c.from_text), c.shape, es);
  const YAML::Node items = expect.raw("comms");
  for (std::size_t i = 0; i < c.expect_comms->size(); ++i) {
    const std::string& text = (*c.expect_comms)[i];
    StepList parsed;
    try {
      parsed = steps_from_text(src, std::vector<std::string>{text});
    } catch (const meshgate::Error& err) {
      expect.fail_at(items[i], "comms", err.what());
    }
    const TransformStep& step = parsed.front();
    if (!is_collective(step.kind)) {
      expect.fail_at(items[i], "comms",
                     "'" + text + "' is a local step; comms lists the collectives issued");
    }
    const std::string issued = to_string(step, mesh);
    if (issued != text) {
      expect.fail_at(
          items[i], "comms",
          "'" + text + "' is never issued as written: the executor writes it '" + issued + "'");
    }
  }
}

// Every backend refuses an avg reduction of an integer dtype (it would have to round), so a
// case whose plans issue one can never run: a rejection of its dtype, not a failed kernel. The
// unmerged plan runs beside every case and holds each avg reduction that a merged or min_cost
// plan issues (merging turns avg into sum); its steps do not depend on the rank's coordinate.
// Plans the planner rejects (S -> P, ...) are left to the run, which reports that error.
void check_avg_dtype(const RedistributeCase& c, const CaseNode& tensor, const DeviceMesh& mesh) {
  if (comm::is_floating(c.dtype)) return;
  const auto es = static_cast<std::int64_t>(comm::element_size(c.dtype));
  const DTensorSpec src = DTensorSpec::create(mesh, parse_placements(c.from_text), c.shape, es);
  const DTensorSpec dst = DTensorSpec::create(mesh, parse_placements(c.to_text), c.shape, es);
  StepList steps;
  try {
    PlanOptions plain = c.options;
    plain.optimize = false;
    plain.planner = Planner::greedy;
    steps = plan_redistribute(src, dst, {}, plain).steps;
  } catch (const meshgate::Error&) {
  }
  if (c.steps) {
    for (TransformStep& s : steps_from_text(src, *c.steps)) steps.push_back(std::move(s));
  }
  for (const TransformStep& s : steps) {
    const bool reduces = s.kind == StepKind::all_reduce || s.kind == StepKind::reduce_scatter;
    if (!reduces || s.group_size <= 1 || s.reduce_op != ReduceOp::avg) continue;
    reject_value(tensor, "dtype",
                 "the plan issues " + to_string(s, mesh) + ", and an avg reduction of " +
                     std::string(comm::to_string(c.dtype)) +
                     " is supported by no backend (it would round): use a floating-point dtype, "
                     "or P(sum)");
  }
}

}  // namespace

// `shard_order: [{dim: D, mesh_dims: [B, A]}, ...]`: for each tensor dim the source shards
// over more than one mesh dim, every mesh dim whose placement in `from` is S(D), in the order
// they shard it (mesh dims by name or index). Normalised to indices.
nlohmann::json parse_shard_order(CaseNode& node, const RedistributeCase& c) {
  if (c.strided) {
    node.fail("shard_order", "is given by the strided shards of `from` already (PyTorch "
                             "derives the order from _StridedShard): remove one");
  }
  if (c.steps || c.reduce) {
    node.fail("shard_order", c.steps ? "has no effect with `steps`, which replaces planning"
                                     : "orders the source of a redistribution, not of `reduce`");
  }
  const YAML::Node list = node.node()["shard_order"];
  if (!list.IsSequence() || list.size() == 0) {
    node.fail("shard_order", "must be a list of {dim: D, mesh_dims: [..]}, one per tensor dim "
                             "sharded over several mesh dims");
  }
  const std::vector<Placement> from = parse_placements(c.from_text);
  const std::vector<std::string>& names = c.mesh_spec.names;
  const auto mesh_dim = [&](const YAML::Node& item) -> std::int64_t {
    const std::string text = item.as<std::string>();
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == text) return static_cast<std::int64_t>(i);
    }
    try {
      std::size_t used = 0;
      const long long index = std::stoll(text, &used);
      if (used == text.size() && index >= 0 && index < static_cast<long long>(from.size())) {
        return index;
      }
    } catch (const std::exception&) {
    }
    node.fail("shard_order", "names mesh dim '" + text + "', which the mesh lacks");
    return -1;
  };
  nlohmann::json out = nlohmann::json::array();
  std::set<std::int64_t> dims_seen;
  for (const YAML::Node& entry : list) {
    if (!entry.IsMap() || !entry["dim"] || !entry["mesh_dims"] || !entry["mesh_dims"].IsSequence() ||
        entry.size() != 2) {
      node.fail("shard_order", "each entry is {dim: D, mesh_dims: [..]}");
    }
    std::int64_t dim = -1;
    try {
      dim = entry["dim"].as<std::int64_t>();
    } catch (const YAML::Exception&) {
      node.fail("shard_order", "an entry's dim must be a tensor dim, an integer");
    }
    if (!dims_seen.insert(dim).second) {
      node.fail("shard_order", "orders tensor dim " + std::to_string(dim) + " twice");
    }
    std::vector<std::int64_t> order;
    for (const YAML::Node& item : entry["mesh_dims"]) order.push_back(mesh_dim(item));
    std::vector<std::int64_t> sharding;
    for (std::size_t m = 0; m < from.size(); ++m) {
      if (from[m].is_shard() && from[m].dim() == dim) sharding.push_back(static_cast<std::int64_t>(m));
    }
    std::vector<std::int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != sharding) {
      node.fail("shard_order", "orders tensor dim " + std::to_string(dim) + " over mesh dims " +
                                   nlohmann::json(order).dump() + ", but `from` shards it (S(" +
                                   std::to_string(dim) + ")) on mesh dims " +
                                   nlohmann::json(sharding).dump() +
                                   ": list each of those once");
    }
    out.push_back({{"dim", dim}, {"mesh_dims", order}});
  }
  return out;
}

const std::vector<std::string>& redistribute_case_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = mesh_spec_keys("mesh");
    for (std::string key :
         {"flatten", "tensor", "tensor.shape", "tensor.dtype", "from", "to", "optimize", "api",
          "compile", "expect.graph_breaks", "shard_order",
          "planner", "expect", "expect.comms", "expect.local_shape", "expect.warnings",
          "expect.distinct_plans", "expect.wrong_shapes", "expect.wrong_elements", "steps",
          "reduce", "reduce.op", "reduce.dim", "reduce.other", "expect.placements"})
      k.push_back(std::move(key));
    for (const std::string& key : torch_cost_keys()) k.push_back(key);
    return k;
  }();
  return keys;
}

std::unique_ptr<PreparedCase> parse_redistribute_case(CaseNode& node, bool expect_error) {
  auto c = std::make_unique<RedistributeCase>();
  c->mesh_spec = read_mesh_spec(node);

  if (node.has("reduce")) {
    CaseNode reduce = node.child("reduce");
    ReduceSpec spec;
    spec.op = reduce.required<std::string>("op");
    const std::vector<std::string>& ops = reduce_ops();
    if (std::find(ops.begin(), ops.end(), spec.op) == ops.end()) {
      reduce.fail("op", "unknown reduction '" + spec.op + "' (known: " + join(ops) + ")");
    }
    spec.dim = reduce.optional<std::int64_t>("dim");
    if (spec.dim && !is_reduction(spec.op)) {
      reduce.fail("dim", "applies to a reduction (sum, mean, amax, amin, vector_norm), not to " +
                             spec.op + ": remove it");
    }
    if (spec.op == "mm") {
      if (!reduce.has("other")) {
        reduce.fail("op", "mm needs `other`: the placements of its second operand, the "
                          "tensor's transpose, e.g. other: [S(0), R]");
      }
      spec.other = split_placement_items(read_placements_text(reduce.raw("other"), reduce,
                                                              "other"));
    } else if (reduce.has("other")) {
      reduce.fail("other", "is the second operand of mm, not of " + spec.op + ": remove it");
    }
    for (const char* key : {"to", "api", "steps", "perf"}) {
      if (node.has(key)) {
        node.fail(key, "does not apply to a `reduce` case, whose result is gathered with "
                       "full_tensor(): remove it");
      }
    }
    c->reduce = std::move(spec);
  }

  if (YAML::Node v = node.raw("flatten"); v && !v.IsNull()) {
    if (!v.IsSequence())
      node.fail_at(v, "flatten", "expected a list of dim-name lists such as [[A, C]]");
    for (const auto& item : v) {
      FlattenDims f;
      if (item.IsMap()) {
        for (const auto& kv : item) {
          const std::string k = kv.first.Scalar();
          if (k != "dims" && k != "name") {
            node.fail_at(kv.first, "flatten", "unknown key '" + k + "' (known: dims, name)");
          }
        }
        if (!item["dims"])
          node.fail_at(item, "flatten", "a {dims: [..], name: ..} entry needs dims");
        f.dims = read_dim_names(item["dims"], node, "flatten");
        if (item["name"]) f.name = item["name"].Scalar();
      } else {
        f.dims = read_dim_names(item, node, "flatten");
      }
      c->flatten.push_back(std::move(f));
    }
  }

  CaseNode tensor = node.child("tensor");
  c->shape = tensor.required<std::vector<std::int64_t>>("shape");
  for (std::int64_t s : c->shape) {
    if (s < 0) {
      reject_value(tensor, "shape", "tensor sizes must be non-negative, got " + std::to_string(s));
    }
  }
  const std::string dtype = tensor.optional<std::string>("dtype").value_or("float32");
  try {
    c->dtype = parse_tensor_dtype(dtype);
  } catch (const meshgate::Error& err) {
    reject_value(tensor, "dtype", err.what());
  }

  YAML::Node from = node.raw("from");
  YAML::Node to = node.raw("to");
  if (!from) node.fail("from", "is required (a list of placements)");
  if (!to && !c->reduce) node.fail("to", "is required (a list of placements)");
  c->from_written = split_placement_items(read_placements_text(from, node, "from"));
  {
    // A strided shard stands as S(d) in from_text, for the checks meshgate can make.
    std::vector<std::string> model;
    for (const std::string& item : c->from_written) {
      std::optional<std::pair<std::int64_t, std::int64_t>> ss;
      try {
        ss = parse_strided(item);
      } catch (const std::runtime_error& err) {
        reject_value(node, "from", err.what());
      }
      c->strided = c->strided || ss.has_value();
      model.push_back(ss ? "S(" + std::to_string(ss->first) + ")" : item);
    }
    c->from_text = placements_text(model);
    if (c->strided) {
      for (const std::string& item : model) {
        if (item.rfind("P", 0) == 0) {
          node.fail("from", "a source with a strided shard is built from the global tensor "
                            "(distribute_tensor), which takes no Partial placement");
        }
      }
    }
  }
  if (to) {
    const std::vector<std::string> items = read_placements_text(to, node, "to");
    for (const std::string& item : split_placement_items(items)) {
      if (item.rfind("SS", 0) == 0) {
        node.fail("to", "meshgate has no strided shard (SS(d,k)) to redistribute to, so nothing "
                        "could judge the target's shards; a strided shard is a source only");
      }
    }
    c->to_text = placements_text(items);
  }

  c->options.optimize = node.optional<bool>("optimize").value_or(true);
  if (auto api = node.optional<std::string>("api")) {
    if (*api == "full_tensor") {
      // DTensor.full_tensor(): redistribute to Replicate on every dim through the public api.
      c->full_tensor = true;
      c->options.api = Api::public_;
    } else {
      try {
        c->options.api = parse_api(*api);
      } catch (const meshgate::Error& err) {
        reject_value(node, "api",
                     std::string(err.what()) + "; or full_tensor (DTensor.full_tensor())");
      }
    }
  }
  if (auto planner = node.optional<std::string>("planner")) {
    try {
      c->options.planner = parse_planner(*planner);
    } catch (const meshgate::Error& err) {
      reject_value(node, "planner", err.what());
    }
  }

  std::optional<CaseNode> expect_node;
  if (node.has("expect")) {
    CaseNode& expect = expect_node.emplace(node.child("expect"));
    c->expect_comms = expect.optional<std::vector<std::string>>("comms");
    c->expect_local_shape = expect.optional<std::vector<std::int64_t>>("local_shape");
    c->expect_warnings = expect.optional<std::int64_t>("warnings");
    c->expect_wrong_shapes = expect.optional<std::int64_t>("wrong_shapes").value_or(0);
    c->expect_wrong_elements = expect.optional<std::int64_t>("wrong_elements").value_or(0);
    for (const auto& [key, value] : {std::pair{"wrong_shapes", c->expect_wrong_shapes},
                                     std::pair{"wrong_elements", c->expect_wrong_elements}}) {
      if (value < 0) expect.fail(key, "must be a count >= 0, got " + std::to_string(value));
    }
    if (c->expect_warnings && *c->expect_warnings < 0) {
      expect.fail("warnings", "must be a count >= 0, got " + std::to_string(*c->expect_warnings));
    }
    c->expect_placements = expect.optional<std::vector<std::string>>("placements");
    if (c->expect_placements && !c->reduce) {
      expect.fail("placements", "describes the result of `reduce`; a redistribution ends at "
                                "`to`");
    }
    c->expect_graph_breaks = expect.optional<std::int64_t>("graph_breaks");
    if (c->expect_graph_breaks && *c->expect_graph_breaks < 0) {
      expect.fail("graph_breaks",
                  "must be a count >= 0, got " + std::to_string(*c->expect_graph_breaks));
    }
    c->expect_distinct_plans = expect.optional<std::int64_t>("distinct_plans");
    if (c->expect_distinct_plans && *c->expect_distinct_plans < 1) {
      expect.fail("distinct_plans",
                  "must be a count >= 1 (1: every rank issues the same collectives), got " +
                      std::to_string(*c->expect_distinct_plans));
    }
  }
  c->steps = node.optional<std::vector<std::string>>("steps");
  if (c->steps) {
    for (const char* key : {"optimize", "planner"}) {
      if (node.has(key)) {
        node.fail(key, "has no effect with `steps`, which replaces planning: remove one");
      }
    }
  } else if (c->expect_wrong_shapes || c->expect_wrong_elements) {
    node.fail("expect", "wrong_shapes / wrong_elements describe a plan written out in `steps`; "
                        "a planned redistribution must be right");
  }

  // The mesh, flattens and placements must make sense before anything runs; what only the
  // planner or the executor can reject (e.g. S(0) -> P(sum)) is rejected when the case runs.
  check_runnable_mesh(node, c->mesh_spec);
  try {
    check_comm_string_names(c->mesh_spec.names);
  } catch (const meshgate::Error& err) {
    CaseNode mesh_node = node.child("mesh");
    reject_value(mesh_node, "names", err.what());
  }
  std::optional<DeviceMesh> mesh;
  try {
    mesh = c->mesh_spec.build();
  } catch (const meshgate::Error& err) {
    reject_value(node, "mesh", err.what());
  }
  try {
    for (const FlattenDims& f : c->flatten) mesh->slice(f.dims).flatten(f.name);
  } catch (const meshgate::Error& err) {
    reject_value(node, "flatten", err.what());
  }
  // The world runs up to the mesh's highest rank, over every row of the mesh (dim 0's groups
  // hold every rank of every row).
  std::int64_t lowest = std::numeric_limits<std::int64_t>::max();
  std::int64_t highest = 0;
  for (const auto& group : mesh->groups(std::int64_t{0})) {
    for (std::int64_t r : group) {
      lowest = std::min(lowest, r);
      highest = std::max(highest, r);
    }
  }
  c->case_ranks = case_world_size(node, highest);
  c->reference_rank = lowest;
  const std::size_t mesh_dims = mesh->shape().size();
  if (c->reduce) {
    // The op's result is gathered with full_tensor(): Replicate on every dim.
    c->to_text = placements_text(std::vector<std::string>(mesh_dims, "R"));
    if ((c->reduce->op == "t" || c->reduce->op == "mm") && c->shape.size() != 2) {
      CaseNode reduce = node.child("reduce");
      reduce.fail("op", c->reduce->op + " takes a 2-D tensor; tensor.shape " +
                            shape_text(c->shape) + " has " + std::to_string(c->shape.size()) +
                            " dims");
    }
    if (c->reduce->op == "mm") {
      // The second operand holds the tensor's transpose, placed as `other` says.
      CaseNode reduce = node.child("reduce");
      if (c->reduce->other.size() != mesh_dims) {
        reduce.fail("other", std::to_string(c->reduce->other.size()) + " placement(s) for a " +
                                 std::to_string(mesh_dims) + "-D mesh");
      }
      std::vector<std::string> model;
      for (const std::string& item : c->reduce->other) {
        std::optional<std::pair<std::int64_t, std::int64_t>> ss;
        try {
          ss = parse_strided(item);
        } catch (const std::runtime_error& err) {
          reduce.fail("other", err.what());
        }
        if (!ss && item.rfind("P", 0) == 0) {
          reduce.fail("other", "the second operand is built from the global tensor "
                               "(distribute_tensor), which takes no Partial placement");
        }
        model.push_back(ss ? "S(" + std::to_string(ss->first) + ")" : item);
      }
      try {
        const Shape transposed = {c->shape.at(1), c->shape.at(0)};
        DTensorSpec::create(*mesh, parse_placements(placements_text(model)), transposed,
                            static_cast<std::int64_t>(comm::element_size(c->dtype)));
      } catch (const meshgate::Error& err) {
        reduce.fail("other", err.what());
      }
    }
    if (c->reduce->dim && (*c->reduce->dim >= static_cast<std::int64_t>(c->shape.size()) ||
                           *c->reduce->dim < -static_cast<std::int64_t>(c->shape.size()))) {
      CaseNode reduce = node.child("reduce");
      reduce.fail("dim", "dim " + std::to_string(*c->reduce->dim) + " is outside the tensor's " +
                             std::to_string(c->shape.size()) + " dims");
    }
  }
  if (c->full_tensor) {
    const std::vector<std::string> all_r(mesh_dims, "R");
    const std::vector<Placement> want = parse_placements(placements_text(all_r));
    std::vector<Placement> got;
    try {
      got = parse_placements(c->to_text);
    } catch (const meshgate::Error&) {
    }
    if (got != want) {
      node.fail("to", "api full_tensor gathers to Replicate on every mesh dim: `to` must be " +
                          join(all_r));
    }
  }
  const auto es = static_cast<std::int64_t>(comm::element_size(c->dtype));
  for (const auto& [key, text] : {std::pair{"from", c->from_text}, std::pair{"to", c->to_text}}) {
    std::vector<Placement> placements;
    try {
      placements = parse_placements(text);
    } catch (const meshgate::Error& err) {
      reject_value(node, key, err.what());
    }
    try {
      DTensorSpec::create(*mesh, placements, c->shape, es);
    } catch (const meshgate::Error& err) {
      // Partial placements of different reduce ops are a spec DTensor refuses, as a user would
      // see it: a case that expects the refusal runs (and raises it), so that another
      // implementation is asked too. The spec's other checks stay input errors.
      bool mixed = false;
      try {
        check_no_mixed_partial_types(placements);
      } catch (const meshgate::Error&) {
        mixed = true;
      }
      if (!mixed || !expect_error) reject_value(node, key, err.what());
      if (!c->deferred_rejection) c->deferred_rejection = err;
    }
  }
  if (node.has("shard_order")) c->shard_order = parse_shard_order(node, *c);
  c->compile = node.optional<bool>("compile").value_or(false);
  if (c->compile && (c->steps || c->reduce)) {
    node.fail("compile", c->steps ? "has no effect with `steps`, which replaces planning: remove one"
                                  : "compiles a redistribution; a `reduce` case is not compiled: "
                                    "remove one");
  }
  if (c->expect_graph_breaks && !c->compile) {
    node.child("expect").fail("graph_breaks", "counts torch.compile's graph breaks: it needs "
                                              "`compile: true`");
  }
  if (node.has("torch_cost")) {
    if (expect_error) {
      node.fail("torch_cost", "prices a redistribution that runs; a case that expects a "
                              "rejection has none: remove one");
    }
    c->torch_cost = parse_torch_cost(node, [&](const std::vector<std::string>& items) {
      const std::vector<Placement> via = parse_placements(placements_text(items));
      DTensorSpec::create(*mesh, via, c->shape, es);
      std::vector<std::string> out;
      for (const Placement& p : via) out.push_back(to_string(p));
      return out;
    });
  }
  // Nothing more can be checked of a spec that does not exist.
  if (c->steps && !c->deferred_rejection) {
    const DTensorSpec src =
        DTensorSpec::create(*mesh, parse_placements(c->from_text), c->shape, es);
    try {
      steps_from_text(src, *c->steps);
    } catch (const meshgate::Error& err) {
      node.fail("steps", err.what());
    }
    // A plan that pairs ranks holding different shards in one collective would hang the mpi
    // and nccl backends (the threads backend raises): a value no backend can run.
    try {
      check_steps_pair_up(src, *c->steps);
    } catch (const meshgate::Error& err) {
      reject_value(node, "steps", err.what());
    }
  }
  try {
    if (!c->deferred_rejection) check_avg_dtype(*c, tensor, *mesh);
  } catch (const ValueRejection& rejection) {
    // A case that expects the rejection runs, and raises it then, so that another
    // implementation is asked whether it refuses too; otherwise the case cannot run.
    if (!expect_error) throw;
    c->deferred_rejection = Error(ErrorKind::runtime, rejection.what());
  }
  if (expect_node && !c->deferred_rejection) check_expect(*c, *expect_node, *mesh);

  nlohmann::json flat = nlohmann::json::array();
  for (const FlattenDims& f : c->flatten) flat.push_back(f.dims);
  c->params_json = {
      {"mesh", yaml_to_json(node.node()["mesh"])},
      {"flatten", flat},
      {"tensor", {{"shape", c->shape}, {"dtype", std::string(comm::to_string(c->dtype))}}},
      {"from", c->strided ? placements_text(c->from_written) : c->from_text},
      {"to", c->to_text},
      {"optimize", c->options.optimize},
      {"api", c->api_name()},
      {"planner", std::string(to_string(c->options.planner))}};
  if (c->steps) c->params_json["steps"] = *c->steps;
  if (c->torch_cost) c->params_json["torch_cost"] = torch_cost_request(*c->torch_cost);
  if (c->compile) c->params_json["compile"] = true;
  if (c->shard_order) c->params_json["shard_order"] = *c->shard_order;
  if (c->reduce) {
    c->params_json["reduce"] = {
        {"op", c->reduce->op},
        {"dim", c->reduce->dim ? nlohmann::json(*c->reduce->dim) : nlohmann::json()}};
    if (c->reduce->op == "mm") c->params_json["reduce"]["other"] = c->reduce->other;
  }
  return c;
}

}  // namespace meshgate::runner
