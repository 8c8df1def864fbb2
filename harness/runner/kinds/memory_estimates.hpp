#pragma once
// What the kinds share to estimate a case's memory (case_kind.hpp's MemoryEstimate) from its
// keys without building anything: sizes as doubles, which cannot overflow where the int64 sizes
// the library computes would.
#include <cstdint>
#include <vector>

#include "case_kind.hpp"
#include "kinds/mesh_spec.hpp"
#include "layout/int_tuple.hpp"
#include "layout/layout.hpp"

namespace meshgate::runner {

// The most ranks a case may run on: one thread (threads backend) or process (mpi, nccl) each.
inline constexpr double kMaxCaseRanks = 1 << 20;

// The product of a tuple's leaves (a layout's size) and a layout's cosize.
double size_estimate(const IntTuple& shape);
double cosize_estimate(const Layout& layout);

// The ranks a mesh spans, and the length of the rank map that holds them: the written ranks,
// or a layout mesh's default rank map (DeviceMesh::default_rank_count, at least its cosize).
double mesh_ranks_estimate(const MeshSpec& mesh);
double rank_map_estimate(const MeshSpec& mesh);
// The size of every dim of the mesh.
std::vector<double> mesh_dim_sizes(const MeshSpec& mesh);

// A ValueRejection on `mesh` for a case that runs on the mesh's ranks when it spans more than
// kMaxCaseRanks: called before the mesh is built, which would itself take memory per rank.
void check_runnable_mesh(const CaseNode& node, const MeshSpec& mesh);

// The world a case on a mesh whose highest rank is `highest_rank` runs on: every rank up to
// it, one thread or process each, also where a `ranks:` list leaves most of them out. A
// ValueRejection on `mesh` beyond kMaxCaseRanks.
int case_world_size(const CaseNode& node, std::int64_t highest_rank);

}  // namespace meshgate::runner
