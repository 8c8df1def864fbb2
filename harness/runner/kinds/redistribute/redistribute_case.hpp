#pragma once
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
//
// The kind's files: parse.cpp and parse_checks.cpp read and validate the case, run.cpp runs it
// on meshgate's library, impl.cpp and impl_reduce.cpp hand it to another implementation and
// read its observables, judge.cpp holds the checks both paths share, torch_cost.cpp the
// `torch_cost:` key.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_kind.hpp"
#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "kinds/mesh_spec.hpp"
#include "kinds/redistribute/torch_cost.hpp"
#include "mesh/device_mesh.hpp"
#include "placement/placement.hpp"
#include "plan/plan.hpp"
#include "redistribute/redistribute.hpp"
#include "redistribute/reference.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_redistribute_case(CaseNode& node, bool expect_error);
const std::vector<std::string>& redistribute_case_keys();

namespace redistribute_kind {

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
  std::optional<double> scalar;    // what `add` adds
};

const std::vector<std::string>& reduce_ops();
// A reduction takes an optional `dim` (max_indices and min_indices a required one) and drops it.
bool is_reduction(const std::string& op);
// max_indices and min_indices: the indices of torch.max or torch.min over `dim`.
bool needs_dim(const std::string& op);
// add's scalar as the implementation gets it: a whole number as an integer, so that an integer
// tensor plus it stays integer, as in PyTorch.
nlohmann::json scalar_json(double scalar);
// The op as called, for messages: torch.sum on a DTensor, DTensor.t(), torch.mm on DTensors,
// DTensor.full_tensor().
std::string op_call(const std::string& op);

// Splits a placement list as written ("SS(0,2),S(0)" or items) at the commas outside brackets.
std::vector<std::string> split_placement_items(const std::vector<std::string>& items);
// `SS(d,k)`: PyTorch's _StridedShard(dim d, split_factor k). meshgate models no strided shard;
// the runner hands such a case to another implementation and maps it to S(d) where it only
// validates the case. Returns {d, k}, nullopt for another placement; throws a message for an
// SS(..) it cannot read.
std::optional<std::pair<std::int64_t, std::int64_t>> parse_strided(const std::string& item);
// A placement list as written in the case: one string, or a list of strings.
std::vector<std::string> read_placements_text(const YAML::Node& v, const CaseNode& at,
                                              std::string_view key);
// Items joined with commas, as parse_placements reads them.
std::string placements_text(const std::vector<std::string>& items);

std::string join(const std::vector<std::string>& items);
std::string shape_text(const Shape& s);
// Expected vs issued collectives, entry by entry.
std::string comm_diff(const std::vector<std::string>& want, const std::vector<std::string>& got);
// Problems joined with "; ", the message of a failed row.
std::string join_problems(const std::vector<std::string>& problems);

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

// What another implementation answered for the ranks of the mesh (impl.cpp reads it).
struct Observed {
  std::vector<HostTensor> outs;                 // per rank; empty outside the mesh
  std::vector<std::vector<std::string>> issued;  // per rank
  std::vector<std::int64_t> warnings;            // per rank
  bool warnings_observed = false;
  std::size_t distinct_plans = 0;
  std::vector<std::string> wrong_dtypes;
};

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
  MemoryEstimate memory_estimate() const override;  // parse.cpp

  // The mesh with its flattened dims registered (a fresh family, so registries do not leak
  // between cases), and the two specs. Errors are the library's: rejections.
  struct Specs {
    DeviceMesh mesh;
    DTensorSpec src;
    DTensorSpec dst;
  };
  Specs build() const;
  // The mesh alone, with its flattened dims.
  DeviceMesh build_mesh() const;

  // run.cpp
  Outcome run(RunContext& ctx) override;
  double time_calls(RunContext& ctx, std::int64_t calls) override;
  void release() override { states_.clear(); }

  // impl.cpp, impl_reduce.cpp
  std::optional<nlohmann::json> impl_request(const std::filesystem::path& dir,
                                             std::string& why) override;
  std::string api_name() const;
  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path& dir) override;
  void judge_compile(const nlohmann::json& observables, nlohmann::json& metrics,
                     std::vector<std::string>& problems) const;
  Outcome check_reduce(const nlohmann::json& observables, const std::filesystem::path& dir) const;

 private:
  std::vector<RankState> states_;

  // run.cpp
  std::optional<Outcome> skip_outcome() const;
  Outcome outcome_of(const RankResult& whole, bool perf) const;
  std::size_t distinct_comm_lists(const DTensorSpec& src, const DTensorSpec& dst,
                                  const DeviceMesh& mesh) const;
  static double timed(comm::Communicator& world, RankState& s,
                      std::span<const TransformStep> steps, std::int64_t calls);
  PlanOptions unmerged_options() const;
  std::vector<std::vector<std::int64_t>> all_groups(const DTensorSpec& src,
                                                    const DTensorSpec& dst) const;
  RankResult run_rank(int rank, comm::Communicator& world, const std::optional<PerfSpec>& perf);
  void run_in_mesh(int rank, comm::Communicator& world, const Specs& specs,
                   const std::vector<std::vector<std::int64_t>>& groups, RankResult& result,
                   Plan& unmerged, HostTensor& out, HostTensor& want);
  void time_rank(comm::Communicator& world, RankState& state, const Plan& unmerged,
                 const PerfSpec& perf, RankResult& result) const;

  // impl.cpp
  nlohmann::json mesh_request(const DeviceMesh& mesh, const std::vector<std::int64_t>& rank_map,
                              const std::vector<Placement>& src_placements,
                              const std::vector<Placement>& dst_placements) const;
  Observed read_observed(const nlohmann::json& observables, const std::filesystem::path& dir,
                         const DeviceMesh& mesh) const;
  void judge_observed_ranks(const Specs& specs, const Observed& seen,
                            std::vector<std::int64_t>& c) const;

 public:
  // judge.cpp: the checks every rank makes of its result, whoever computed it (meshgate's
  // executor in run_rank, another implementation in check_observables): the local shape against
  // the target shard `want`, the values against it, replicas bitwise equal. Collective over
  // `world`: every rank of the world calls it, those outside the mesh (in_mesh false, `out` and
  // `want` empty) only join the splits.
  static void judge_rank(comm::Communicator& world, const DeviceMesh& mesh, const DTensorSpec& dst,
                         bool in_mesh, const HostTensor& out, const HostTensor& want,
                         std::vector<std::int64_t>& c);
  // The reference rank's result against `expect`; `warnings` only when its implementation
  // reports them (meshgate's does).
  void check_reference(const Report& r, std::vector<std::int64_t>& c,
                       bool warnings_observed = true) const;
  // What the summed counts say, in words: empty when the case passes.
  std::vector<std::string> problems(const std::vector<std::int64_t>& c, const Report& r) const;
};

// parse_checks.cpp: checks of a parsed case against its mesh.
void check_reduce_case(CaseNode& node, RedistributeCase& c, const DeviceMesh& mesh);
void check_full_tensor(CaseNode& node, const RedistributeCase& c, std::size_t mesh_dims);
void check_specs(CaseNode& node, RedistributeCase& c, const DeviceMesh& mesh, bool expect_error);
void parse_compile(CaseNode& node, RedistributeCase& c);
void parse_case_torch_cost(CaseNode& node, RedistributeCase& c, const DeviceMesh& mesh,
                           bool expect_error);
void check_steps(CaseNode& node, const RedistributeCase& c, const DeviceMesh& mesh);
void check_expect(const RedistributeCase& c, CaseNode& expect, const DeviceMesh& mesh);
void check_avg_dtype(const RedistributeCase& c, const CaseNode& tensor, const DeviceMesh& mesh);
nlohmann::json parse_shard_order(CaseNode& node, const RedistributeCase& c);

}  // namespace redistribute_kind
}  // namespace meshgate::runner
