// A `reduce` case handed to another implementation: meshgate does not model the op, so the case
// is judged by signals alone (check_reduce below).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "external_impl.hpp"
#include "kinds/redistribute/redistribute_case.hpp"

namespace meshgate::runner::redistribute_kind {
namespace {

HostTensor to_host(const TensorFile& f) {
  HostTensor t;
  t.shape = f.shape;
  t.dtype = comm::parse_dtype(f.dtype);
  t.data.resize(f.bytes.size());
  if (!f.bytes.empty()) std::memcpy(t.data.data(), f.bytes.data(), f.bytes.size());
  return t;
}

// Relative to max(1, |reference|): the op reduces in another order on each side.
double tolerance_of(comm::DType dtype) {
  if (!comm::is_floating(dtype)) return 0;
  return dtype == comm::DType::f64   ? 1e-12
         : dtype == comm::DType::f32 ? 1e-5
         : dtype == comm::DType::f16 ? 2e-3
                                     : 1.6e-2;
}

// `observables[part][key]`, a list of strings, else ImplFailure in the protocol's words.
std::vector<std::string> rank_strings(const nlohmann::json& observables, const std::string& part,
                                      const std::string& key, const std::string& what) {
  const nlohmann::json& all = observables[part];
  if (!all.contains(key) || !all[key].is_array()) {
    throw ImplFailure("answered no list of " + what + " for rank " + key + " (" + part + "." +
                      key + ")");
  }
  std::vector<std::string> out;
  for (const nlohmann::json& item : all[key]) {
    if (!item.is_string()) {
      throw ImplFailure("answered " + part + "." + key + " with an entry that is not a string");
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

// What the ranks of the mesh answered for a `reduce` case, against the reference.
struct ReduceSeen {
  Report r;
  std::set<std::vector<std::string>> lists;
  std::vector<std::string> placements;  // the reference rank's result's
  std::int64_t wrong_shapes = 0, wrong_elements = 0, replica_ranks = 0;
  std::vector<std::string> wrong_dtypes;
  std::optional<HostTensor> first;
};

// One rank's answer: its comms, placements and output, compared with the reference.
void observe_reduce_rank(const nlohmann::json& observables, const std::filesystem::path& dir,
                         const nlohmann::json* warnings_json, int rank, bool is_reference,
                         const TensorFile& ref_file, const HostTensor& reference,
                         double tolerance, ReduceSeen& seen) {
  const std::string key = std::to_string(rank);
  const std::vector<std::string> issued =
      rank_strings(observables, "comms", key, "collectives");
  seen.lists.insert(issued);
  const std::vector<std::string> rank_placements =
      rank_strings(observables, "placements", key, "placements");
  if (!observables["outputs"].contains(key)) {
    throw ImplFailure("answered no output tensor for rank " + key + " (outputs." + key + ")");
  }
  const TensorFile file = read_tensor_file(observables["outputs"][key], dir, "outputs." + key);
  std::int64_t warnings = 0;
  if (warnings_json && warnings_json->contains(key) && (*warnings_json)[key].is_number_integer()) {
    warnings = (*warnings_json)[key].get<std::int64_t>();
  }
  if (is_reference) {
    seen.r.issued = issued;
    seen.r.local_shape = file.shape;
    seen.r.warnings = static_cast<std::size_t>(std::max<std::int64_t>(0, warnings));
    seen.placements = rank_placements;
  }
  if (file.dtype != ref_file.dtype) {
    seen.wrong_dtypes.push_back("rank " + key + " holds " + file.dtype);
    return;
  }
  const HostTensor out = to_host(file);
  if (out.shape != reference.shape) {
    ++seen.wrong_shapes;
    return;
  }
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    const double want = reference.get(i);
    const double got = out.get(i);
    const bool same = std::isnan(want)
                          ? std::isnan(got)
                          : std::abs(got - want) <= tolerance * std::max(1.0, std::abs(want));
    if (!same) ++seen.wrong_elements;
  }
  if (!seen.first) {
    seen.first = out;
  } else if (seen.first->data != out.data) {
    ++seen.replica_ranks;
  }
}

// The problems only a `reduce` case has: dtypes, shapes and values against the reference,
// replicas of full_tensor().
std::vector<std::string> reduce_problems(const ReduceSeen& seen, const TensorFile& ref_file,
                                         const HostTensor& reference) {
  std::vector<std::string> problems;
  if (!seen.wrong_dtypes.empty()) {
    problems.push_back("the outputs' dtype is not the reference's " + ref_file.dtype + ": " +
                       join(seen.wrong_dtypes));
  }
  if (seen.wrong_shapes) {
    problems.push_back(std::to_string(seen.wrong_shapes) +
                       " rank(s) ended with another shape than the reference's " +
                       shape_text(reference.shape));
  }
  if (seen.wrong_elements) {
    problems.push_back(std::to_string(seen.wrong_elements) +
                       " wrong element(s) against the single-process torch reference");
  }
  if (seen.replica_ranks) {
    problems.push_back(std::to_string(seen.replica_ranks) +
                       " rank(s) hold a full_tensor() that differs bitwise from the lowest "
                       "rank's");
  }
  return problems;
}

}  // namespace

// A `reduce` case, judged by signals alone: every mesh rank's full_tensor() of the op's result
// against the single-process torch reference the implementation computed from the global
// tensor (same dtype and shape; values within the dtype's tolerance, exact for integers),
// every rank's result bitwise equal to the lowest rank's, and `expect` (comms, placements,
// local_shape, warnings, distinct_plans) against what the implementation reported. Observables:
// {"comms", "outputs", "warnings"?, "placements": {rank: [..]}, "reference": TENSOR}.
Outcome RedistributeCase::check_reduce(const nlohmann::json& observables,
                                       const std::filesystem::path& dir) const {
  const DeviceMesh mesh = build_mesh();
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
  const HostTensor reference = to_host(ref_file);
  const double tolerance = tolerance_of(reference.dtype);
  const nlohmann::json* warnings_json =
      observables.contains("warnings") && observables["warnings"].is_object()
          ? &observables["warnings"]
          : nullptr;
  ReduceSeen seen;
  for (int rank = 0; rank < ranks(); ++rank) {
    if (!mesh.coordinate(rank)) continue;
    observe_reduce_rank(observables, dir, warnings_json, rank, rank == reference_rank, ref_file,
                        reference, tolerance, seen);
  }
  Report& r = seen.r;
  r.distinct_plans = seen.lists.size();

  Outcome o;
  o.plan = r.issued;
  o.metrics["collectives"] = r.issued.size();
  o.metrics["warnings"] = warnings_json ? nlohmann::json(r.warnings) : nlohmann::json();
  o.metrics["distinct_plans"] = r.distinct_plans;
  o.metrics["plans_differ_between_ranks"] = r.distinct_plans > 1;
  o.metrics["result_placements"] = seen.placements;
  o.metrics["meshgate_plan"] = "meshgate does not model " + op_call(reduce->op);
  o.metrics["wrong_elements"] = seen.wrong_elements;
  std::vector<std::string> problems = reduce_problems(seen, ref_file, reference);
  std::vector<std::int64_t> c(count_slots, 0);
  check_reference(r, c, warnings_json != nullptr);
  for (const std::string& p : this->problems(c, r)) problems.push_back(p);
  if (expect_placements && seen.placements != *expect_placements) {
    problems.push_back("expect.placements " + join(*expect_placements) + " but rank " +
                       std::to_string(reference_rank) + "'s result has " + join(seen.placements));
  }
  if (!problems.empty()) {
    o.status = Status::fail;
    o.message = join_problems(problems);
  }
  return o;
}

}  // namespace meshgate::runner::redistribute_kind
