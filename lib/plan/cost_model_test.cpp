#include "plan/cost_model.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace meshgate {
namespace {

using Dims = std::vector<std::int64_t>;

TEST(CostModel, BusFactorsOfNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_reduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_gather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::reduce_scatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_to_all, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::broadcast, 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::all_reduce, 1), 0.0);
  EXPECT_EQ(parse_collective_op("all_to_all"), CollectiveOp::all_to_all);
  EXPECT_THROW(parse_collective_op("allreduce"), Error);
}

TEST(CostModel, GroupPlacementFromLayouts) {
  const Topology t;  // 8 ranks per node
  EXPECT_EQ(place_group(parse_layout("8:1"), t), (GroupPlacement{8, 8, 1}));
  EXPECT_EQ(place_group(parse_layout("2:8"), t), (GroupPlacement{2, 1, 2}));
  EXPECT_EQ(place_group(parse_layout("(2,8):(8,1)"), t), (GroupPlacement{16, 8, 2}));
  EXPECT_EQ(place_group(parse_layout("4:2"), t), (GroupPlacement{4, 4, 1}));
  EXPECT_EQ(place_group(parse_layout("(4,2):(16,1)"), t), (GroupPlacement{8, 2, 4}));
  EXPECT_EQ(place_group(parse_layout("16:1"), t), (GroupPlacement{16, 8, 2}));
  EXPECT_EQ(place_group(parse_layout("1:0"), t), (GroupPlacement{1, 1, 1}));
  // A 16384-rank group: answered from its two modes.
  EXPECT_EQ(place_group(parse_layout("(128,128):(128,1)"), t), (GroupPlacement{16384, 8, 2048}));
}

TEST(CostModel, MonotoneInBytes) {
  const Topology t;
  for (CollectiveOp op :
       {CollectiveOp::all_reduce, CollectiveOp::all_gather, CollectiveOp::reduce_scatter,
        CollectiveOp::all_to_all, CollectiveOp::broadcast}) {
    for (const GroupPlacement& g :
         {GroupPlacement{8, 8, 1}, GroupPlacement{16, 8, 2}, GroupPlacement{64, 1, 64}}) {
      double last = 0;
      for (std::int64_t bytes = 0; bytes <= (std::int64_t{1} << 32); bytes = bytes * 4 + 1) {
        const double now = modeled_time(op, g, bytes, t);
        EXPECT_GE(now, last);
        last = now;
      }
      EXPECT_GT(modeled_time(op, g, 1 << 30, t), modeled_time(op, g, 1 << 20, t));
    }
    EXPECT_EQ(modeled_time(op, GroupPlacement{1, 1, 1}, 1 << 20, t), 0.0);
  }
}

TEST(CostModel, CrossingNodesIsNeverCheaper) {
  const Topology t;
  for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::all_gather,
                          CollectiveOp::reduce_scatter, CollectiveOp::all_to_all}) {
    for (std::int64_t bytes : {std::int64_t{8}, std::int64_t{1} << 20, std::int64_t{1} << 30}) {
      const double intra = modeled_time(op, GroupPlacement{8, 8, 1}, bytes, t);
      const double two = modeled_time(op, GroupPlacement{8, 4, 2}, bytes, t);
      const double eight = modeled_time(op, GroupPlacement{8, 1, 8}, bytes, t);
      EXPECT_LT(intra, two);
      EXPECT_LE(two, eight);
    }
  }
  // On a (8, 8) mesh over 64 ranks, dim 1 stays in a node and dim 0 spans 8 nodes.
  const std::vector<std::int64_t> shape = {8, 8};
  const DeviceMesh m = DeviceMesh::create(shape, {"dp", "tp"});
  const double tp = modeled_time(m, Dims{1}, CollectiveOp::all_reduce, 1 << 24);
  const double dp = modeled_time(m, Dims{0}, CollectiveOp::all_reduce, 1 << 24);
  EXPECT_LT(tp, dp);
  EXPECT_GT(dp / tp, 4.0);  // 150 GB/s NVLink-class against 25 GB/s network
  EXPECT_THROW(modeled_time(m, Dims{2}, CollectiveOp::all_reduce, 1), Error);
}

TEST(CostModel, MergedAllReduceMovesFewerBytes) {
  // Spec section 8: sequential all_reduces on 2x2x2 move 3S, a flattened one 1.75S.
  const std::vector<std::int64_t> shape = {2, 2, 2};
  const DeviceMesh m = DeviceMesh::create(shape, {"A", "B", "C"});
  const std::int64_t S = std::int64_t{1} << 30;
  Topology t;
  t.launch_overhead = 0;
  t.intra_latency = 0;
  const double seq = modeled_time(m, Dims{0}, CollectiveOp::all_reduce, S, t) +
                     modeled_time(m, Dims{1}, CollectiveOp::all_reduce, S, t) +
                     modeled_time(m, Dims{2}, CollectiveOp::all_reduce, S, t);
  const double flat = modeled_time(m, Dims{0, 1, 2}, CollectiveOp::all_reduce, S, t);
  EXPECT_NEAR(seq / flat, 3.0 / 1.75, 1e-9);
  // Nested gathers move the same volume as the flat one: 2x2 is S/4 + S/2 = 3S/4.
  const double nested = modeled_time(m, Dims{1}, CollectiveOp::all_gather, S / 2, t) +
                        modeled_time(m, Dims{0}, CollectiveOp::all_gather, S, t);
  EXPECT_NEAR(nested, modeled_time(m, Dims{0, 1}, CollectiveOp::all_gather, S, t), 1e-12);
}

}  // namespace
}  // namespace meshgate
