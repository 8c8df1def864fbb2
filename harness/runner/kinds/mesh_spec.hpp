#pragma once
// The `mesh:` key that every mesh-based kind shares (mesh, collective, redistribute):
// {shape: [..] | layout: "..", names: [..], ranks: [..] | "8..15"}, read and validated once here.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "case_kind.hpp"
#include "layout/layout.hpp"
#include "mesh/device_mesh.hpp"

namespace meshgate::runner {

struct MeshSpec {
  std::optional<std::vector<std::int64_t>> shape;
  std::optional<Layout> layout;
  std::vector<std::string> names;
  std::vector<std::int64_t> ranks;  // empty: the reference's default

  // current_rank: the rank running the case (DeviceMesh::create's), default the first rank.
  DeviceMesh build(LayoutModel model = LayoutModel::one_level,
                   std::optional<std::int64_t> current_rank = std::nullopt) const;
};

// Reads node[key] ("mesh", or another key holding a mesh of the same form); InputError naming
// file:line, case and key for anything malformed, e.g. names whose count differs from the dims.
MeshSpec read_mesh_spec(CaseNode& node, std::string_view key = "mesh");
// The keys read_mesh_spec reads: `key` and its shape, layout, names and ranks (dotted).
std::vector<std::string> mesh_spec_keys(std::string_view key = "mesh");

// A dim name or a list of dim names.
std::vector<std::string> read_dim_names(const YAML::Node& value, const CaseNode& at,
                                        std::string_view key);

}  // namespace meshgate::runner
