#include "redistribute/group_cache.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "plan/comm_string.hpp"
#include "redistribute/redistribute.hpp"

namespace meshgate {

std::vector<std::vector<int>> mesh_groups(const DeviceMesh& mesh,
                                          std::span<const std::int64_t> dims, int world_size) {
  const std::vector<std::int64_t> shape = mesh.shape();
  std::vector<bool> in_run(shape.size(), false);
  for (std::int64_t d : dims) in_run[static_cast<std::size_t>(d)] = true;
  // A layout that does not cover its rank map leaves the other ranks to sub-meshes of their
  // own (the rows of DeviceMesh.mesh), where coordinates repeat: the row is part of the key.
  std::int64_t ranks_in_rows = 0;
  for (const auto& g : mesh.groups(std::int64_t{0})) ranks_in_rows += std::ssize(g);
  const bool several_rows = ranks_in_rows > mesh.size();
  // (row, outside coordinates) -> (row-major position over dims, rank)
  std::map<std::vector<std::int64_t>, std::vector<std::pair<std::int64_t, int>>> by_key;
  for (int r = 0; r < world_size; ++r) {
    const auto coord = mesh.coordinate(r);
    if (!coord) continue;
    std::vector<std::int64_t> key;
    if (several_rows) key.push_back(mesh.mesh_for_rank(r).values.front());
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (!in_run[i]) key.push_back((*coord)[i]);
    }
    std::int64_t pos = 0;
    for (std::int64_t d : dims) {
      pos = pos * shape[static_cast<std::size_t>(d)] + (*coord)[static_cast<std::size_t>(d)];
    }
    by_key[key].emplace_back(pos, r);
  }
  std::vector<std::vector<int>> groups;
  groups.reserve(by_key.size());
  for (auto& [key, members] : by_key) {
    std::sort(members.begin(), members.end());
    std::vector<int> g;
    g.reserve(members.size());
    for (const auto& m : members) g.push_back(m.second);
    groups.push_back(std::move(g));
  }
  return groups;
}

std::string group_name(const DeviceMesh& mesh, std::span<const std::int64_t> dims) {
  std::vector<std::int64_t> sorted(dims.begin(), dims.end());
  std::sort(sorted.begin(), sorted.end());
  return comm_group_name(mesh, sorted);
}

std::vector<std::vector<std::int64_t>> collective_groups(std::span<const TransformStep> steps) {
  std::vector<std::vector<std::int64_t>> out;
  for (const TransformStep& s : steps) {
    if (!is_collective(s.kind) || s.group_size <= 1) continue;
    std::vector<std::int64_t> dims = s.mesh_dims.to_vector();
    std::sort(dims.begin(), dims.end());
    out.push_back(std::move(dims));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::vector<std::int64_t>> groups_of_all_coordinates(
    const DTensorSpec& src, const DTensorSpec& dst, std::span<const PlanOptions> options) {
  const std::vector<std::int64_t> shape = src.mesh.shape();
  std::vector<std::vector<std::int64_t>> out;
  // Every coordinate, row-major; the cached planner shares the plans between the ranks of a
  // threads world, which all ask for the same coordinates.
  std::vector<std::int64_t> coord(shape.size(), 0);
  for (std::int64_t k = 0; k < src.mesh.size(); ++k) {
    for (const PlanOptions& o : options) {
      const std::shared_ptr<const Plan> plan = cached_plan_redistribute(src, dst, coord, o);
      for (auto& g : collective_groups(plan->steps)) out.push_back(std::move(g));
    }
    for (std::size_t i = shape.size(); i-- > 0;) {
      if (++coord[i] < shape[i]) break;
      coord[i] = 0;
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void join_group_splits(comm::Communicator& world, const DeviceMesh& mesh,
                       std::span<const std::vector<std::int64_t>> dim_sets) {
  if (mesh.coordinate(world.rank())) {
    throw Error(ErrorKind::value, "rank " + std::to_string(world.rank()) + " is in the mesh " +
                                      to_string(mesh.layout()) +
                                      ": it creates its groups with its Redistributor");
  }
  // The splits of create_groups on an executor that holds no group yet: each set of dims once,
  // in order of first appearance.
  std::set<std::vector<std::int64_t>> done;
  for (const std::vector<std::int64_t>& dims : dim_sets) {
    std::vector<std::int64_t> key = dims;
    std::sort(key.begin(), key.end());
    if (!done.insert(key).second) continue;
    for (std::int64_t d : key) {
      if (d < 0 || d >= static_cast<std::int64_t>(mesh.ndim())) {
        throw Error(ErrorKind::value, "mesh dim " + std::to_string(d) + " is outside the " +
                                          std::to_string(mesh.ndim()) + "-dim mesh " +
                                          to_string(mesh.layout()));
      }
    }
    world.split(mesh_groups(mesh, key, world.size()));
  }
}

// ---- Redistributor's groups: each set of mesh dims split once, kept for the executor's life

CountingCommunicator& Redistributor::split_group(std::vector<std::int64_t> key) {
  for (std::int64_t d : key) {
    if (d < 0 || d >= static_cast<std::int64_t>(mesh_.ndim())) {
      throw Error(ErrorKind::value, "mesh dim " + std::to_string(d) + " is outside the " +
                                        std::to_string(mesh_.ndim()) + "-dim mesh " +
                                        to_string(mesh_.layout()));
    }
  }
  std::unique_ptr<comm::Communicator> g = world_->split(mesh_groups(mesh_, key, world_->size()));
  if (!g) {
    throw Error(ErrorKind::runtime, "rank " + std::to_string(world_->rank()) +
                                        " is in no group of mesh dims " + group_name(mesh_, key));
  }
  auto counted =
      std::make_unique<CountingCommunicator>(std::move(g), group_name(mesh_, key), nullptr);
  return *groups_.emplace(std::move(key), std::move(counted)).first->second;
}

void Redistributor::create_groups(std::span<const std::vector<std::int64_t>> dim_sets) {
  for (const std::vector<std::int64_t>& dims : dim_sets) {
    std::vector<std::int64_t> key = dims;
    std::sort(key.begin(), key.end());
    if (!groups_.contains(key)) split_group(std::move(key));
  }
  groups_fixed_ = true;
}

CountingCommunicator& Redistributor::step_group(const TransformStep& s, CommLog* log) {
  CountingCommunicator& g = group(s.mesh_dims, log);
  // The buffers are sized for the step's group: another size would write past them.
  if (g.size() != s.group_size) {
    throw Error(ErrorKind::runtime,
                "rank " + std::to_string(world_->rank()) + ": the group of mesh dims " +
                    group_name(mesh_, s.mesh_dims) + " has " + std::to_string(g.size()) +
                    " ranks but step " + to_string(s, mesh_) + " runs on " +
                    std::to_string(s.group_size));
  }
  return g;
}

CountingCommunicator& Redistributor::group(std::span<const std::int64_t> dims, CommLog* log) {
  std::vector<std::int64_t> key(dims.begin(), dims.end());
  std::sort(key.begin(), key.end());
  auto it = groups_.find(key);
  CountingCommunicator* g = nullptr;
  if (it != groups_.end()) {
    g = it->second.get();
  } else if (groups_fixed_) {
    // A split here would be a world-wide collective that the other ranks never join.
    throw Error(ErrorKind::runtime,
                "rank " + std::to_string(world_->rank()) + " needs the group of mesh dims " +
                    group_name(mesh_, key) +
                    ", which was not created up front: pass every rank's groups to "
                    "create_groups (groups_of_all_coordinates)");
  } else {
    g = &split_group(std::move(key));
  }
  g->set_log(log);
  return *g;
}

}  // namespace meshgate
