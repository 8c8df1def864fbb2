#pragma once
// The fsdp kind: a small model trained for a few steps under PyTorch's FSDP2 (`fully_shard`) on
// a world of ranks, judged against the same model trained in one process on the concatenated
// batch, and on the collectives each step issues (docs/kinds.md, "FSDP (fsdp)").
//
// meshgate has no FSDP of its own: its own run answers every case `skip`, saying so, as it does
// for the redistribute kind's reductions of a DTensor (it has no sharding propagation). Another
// implementation (--impl torch) computes the observables, and this file is the one judge of them.
//
// The kind's files: parse.cpp reads the case, run.cpp is meshgate's own run (a skip), impl.cpp
// makes the request and reads the answer's tensors and steps, judge.cpp judges them.
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
#include <utility>
#include <vector>

#include "case_kind.hpp"
#include "external_impl.hpp"
#include "kinds/case_values.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_fsdp_case(CaseNode& node, bool expect_error);
const std::vector<std::string>& fsdp_case_keys();

namespace fsdp_kind {

// The collectives a case may count; the adapter may report others (their names as it knows
// them), which are shown and summed but not expected by a case.
const std::vector<std::string>& counted_ops();

// The phases of one training step, in the order they run.
const std::vector<std::string>& phases();

// Bounds that keep a case a test rather than a workload: every rank holds the whole model
// at some point, and the single-process reference trains it on the whole batch.
inline constexpr std::int64_t kMaxWidth = 4096;
inline constexpr std::int64_t kMaxLayers = 64;
inline constexpr std::int64_t kMaxSteps = 1000;
inline constexpr std::int64_t kMaxBatch = 4096;
inline constexpr std::int64_t kMaxRanks = 64;

// Expected collective counts of one phase (or of a whole step): absent means not judged.
struct Counts {
  std::map<std::string, std::int64_t> ops;
  bool empty() const { return ops.empty(); }
};

Counts read_counts(CaseNode& expect, const std::string& key);
// "all_gather x2, all_reduce x1", or "none".
std::string counts_text(const std::map<std::string, std::int64_t>& counts);
std::string shape_text(const std::vector<std::int64_t>& shape);

// One rank's collectives of one phase of one step: op -> {count, bytes}.
struct PhaseComms {
  std::map<std::string, std::int64_t> count;
  std::map<std::string, std::int64_t> bytes;
  bool operator==(const PhaseComms&) const = default;
};
using StepComms = std::map<std::string, PhaseComms>;  // phase -> comms

// One rank's answered steps, checked for the protocol's form.
std::vector<StepComms> read_steps(const nlohmann::json& steps, const std::string& rank,
                                  std::int64_t expected_steps);
// A step's counts (or bytes) per op over its phases.
std::map<std::string, std::int64_t> total(const StepComms& step, bool bytes);
// The count of `op` in `counts` (0 when the implementation issued none).
std::int64_t count_of(const std::map<std::string, std::int64_t>& counts, const std::string& op);

struct Parameters {
  std::string dtype;
  std::map<std::string, std::vector<std::int64_t>> shapes;
  std::map<std::string, std::vector<double>> values;
  std::map<std::string, std::vector<unsigned char>> bits;
};

// The parameters of one rank (or the reference), read from their tensor files.
Parameters read_parameters(const nlohmann::json& tensors, const std::filesystem::path& dir,
                           const std::string& where);
std::string names_text(const std::set<std::string>& names);

// What the parameters of every rank showed against the reference (judge.cpp).
struct ParameterCheck {
  std::int64_t wrong = 0, elements = 0, ranks_differing = 0;
  double max_error = 0;
};

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

  int ranks() const override;

  std::int64_t parameter_count() const;

  MemoryEstimate memory_estimate() const override;

  // The case as the implementation is asked it, with what only the judging uses.
  nlohmann::json params() const override;

  Outcome run(RunContext&) override;

  double time_calls(RunContext&, std::int64_t) override;

  std::optional<nlohmann::json> impl_request(const std::filesystem::path&, std::string&) override;

  nlohmann::json request() const;

  // Observables: {"params": {rank: {name: TENSOR}}, "reference": {name: TENSOR},
  // "steps": {rank: [{phase: {op: {"count", "bytes"}}}]}}.
  Outcome check_observables(const nlohmann::json& observables,
                            const std::filesystem::path& dir) override;

 private:
  // judge.cpp: the steps of check_observables.
  ParameterCheck check_parameters(const nlohmann::json& observables,
                                  const std::filesystem::path& dir,
                                  std::vector<std::vector<StepComms>>& rank_steps,
                                  std::vector<std::string>& problems) const;
  void judge_steps(const std::vector<std::vector<StepComms>>& rank_steps, Outcome& o,
                   std::vector<std::string>& problems) const;
};

}  // namespace fsdp_kind
}  // namespace meshgate::runner
