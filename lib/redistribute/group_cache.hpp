#pragma once
// The groups a redistribution runs its collectives on: the world ranks of each group of a set of
// mesh dims, their names, and which sets a plan (or every coordinate's plan) needs. The
// Redistributor splits each group once and keeps it (group_cache.cpp, redistribute.hpp).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "mesh/device_mesh.hpp"
#include "placement/placement.hpp"
#include "plan/plan.hpp"

namespace meshgate {

// The world ranks of every group of `dims` of `mesh` over a world of `world_size` ranks: the
// ranks sharing their coordinates outside `dims` (and their row, on a mesh whose layout leaves
// ranks of its rank map to sub-meshes of their own), each group ordered row-major over `dims`
// (ascending), groups ordered by row and those outside coordinates. Ranks not in the mesh are
// left out.
std::vector<std::vector<int>> mesh_groups(const DeviceMesh& mesh,
                                          std::span<const std::int64_t> dims, int world_size);

// The "A+C" name of a group of mesh dims (indices on an unnamed mesh), in ascending order
// whatever the order of `dims`, as comm strings name groups.
std::string group_name(const DeviceMesh& mesh, std::span<const std::int64_t> dims);

// The sets of mesh dims (each ascending) that the collectives of `steps` run on, size-1
// groups left out, sorted and without duplicates.
std::vector<std::vector<std::int64_t>> collective_groups(std::span<const TransformStep> steps);

// The group dim sets that the plans of src -> dst under any of `options` use at ANY coordinate of
// the mesh, sorted and without duplicates. Plans depend on the rank's coordinate (uneven shards
// give different logical shapes, hence different merge decisions, docs/kinds.md, Planning), so
// ranks can need different groups; this list is the same on every rank, and splitting it in order
// (Redistributor::create_groups) before running keeps the world-wide splits paired. Errors as
// plan_redistribute.
std::vector<std::vector<std::int64_t>> groups_of_all_coordinates(
    const DTensorSpec& src, const DTensorSpec& dst, std::span<const PlanOptions> options);

// What a rank of `world` that is not in `mesh` calls while the mesh's ranks call
// create_groups(dim_sets) on executors that hold no group yet: the same world-wide splits in
// the same order, joining none of the groups. Collective over `world`. Error(value) when the
// rank is in the mesh or a mesh dim is outside it.
void join_group_splits(comm::Communicator& world, const DeviceMesh& mesh,
                       std::span<const std::vector<std::int64_t>> dim_sets);

}  // namespace meshgate
