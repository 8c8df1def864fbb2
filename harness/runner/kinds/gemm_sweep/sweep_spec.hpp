#pragma once
// kind: gemm_sweep — what a case asks for (docs/cases.md, gemm_sweep keys), read and checked
// before anything runs, and the configuration each shape of the sweep gets.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_kind.hpp"
#include "gemm/gemm.hpp"
#include "gemm/sweep.hpp"

namespace meshgate::runner {

struct SweepSpec {
  std::uint64_t seed = 1;
  std::int64_t count = 0;
  gemm::ShapeSpace space;
  // Explicit shapes instead of draws (a reproduction of one failing shape): count is their
  // number and the configuration lists hold one value each.
  std::vector<gemm::SweepShape> shapes;
  std::vector<gemm::DType> dtypes;
  std::vector<gemm::Epilogue> epilogues;
  std::vector<bool> bias;
  std::vector<gemm::GemmLayout> layouts;
  std::vector<std::int64_t> x_offsets, w_offsets, bias_offsets;
  std::vector<std::int64_t> workspaces;
  std::vector<std::int64_t> split_ks;  // 0: the library's choice
  std::vector<gemm::Impl> impls;
  std::optional<std::string> checkpoint;  // folder for the progress file
  std::string case_id;
};

// One shape with its drawn configuration.
struct SweepPoint {
  std::int64_t index = 0;
  gemm::SweepShape shape;
  gemm::GemmProblem problem;  // the shape and configuration, without an impl
};

SweepSpec read_sweep_spec(CaseNode& node);
// The keys read_sweep_spec reads (the kind's KindEntry::keys).
const std::vector<std::string>& gemm_sweep_case_keys();

// Shape `index` and its configuration: a pure function of the spec and the index.
SweepPoint sweep_point(const SweepSpec& s, std::int64_t index);
// The case's resolved parameters (the result row's params); also what a checkpoint must match.
nlohmann::json sweep_params(const SweepSpec& s);
// The one-shape case, as one line of YAML flow, that reruns `point` with `impl` alone.
std::string repro_case(const SweepPoint& point, gemm::Impl impl);

}  // namespace meshgate::runner
