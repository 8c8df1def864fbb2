// The redistribute kind handed to another implementation (docs/impl-protocol.md): the request,
// and the observables it answers, judged by the checks run() makes (judge.cpp). A `reduce` case
// is judged in impl_reduce.cpp.
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/threads_world.hpp"
#include "external_impl.hpp"
#include "kinds/redistribute/redistribute_case.hpp"

namespace meshgate::runner::redistribute_kind {
namespace {

// The observables' form: objects of rank -> value under "comms" and "outputs" (and
// "warnings", when answered), keyed by ranks of the mesh. Returns the warnings, or nullptr.
const nlohmann::json* check_observed_keys(const nlohmann::json& observables,
                                          const DeviceMesh& mesh) {
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
  return warnings_json;
}

}  // namespace

// The request of docs/impl-protocol.md: the case as written, the world size, the mesh's rank
// map (row-major over its shape) and every mesh rank's source local tensor, made exactly as
// run_rank makes it.
std::optional<nlohmann::json> RedistributeCase::impl_request(const std::filesystem::path& dir,
                                                             std::string& why) {
  if (steps) {
    why = "`steps:` replays a plan written out step by step through meshgate's executor; "
          "another implementation plans the redistribution itself";
    return std::nullopt;
  }
  // Placements without specs: a case whose rejection is deferred to its run (mixed reduce
  // ops) holds no valid spec, and is handed over as written.
  DeviceMesh mesh = build_mesh();
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
  nlohmann::json request = mesh_request(mesh, rank_map, src_placements, dst_placements);
  request["inputs"] = inputs;
  if (reduce) {
    request["reduce"] = {{"op", reduce->op},
                         {"dim", reduce->dim ? nlohmann::json(*reduce->dim) : nlohmann::json()}};
    if (reduce->op == "mm") request["reduce"]["other"] = reduce->other;
    if (reduce->scalar) request["reduce"]["scalar"] = scalar_json(*reduce->scalar);
    request["global"] = global_file;
  }
  if (torch_cost) request["torch_cost"] = torch_cost_request(*torch_cost);
  if (compile) request["compile"] = true;
  if (shard_order) request["shard_order"] = *shard_order;
  return request;
}

// The request's mesh, tensor, placements and planning options.
nlohmann::json RedistributeCase::mesh_request(const DeviceMesh& mesh,
                                              const std::vector<std::int64_t>& rank_map,
                                              const std::vector<Placement>& src_placements,
                                              const std::vector<Placement>& dst_placements) const {
  const std::vector<std::int64_t> mesh_shape = mesh.shape();
  const std::string dtype_name(comm::to_string(dtype));
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
      {"world", case_ranks}};
  return request;
}

std::string RedistributeCase::api_name() const {
  return full_tensor ? "full_tensor" : std::string(to_string(options.api));
}

// Judges another implementation's comms and outputs with the checks run() makes: judge_rank
// on a threads world of the case's ranks, check_reference on the reference rank's answer,
// expect.distinct_plans over every mesh rank's comm list.
Outcome RedistributeCase::check_observables(const nlohmann::json& observables,
                                            const std::filesystem::path& dir) {
  if (reduce) return check_reduce(observables, dir);
  const Specs specs = build();
  const DeviceMesh& mesh = specs.mesh;
  const Observed seen = read_observed(observables, dir, mesh);
  const std::string case_dtype(comm::to_string(dtype));

  Outcome o;
  const auto ref = static_cast<std::size_t>(reference_rank);
  Report r;
  r.issued = seen.issued[ref];
  r.local_shape = seen.outs[ref].shape;
  r.warnings = static_cast<std::size_t>(seen.warnings[ref]);
  r.distinct_plans = seen.distinct_plans;
  o.plan = r.issued;
  o.metrics["collectives"] = r.issued.size();
  o.metrics["warnings"] = seen.warnings_observed ? nlohmann::json(r.warnings) : nlohmann::json();
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
  if (!seen.wrong_dtypes.empty()) {
    o.status = Status::fail;
    o.message =
        "the outputs' dtype is not the tensor's " + case_dtype + ": " + join(seen.wrong_dtypes);
    return o;
  }

  std::vector<std::int64_t> c(count_slots, 0);
  check_reference(r, c, seen.warnings_observed);
  judge_observed_ranks(specs, seen, c);
  std::vector<std::string> problems = this->problems(c, r);
  if (torch_cost) judge_torch_cost(*torch_cost, observables, o.metrics, problems);
  if (compile) judge_compile(observables, o.metrics, problems);
  if (!problems.empty()) {
    o.status = Status::fail;
    o.message = join_problems(problems);
  }
  return o;
}

// What the implementation answered for every rank of the mesh, checked for the protocol's form.
Observed RedistributeCase::read_observed(const nlohmann::json& observables,
                                         const std::filesystem::path& dir,
                                         const DeviceMesh& mesh) const {
  const nlohmann::json* warnings_json = check_observed_keys(observables, mesh);
  const nlohmann::json& comms = observables["comms"];
  const nlohmann::json& outputs = observables["outputs"];
  const std::string case_dtype(comm::to_string(dtype));
  const int n = ranks();
  Observed seen;
  seen.warnings_observed = warnings_json != nullptr;
  seen.outs.resize(static_cast<std::size_t>(n));
  seen.issued.resize(static_cast<std::size_t>(n));
  seen.warnings.assign(static_cast<std::size_t>(n), 0);
  std::vector<HostTensor>& outs = seen.outs;
  std::vector<std::vector<std::string>>& issued = seen.issued;
  std::vector<std::int64_t>& rank_warnings = seen.warnings;
  std::set<std::vector<std::string>> lists;
  std::vector<std::string>& wrong_dtypes = seen.wrong_dtypes;
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
  seen.distinct_plans = lists.size();
  return seen;
}

// judge_rank on a threads world of the case's ranks, each holding what the implementation
// answered for it; the counts of all ranks are added to `c`.
void RedistributeCase::judge_observed_ranks(const Specs& specs, const Observed& seen,
                                            std::vector<std::int64_t>& c) const {
  const DeviceMesh& mesh = specs.mesh;
  const std::vector<std::int64_t> mesh_shape = mesh.shape();
  const std::vector<HostTensor>& outs = seen.outs;
  const int n = ranks();
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
}

// What torch.compile made of a `compile: true` case: its graph breaks and graphs as metrics
// (signals the gate tracks across releases), and expect.graph_breaks when the case says it.
void RedistributeCase::judge_compile(const nlohmann::json& observables, nlohmann::json& metrics,
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

}  // namespace meshgate::runner::redistribute_kind
