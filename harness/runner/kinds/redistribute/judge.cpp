// The redistribute kind's judging, the same whoever computed the result: meshgate's executor
// (run.cpp) or another implementation (impl.cpp).
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kinds/redistribute/redistribute_case.hpp"

namespace meshgate::runner::redistribute_kind {

void RedistributeCase::judge_rank(comm::Communicator& world, const DeviceMesh& mesh,
                                  const DTensorSpec& dst, bool in_mesh, const HostTensor& out,
                                  const HostTensor& want, std::vector<std::int64_t>& c) {
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

void RedistributeCase::check_reference(const Report& r, std::vector<std::int64_t>& c,
                                       bool warnings_observed) const {
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

std::vector<std::string> RedistributeCase::problems(const std::vector<std::int64_t>& c,
                                                   const Report& r) const {
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

}  // namespace meshgate::runner::redistribute_kind
