#include "plan/plan.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "core/error.hpp"

namespace meshgate {
namespace {

using Strings = std::vector<std::string>;
using Dims = std::vector<std::int64_t>;

DeviceMesh mesh_of(std::vector<std::int64_t> shape, std::vector<std::string> names) {
  return DeviceMesh::create(shape, std::move(names));
}

void flatten(const DeviceMesh& mesh, std::vector<std::string> dims,
             std::optional<std::string> name = std::nullopt) {
  mesh.slice(dims).flatten(std::move(name));
}

struct Case {
  DTensorSpec src;
  DTensorSpec dst;
};

Case spec(const DeviceMesh& mesh, std::string_view from, std::string_view to, Shape shape) {
  return {DTensorSpec::create(mesh, parse_placements(from), shape),
          DTensorSpec::create(mesh, parse_placements(to), shape)};
}

Plan plan(const DeviceMesh& mesh, std::string_view from, std::string_view to, Shape shape,
          PlanOptions options = {}, Dims coordinate = {}) {
  const Case c = spec(mesh, from, to, std::move(shape));
  return plan_redistribute(c.src, c.dst, coordinate, options);
}

Strings comms(const DeviceMesh& mesh, std::string_view from, std::string_view to, Shape shape,
              PlanOptions options = {}) {
  return comm_strings(plan(mesh, from, to, std::move(shape), options).steps, mesh);
}

Strings all_steps(const DeviceMesh& mesh, std::span<const TransformStep> steps) {
  Strings out;
  for (const TransformStep& s : steps) out.push_back(to_string(s, mesh));
  return out;
}

// ---- docs/kinds.md, Planning (the step table): each single-dim (src, dst) pair, 1-D mesh of 4

struct PairCase {
  const char* from;
  const char* to;
  const char* step;  // "" = no step; "!runtime" / "!assertion" / "!value" = that error
};

TEST(SingleDim, OpTable) {
  const DeviceMesh m = mesh_of({4}, {"A"});
  const std::vector<PairCase> table = {
      {"P(sum)", "R", "all_reduce(A, sum)"},
      {"P(avg)", "R", "all_reduce(A, avg)"},
      {"P(max)", "R", "all_reduce(A, max)"},
      {"P(min)", "R", "all_reduce(A, min)"},
      {"P(sum)", "S(0)", "reduce_scatter(A, sum, dim=0)"},
      {"P(avg)", "S(1)", "reduce_scatter(A, avg, dim=1)"},
      {"S(0)", "R", "all_gather(A, dim=0)"},
      {"S(1)", "R", "all_gather(A, dim=1)"},
      {"S(0)", "S(1)", "all_to_all(A, dim=0->1)"},
      {"S(1)", "S(0)", "all_to_all(A, dim=1->0)"},
      {"R", "S(0)", "chunk(A, dim=0)"},
      {"R", "S(1)", "chunk(A, dim=1)"},
      {"R", "P(sum)", "partial(A, sum)"},
      {"R", "P(avg)", "partial(A, avg)"},
      {"R", "P(max)", "partial(A, max)"},
      {"R", "P(min)", "partial(A, min)"},
      {"R", "P(product)", "!value"},
      {"S(0)", "P(sum)", "!runtime"},
      {"S(1)", "P(avg)", "!runtime"},
      {"P(sum)", "P(avg)", "!assertion"},
      {"P(max)", "P(min)", "!assertion"},
      {"P(avg)", "P(sum)", "!assertion"},
      {"R", "R", ""},
      {"S(0)", "S(0)", ""},
      {"P(sum)", "P(sum)", ""},
  };
  for (const PairCase& c : table) {
    SCOPED_TRACE(std::string(c.from) + " -> " + c.to);
    const std::string expected = c.step;
    if (!expected.empty() && expected[0] == '!') {
      try {
        plan(m, c.from, c.to, {8, 6});
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), expected == "!runtime"     ? ErrorKind::runtime
                            : expected == "!assertion" ? ErrorKind::assertion
                                                       : ErrorKind::value);
      }
      continue;
    }
    const Plan p = plan(m, c.from, c.to, {8, 6});
    EXPECT_EQ(all_steps(m, p.steps), expected.empty() ? Strings{} : Strings{expected});
  }
}

TEST(SingleDim, ShapesAndBytesOfUnevenShards) {
  const DeviceMesh m = mesh_of({4}, {"A"});
  // 13 rows over 4: the last rank holds 1; gathers pad every piece to 4.
  const Plan ag = plan(m, "S(0)", "R", {13, 2}, {}, {3});
  ASSERT_EQ(ag.steps.size(), 1u);
  EXPECT_EQ(ag.steps[0].input_shape, (Shape{1, 2}));
  EXPECT_EQ(ag.steps[0].output_shape, (Shape{13, 2}));
  EXPECT_EQ(ag.steps[0].logical_shape, (Shape{13, 2}));
  EXPECT_EQ(ag.steps[0].bytes, 16 * 2 * 4);
  const Plan rs = plan(m, "P(sum)", "S(0)", {2, 3}, {}, {2});
  EXPECT_EQ(rs.steps[0].output_shape, (Shape{0, 3}));
  EXPECT_EQ(rs.steps[0].bytes, 4 * 3 * 4);
  const Plan a2a = plan(m, "S(0)", "S(1)", {6, 10}, {}, {1});
  EXPECT_EQ(a2a.steps[0].input_shape, (Shape{2, 10}));
  EXPECT_EQ(a2a.steps[0].output_shape, (Shape{6, 3}));
  EXPECT_EQ(a2a.steps[0].bytes, 2 * 12 * 4);
  const Plan ar = plan(m, "P(sum)", "R", {5, 5});
  EXPECT_EQ(ar.steps[0].bytes, 100);
  EXPECT_EQ(plan(m, "R", "S(0)", {5, 5}).steps[0].bytes, 0);
}

TEST(SingleDim, PublicApiRejectsReplicateToPartial) {
  const DeviceMesh m = mesh_of({2, 2}, {"A", "B"});
  PlanOptions pub;
  pub.api = Api::public_;
  try {
    plan(m, "R,R", "R,P(sum)", {4}, pub);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    EXPECT_NE(std::string(e.what()).find("Can not redistribute from Replicate() to Partial(sum)"),
              std::string::npos);
  }
  // Already that Partial: allowed.
  EXPECT_EQ(comms(m, "P(sum),S(0)", "P(sum),R", {4}, pub), (Strings{"all_gather(B, dim=0)"}));
  EXPECT_EQ(all_steps(m, plan(m, "R,R", "R,P(sum)", {4}).steps), (Strings{"partial(B, sum)"}));
}

TEST(SingleDim, SizeOneDimsIssueNothingAndRaiseNothing) {
  const DeviceMesh m = mesh_of({1, 4}, {"A", "B"});
  const Plan p = plan(m, "S(0),P(sum)", "P(sum),R", {8});
  EXPECT_EQ(comm_strings(p.steps, m), (Strings{"all_reduce(B, sum)"}));
  EXPECT_EQ(p.unmerged.size(), 2u);
  EXPECT_NO_THROW(plan(m, "P(sum),R", "P(avg),R", {8}));
  EXPECT_NO_THROW(plan(m, "R,R", "P(product),R", {8}));
  EXPECT_TRUE(comm_strings(plan(m, "P(sum),R", "R,R", {8}).steps, m).empty());
}

// ---- docs/kinds.md, Planning: the greedy planner against hand-derived PyTorch plans ----

TEST(Greedy, SpecExampleNestedShardOverPartials) {
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  const Plan p = plan(m, "S(0),P(sum),P(sum)", "S(0),S(0),S(0)", {8, 4});
  EXPECT_EQ(all_steps(m, p.steps),
            (Strings{"all_reduce(C, sum)", "reduce_scatter(B, sum, dim=0)", "chunk(C, dim=0)"}));
}

TEST(Greedy, ReversePassReplicatesMisalignedNestedShards) {
  const DeviceMesh m = mesh_of({2, 2}, {"A", "B"});
  // (S0,S0) -> (R,S0): B's shard sits inside A's; gather B, gather A, chunk again on B.
  EXPECT_EQ(all_steps(m, plan(m, "S(0),S(0)", "R,S(0)", {8}).steps),
            (Strings{"all_gather(B, dim=0)", "all_gather(A, dim=0)", "chunk(B, dim=0)"}));
  // (R,S0) -> (S0,S0): gather B first, then chunk A and B in order.
  EXPECT_EQ(all_steps(m, plan(m, "R,S(0)", "S(0),S(0)", {8}).steps),
            (Strings{"all_gather(B, dim=0)", "chunk(A, dim=0)", "chunk(B, dim=0)"}));
  // (S0,S1) -> (S1,S0): misaligned on B, so gather there, all_to_all on A, chunk on B.
  EXPECT_EQ(all_steps(m, plan(m, "S(0),S(1)", "S(1),S(0)", {8, 8}).steps),
            (Strings{"all_gather(B, dim=1)", "all_to_all(A, dim=0->1)", "chunk(B, dim=0)"}));
  // Without any shard in the source, only the forward pass runs.
  EXPECT_EQ(all_steps(m, plan(m, "P(sum),P(sum)", "S(0),S(1)", {8, 8}).steps),
            (Strings{"reduce_scatter(A, sum, dim=0)", "reduce_scatter(B, sum, dim=1)"}));
}

TEST(Greedy, LogicalShapesFollowTheRankCoordinate) {
  const DeviceMesh m = mesh_of({2, 2}, {"A", "B"});
  const Case c = spec(m, "S(0),S(0)", "R,R", {5, 3});
  // Coordinate (1, 0): A's shard of 5 rows is rows 3..4 (2 rows), B's shard of that is 1 row.
  const StepList steps = greedy_transforms(c.src, c.dst, Dims{1, 0});
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].mesh_dims, (Dims{1}));
  EXPECT_EQ(steps[0].logical_shape, (Shape{2, 3}));
  EXPECT_EQ(steps[0].input_shape, (Shape{1, 3}));
  EXPECT_EQ(steps[0].output_shape, (Shape{2, 3}));
  EXPECT_EQ(steps[1].logical_shape, (Shape{5, 3}));
  EXPECT_EQ(steps[1].output_shape, (Shape{5, 3}));
  const StepList other = greedy_transforms(c.src, c.dst, Dims{0, 1});
  EXPECT_EQ(other[0].logical_shape, (Shape{3, 3}));
}

TEST(Patterns, FsdpHsdpTp) {
  // FSDP: parameters all_gathered on dp_shard, gradients reduce_scattered with avg.
  const DeviceMesh fsdp = mesh_of({8}, {"dp_shard"});
  EXPECT_EQ(comms(fsdp, "S(0)", "R", {1024, 512}), (Strings{"all_gather(dp_shard, dim=0)"}));
  EXPECT_EQ(comms(fsdp, "P(avg)", "S(0)", {1024, 512}),
            (Strings{"reduce_scatter(dp_shard, avg, dim=0)"}));
  // HSDP (dp_replicate, dp_shard): params gather on dp_shard only.
  const DeviceMesh hsdp = mesh_of({2, 4}, {"dp_replicate", "dp_shard"});
  EXPECT_EQ(comms(hsdp, "R,S(0)", "R,R", {64, 8}), (Strings{"all_gather(dp_shard, dim=0)"}));
  // Gradients: Partial(avg) on both -> (R, S0) is an all_reduce then a reduce_scatter in the
  // DTensor plan; with the shard dim outer it is a reduce_scatter then an all_reduce.
  EXPECT_EQ(comms(hsdp, "P(avg),P(avg)", "R,S(0)", {64, 8}),
            (Strings{"all_reduce(dp_replicate, avg)", "reduce_scatter(dp_shard, avg, dim=0)"}));
  const DeviceMesh hsdp_sr = mesh_of({4, 2}, {"dp_shard", "dp_replicate"});
  EXPECT_EQ(comms(hsdp_sr, "P(avg),P(avg)", "S(0),R", {64, 8}),
            (Strings{"reduce_scatter(dp_shard, avg, dim=0)", "all_reduce(dp_replicate, avg)"}));
  // TP (dp, tp): row-parallel output all_reduce, column gather, sequence-parallel all_to_all.
  const DeviceMesh tp = mesh_of({2, 4}, {"dp", "tp"});
  EXPECT_EQ(comms(tp, "S(0),P(sum)", "S(0),R", {16, 32}), (Strings{"all_reduce(tp, sum)"}));
  EXPECT_EQ(comms(tp, "S(0),S(1)", "S(0),R", {16, 32}), (Strings{"all_gather(tp, dim=1)"}));
  EXPECT_EQ(comms(tp, "S(0),P(sum)", "S(0),S(1)", {16, 32}),
            (Strings{"reduce_scatter(tp, sum, dim=1)"}));
  EXPECT_EQ(comms(tp, "R,S(1)", "R,S(0)", {16, 32}), (Strings{"all_to_all(tp, dim=1->0)"}));
}

// ---- docs/kinds.md, The flattened-mesh merge ----

TEST(Merge, PartialReplicatePartialOverFlattenedAC) {
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(m, {"A", "C"});
  const Plan p = plan(m, "P(sum),R,P(sum)", "R,R,R", {8, 6});
  EXPECT_EQ(comm_strings(p.unmerged, m), (Strings{"all_reduce(A, sum)", "all_reduce(C, sum)"}));
  EXPECT_EQ(comm_strings(p.steps, m), (Strings{"all_reduce(A+C, sum)"}));
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0].flattened_name, "A_C");
  EXPECT_EQ(p.steps[0].group_size, 4);
  EXPECT_EQ(p.runs, (std::vector<RunDecision>{
                        {StepKind::all_reduce, {0, 2}, {0, 1}, MergeReason::merged, "A_C"}}));
  EXPECT_TRUE(p.warnings.empty());
  // The merged all_reduce moves fewer bytes: cheaper under the model.
  EXPECT_LT(p.cost, modeled_time(m, Dims{0}, CollectiveOp::all_reduce, 192) * 2);
}

TEST(Merge, WholeRunOrNothing) {
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(m, {"A", "B"});
  const Plan p = plan(m, "P(sum),P(sum),P(sum)", "R,R,R", {8});
  EXPECT_EQ(comm_strings(p.steps, m),
            (Strings{"all_reduce(A, sum)", "all_reduce(B, sum)", "all_reduce(C, sum)"}));
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_EQ(p.warnings[0].reason, MergeReason::no_flattened_mesh);
  EXPECT_EQ(p.warnings[0].mesh_dims, (Dims{0, 1, 2}));
  EXPECT_NE(p.warnings[0].message.find("3 sequential all_reduce operations"), std::string::npos);
  EXPECT_NE(p.warnings[0].message.find("flatten mesh dimensions [\"A\", \"B\", \"C\"]"),
            std::string::npos);
}

TEST(Merge, NonAdjacentLikeKindCollectivesStaySeparate) {
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(m, {"A", "C"});
  flatten(m, {"A", "B", "C"});
  EXPECT_EQ(comms(m, "P(sum),S(0),P(sum)", "R,R,R", {8}),
            (Strings{"all_reduce(C, sum)", "all_gather(B, dim=0)", "all_reduce(A, sum)"}));
  EXPECT_EQ(comms(m, "P(sum),P(sum),P(sum)", "R,S(0),R", {8}),
            (Strings{"all_reduce(A, sum)", "reduce_scatter(B, sum, dim=0)", "all_reduce(C, sum)"}));
  EXPECT_TRUE(plan(m, "P(sum),S(0),P(sum)", "R,R,R", {8}).warnings.empty());
}

TEST(Merge, ReduceScatterAscendingAndEven) {
  const DeviceMesh m = mesh_of({2, 2}, {"A", "B"});
  flatten(m, {"A", "B"});
  EXPECT_EQ(comms(m, "P(sum),P(sum)", "S(0),S(0)", {8, 3}),
            (Strings{"reduce_scatter(A+B, sum, dim=0)"}));
  const Plan merged = plan(m, "P(sum),P(sum)", "S(0),S(0)", {8, 3}, {}, {1, 1});
  EXPECT_EQ(merged.steps[0].output_shape, (Shape{2, 3}));
  EXPECT_EQ(merged.steps[0].bytes, 8 * 3 * 4);
  // 6 rows over 4 ranks: nested 2,1,2,1 differs from flat 2,2,2,0.
  const Plan uneven = plan(m, "P(sum),P(sum)", "S(0),S(0)", {6, 3});
  EXPECT_EQ(comm_strings(uneven.steps, m),
            (Strings{"reduce_scatter(A, sum, dim=0)", "reduce_scatter(B, sum, dim=0)"}));
  ASSERT_EQ(uneven.warnings.size(), 1u);
  EXPECT_EQ(uneven.warnings[0].reason, MergeReason::uneven_tensor_shape);
  EXPECT_NE(uneven.warnings[0].message.find("not evenly divisible"), std::string::npos);
  // Spec 7.1: 4 elements on 2x3.
  const DeviceMesh m23 = mesh_of({2, 3}, {"A", "B"});
  flatten(m23, {"A", "B"});
  EXPECT_EQ(plan(m23, "P(sum),P(sum)", "S(0),S(0)", {4}).runs[0].reason,
            MergeReason::uneven_tensor_shape);
  // Handcrafted (1, 0) order.
  const Case c = spec(m, "P(sum),P(sum)", "S(0),S(0)", {8});
  StepList steps = greedy_transforms(c.src, c.dst);
  std::swap(steps[0], steps[1]);
  std::vector<RunDecision> runs;
  std::vector<PlanWarning> warnings;
  const auto out =
      merge_flattened_runs(m, c.src.placements, c.dst.placements, steps, &runs, &warnings);
  EXPECT_EQ(out, steps);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].reason, MergeReason::non_ascending_mesh_dims);
  EXPECT_EQ(warnings[0].mesh_dims, (Dims{0, 1}));
}

TEST(Merge, ReduceScatterEvennessAlsoHoldsForTheLocalTensor) {
  // (R,P,P) -> (S0,S0,S0) chunks on A first, so B and C scatter A's half. With 4 rows the
  // logical shape (4) divides by B*C but the 2 local rows do not: nested 1,0,1,0, flat 1,1,0,0.
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(m, {"B", "C"});
  const Plan uneven = plan(m, "R,P(sum),P(sum)", "S(0),S(0),S(0)", {4});
  EXPECT_EQ(comm_strings(uneven.steps, m),
            (Strings{"reduce_scatter(B, sum, dim=0)", "reduce_scatter(C, sum, dim=0)"}));
  ASSERT_EQ(uneven.warnings.size(), 1u);
  EXPECT_EQ(uneven.warnings[0].reason, MergeReason::uneven_tensor_shape);
  EXPECT_EQ(comms(m, "R,P(sum),P(sum)", "S(0),S(0),S(0)", {8}),
            (Strings{"reduce_scatter(B+C, sum, dim=0)"}));
}

TEST(Merge, ReduceScatterEvennessCountsOnlyTheRunsDims) {
  // On (1024,2,2) with B_C flattened, 8 rows divide by B*C = 4: the 1024-way A does not count.
  const DeviceMesh m = mesh_of({1024, 2, 2}, {"A", "B", "C"});
  flatten(m, {"B", "C"});
  const Plan q = plan(m, "R,P(sum),P(sum)", "R,S(0),S(0)", {8});
  EXPECT_EQ(comm_strings(q.steps, m), (Strings{"reduce_scatter(B+C, sum, dim=0)"}));
  // An intervening shard on A is already in the local tensor: 8 rows per A-shard divide;
  // 6 rows split 1,1,1,0 over B then C but 2,2,2,0 flat.
  const Case c = spec(m, "R,P(sum),P(sum)", "R,S(0),S(0)", {8192});
  StepList steps = greedy_transforms(c.src, c.dst);
  for (TransformStep& s : steps) s.logical_shape = s.input_shape = {8};
  EXPECT_EQ(merge_flattened_runs(m, c.src.placements, c.dst.placements, steps).size(), 1u);
  for (TransformStep& s : steps) s.logical_shape = s.input_shape = {6};
  EXPECT_EQ(merge_flattened_runs(m, c.src.placements, c.dst.placements, steps).size(), 2u);
  // The spec's example: the planner gives all_reduce(C), reduce_scatter(B), chunk(C).
  const Plan p = plan(m, "S(0),P(sum),P(sum)", "S(0),S(0),S(0)", {8192});
  EXPECT_EQ(comm_strings(p.steps, m),
            (Strings{"all_reduce(C, sum)", "reduce_scatter(B, sum, dim=0)"}));
}

TEST(Merge, AllGatherDescendingAndTheFixOf194457) {
  const DeviceMesh m = mesh_of({2, 2}, {"A", "B"});
  flatten(m, {"A", "B"});
  const Plan even = plan(m, "S(0),S(0)", "R,R", {8, 3});
  EXPECT_EQ(comm_strings(even.unmerged, m),
            (Strings{"all_gather(B, dim=0)", "all_gather(A, dim=0)"}));
  EXPECT_EQ(comm_strings(even.steps, m), (Strings{"all_gather(A+B, dim=0)"}));
  EXPECT_EQ(even.steps[0].logical_shape, (Shape{8, 3}));
  EXPECT_EQ(even.steps[0].output_shape, (Shape{8, 3}));
  // (5,3) on 2x2: nested 2/1/1/1, flat 2/2/1/0. PyTorch merges and loses row 4; we refuse.
  const Plan uneven = plan(m, "S(0),S(0)", "R,R", {5, 3});
  EXPECT_EQ(comm_strings(uneven.steps, m),
            (Strings{"all_gather(B, dim=0)", "all_gather(A, dim=0)"}));
  ASSERT_EQ(uneven.warnings.size(), 1u);
  EXPECT_EQ(uneven.warnings[0].reason, MergeReason::uneven_tensor_shape);
  // Handcrafted ascending order is refused.
  const Case c = spec(m, "S(0),S(0)", "R,R", {8});
  StepList steps = greedy_transforms(c.src, c.dst);
  std::swap(steps[0], steps[1]);
  std::vector<RunDecision> runs;
  merge_flattened_runs(m, c.src.placements, c.dst.placements, steps, &runs);
  EXPECT_EQ(runs[0].reason, MergeReason::non_ascending_mesh_dims);
}

// The all_gather guard compares the nested and flat torch.chunk splits exactly instead of
// testing divisibility, so uneven splits that place every element alike still merge.
TEST(Merge, UnevenAllGatherSplitsThatCoincideStillMerge) {
  const DeviceMesh m = mesh_of({2, 2}, {"A", "B"});
  flatten(m, {"A", "B"});
  // 3 rows: nested 2 -> 1,1 and 1 -> 1,0 is 1,1,1,0, as flat.
  const Plan three = plan(m, "S(0),S(0)", "R,R", {3});
  EXPECT_EQ(comm_strings(three.steps, m), (Strings{"all_gather(A+B, dim=0)"}));
  EXPECT_TRUE(three.warnings.empty());
  EXPECT_EQ(three.steps[0].output_shape, (Shape{3}));
  // Size-1 dims split nothing: 3 rows on 2x1 are 2,1 both ways (PyTorch merges too).
  const DeviceMesh m21 = mesh_of({2, 1}, {"A", "B"});
  flatten(m21, {"A", "B"});
  const Plan size_one = plan(m21, "S(0),S(0)", "R,R", {3});
  EXPECT_EQ(comm_strings(size_one.steps, m21), (Strings{"all_gather(A+B, dim=0)"}));
  EXPECT_TRUE(size_one.warnings.empty());
  // Empty shards: 2 rows over 2x2 are 1,0,1,0 nested, 1,1,0,0 flat.
  EXPECT_EQ(plan(m, "S(0),S(0)", "R,R", {2}).runs[0].reason, MergeReason::uneven_tensor_shape);
  EXPECT_EQ(comms(m, "S(0),S(0)", "R,R", {0}), (Strings{"all_gather(A+B, dim=0)"}));
}

// reduce_scatter follows the reference's rule (docs/kinds.md, uneven_tensor_shape): the outermost
// logical size must divide by the run's group, even where the nested and flat splits coincide, as
// PyTorch then issues the per-dim reduce_scatters and warns. Before, these merged without a
// warning.
TEST(Merge, ReduceScatterRefusesEveryShapeThatDoesNotDivide) {
  // 7 rows over 2x4: nested 4 -> 1,1,1,1 and 3 -> 1,1,1,0, as flat, yet 7 % 8 != 0.
  const DeviceMesh m24 = mesh_of({2, 4}, {"A", "B"});
  flatten(m24, {"A", "B"});
  const Plan seven = plan(m24, "P(sum),P(sum)", "S(0),S(0)", {7, 2});
  EXPECT_EQ(comm_strings(seven.steps, m24),
            (Strings{"reduce_scatter(A, sum, dim=0)", "reduce_scatter(B, sum, dim=0)"}));
  ASSERT_EQ(seven.warnings.size(), 1u);
  EXPECT_EQ(seven.warnings[0].reason, MergeReason::uneven_tensor_shape);
  EXPECT_EQ(seven.warnings[0].mesh_dims, (Dims{0, 1}));
  // 6 rows split 3,3 -> 1,1,1,0 twice, flat 1,1,1,1,1,1,0,0: refused by both rules.
  EXPECT_EQ(plan(m24, "P(sum),P(sum)", "S(0),S(0)", {6, 2}).runs[0].reason,
            MergeReason::uneven_tensor_shape);
  EXPECT_EQ(comms(m24, "P(sum),P(sum)", "S(0),S(0)", {8, 2}),
            (Strings{"reduce_scatter(A+B, sum, dim=0)"}));
  // 3 rows over 2x2: 1,1,1,0 both ways.
  const DeviceMesh m = mesh_of({2, 2}, {"A", "B"});
  flatten(m, {"A", "B"});
  const Plan three = plan(m, "P(sum),P(sum)", "S(0),S(0)", {3});
  EXPECT_EQ(three.runs[0].reason, MergeReason::uneven_tensor_shape);
  EXPECT_EQ(three.warnings.size(), 1u);
  // A size-1 dim counts with its size: 5 rows over A (1) and C (2) of 1x2x2 do not divide by 2.
  const DeviceMesh m122 = mesh_of({1, 2, 2}, {"A", "B", "C"});
  flatten(m122, {"A", "C"});
  const Plan five = plan(m122, "P(max),R,P(max)", "S(0),R,S(0)", {5});
  EXPECT_EQ(five.runs[0].reason, MergeReason::uneven_tensor_shape);
  EXPECT_EQ(comm_strings(five.steps, m122), (Strings{"reduce_scatter(C, max, dim=0)"}));
  EXPECT_EQ(five.warnings.size(), 1u);
  EXPECT_EQ(comms(m122, "P(max),R,P(max)", "S(0),R,S(0)", {6}),
            (Strings{"reduce_scatter(A+C, max, dim=0)"}));
}

// Another implementation's plan replayed as written: PyTorch's for (R,P,P) -> (S0,S0,S0) on
// 2x2x2 with [B,C] flattened and 4 rows merges the reduce_scatters that meshgate refuses.
TEST(StepsFromText, ReplaysAPlanAsWrittenWithThisRanksShapes) {
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(m, {"B", "C"});
  const Case c = spec(m, "R,P(sum),P(sum)", "S(0),S(0),S(0)", {4});
  const std::vector<std::string> texts = {"chunk(A, dim=0)", "reduce_scatter(B+C, sum, dim=0)"};
  const StepList steps = steps_from_text(c.src, texts, Dims{0, 1, 0});
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(all_steps(m, steps), (Strings{"chunk(A, dim=0)", "reduce_scatter(B+C, sum, dim=0)"}));
  EXPECT_EQ(steps[1].mesh_dims, (Dims{1, 2}));
  EXPECT_EQ(steps[1].group_size, 4);
  EXPECT_EQ(steps[1].flattened_name, "B_C");
  EXPECT_EQ(steps[1].input_shape, (Shape{2}));
  // B=1, C=0 is member 2 of the flat group: 2 rows split 1,1,0,0 leave it none (nested: 1).
  EXPECT_EQ(steps[1].output_shape, (Shape{0}));
  EXPECT_EQ(steps[1].bytes, 4 * 4);
  // all_gather trims to the logical shape at its outermost dim; all_to_all parses both dims.
  const Case g = spec(m, "S(0),S(0),S(1)", "R,R,R", {5, 6});
  const StepList ag =
      steps_from_text(g.src, std::vector<std::string>{"all_gather(A+B, dim=0)",
                                                      "all_to_all(C, dim=1->0)"});
  EXPECT_EQ(ag[0].logical_shape, (Shape{5, 6}));
  EXPECT_EQ(ag[0].output_shape, (Shape{5, 3}));
  EXPECT_EQ(ag[1].src_tensor_dim, 1);
  EXPECT_EQ(ag[1].dst_tensor_dim, 0);
  // Bad text names the step and what is wrong.
  for (const auto& [text, why] : {std::pair{"all_gather(D, dim=0)", "'D' is not a dim"},
                                  std::pair{"all_reduce(A, mean)", "unknown reduce op"},
                                  std::pair{"gather(A, dim=0)", "unknown kind 'gather'"},
                                  std::pair{"all_gather(A, dim=2)", "the tensor has 1 dims"},
                                  std::pair{"all_gather(A+A, dim=0)", "twice"},
                                  std::pair{"all_gather A", "kind(dims, ...)"}}) {
    try {
      steps_from_text(c.src, std::vector<std::string>{text});
      ADD_FAILURE() << text << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  }
}

// A written-out plan whose collective pairs up ranks holding different shards cannot run on
// any backend; the replay of PyTorch's merged reduce_scatter above still can (equal counts).
TEST(StepsFromText, StepsWhoseGroupsPassDifferentCountsAreRejected) {
  const DeviceMesh m1 = mesh_of({2}, {"A"});
  for (const auto& [rows, counts] : {std::pair{1, "1 at coordinate [0] and 0 at [1]"},
                                     std::pair{3, "2 at coordinate [0] and 1 at [1]"}}) {
    const Case c = spec(m1, "S(0)", "R", {rows});
    try {
      check_steps_pair_up(c.src, std::vector<std::string>{"all_reduce(A, sum)"});
      ADD_FAILURE() << rows << " rows were accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::value);
      EXPECT_NE(
          std::string(e.what()).find("step 'all_reduce(A, sum)' cannot run: the ranks of "
                                     "one of its groups would pass different element counts, " +
                                     std::string(counts)),
          std::string::npos)
          << e.what();
    }
  }
  // Even shards pair up, and so do padded gathers of uneven ones.
  EXPECT_NO_THROW(check_steps_pair_up(spec(m1, "S(0)", "R", {4}).src,
                                      std::vector<std::string>{"all_reduce(A, sum)"}));
  EXPECT_NO_THROW(check_steps_pair_up(spec(m1, "S(0)", "R", {3}).src,
                                      std::vector<std::string>{"all_gather(A, dim=0)"}));
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(m, {"B", "C"});
  EXPECT_NO_THROW(check_steps_pair_up(
      spec(m, "R,P(sum),P(sum)", "S(0),S(0),S(0)", {4}).src,
      std::vector<std::string>{"chunk(A, dim=0)", "reduce_scatter(B+C, sum, dim=0)"}));
  // A later step on a group whose ranks an earlier step left uneven: 5 rows chunked over A
  // leave 3 and 2, which an all_reduce over A+B would pair.
  EXPECT_THROW(
      check_steps_pair_up(spec(m, "R,P(sum),R", "S(0),R,R", {5}).src,
                          std::vector<std::string>{"chunk(A, dim=0)", "all_reduce(A+B, sum)"}),
      Error);
  EXPECT_THROW(check_steps_pair_up(spec(m, "R,R,R", "R,R,R", {5}).src,
                                   std::vector<std::string>{"all_gather(Z, dim=0)"}),
               Error);
}

TEST(Merge, SumAvgBecomesSumThenDivide) {
  const DeviceMesh m = mesh_of({2, 4}, {"A", "B"});
  flatten(m, {"A", "B"});
  const Plan p = plan(m, "P(sum),P(avg)", "R,R", {16});
  EXPECT_EQ(comm_strings(p.steps, m), (Strings{"all_reduce(A+B, sum)"}));
  EXPECT_EQ(p.steps[0].avg_scale, 4);
  EXPECT_EQ(p.steps[0].src, Placement::partial(ReduceOp::sum));
  const Plan avg = plan(m, "P(avg),P(avg)", "S(0),S(0)", {16});
  EXPECT_EQ(comm_strings(avg.steps, m), (Strings{"reduce_scatter(A+B, sum, dim=0)"}));
  EXPECT_EQ(avg.steps[0].avg_scale, 8);
  // avg on a size-1 dim only: still a sum (an avg over the group would divide by B's size).
  const DeviceMesh one = mesh_of({1, 2}, {"A", "B"});
  flatten(one, {"A", "B"});
  const Plan tiny = plan(one, "P(avg),P(sum)", "R,R", {16});
  EXPECT_EQ(comm_strings(tiny.steps, one), (Strings{"all_reduce(A+B, sum)"}));
  EXPECT_EQ(tiny.steps[0].avg_scale, 1);
  // max does not merge with anything but max.
  const Plan mx = plan(m, "P(max),P(max)", "R,R", {16});
  EXPECT_EQ(comm_strings(mx.steps, m), (Strings{"all_reduce(A+B, max)"}));
  EXPECT_EQ(mx.steps[0].avg_scale, 1);
}

TEST(Merge, DifferentTargetsDoNotMerge) {
  const DeviceMesh m = mesh_of({2, 2}, {"A", "B"});
  flatten(m, {"A", "B"});
  EXPECT_EQ(comms(m, "P(sum),P(sum)", "S(0),S(1)", {8, 8}),
            (Strings{"reduce_scatter(A, sum, dim=0)", "reduce_scatter(B, sum, dim=1)"}));
  EXPECT_TRUE(plan(m, "P(sum),P(sum)", "S(0),S(1)", {8, 8}).warnings.empty());
}

TEST(Merge, FlattenedMeshFoundByLayoutNotName) {
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(m, {"A", "C"}, "anything");
  const Plan p = plan(m, "P(sum),R,P(sum)", "R,R,R", {8});
  EXPECT_EQ(p.steps[0].flattened_name, "anything");
  EXPECT_EQ(find_flattened_dim(m, Dims{0, 2}), "anything");
  EXPECT_EQ(find_flattened_dim(m, Dims{0, 1}), std::nullopt);
  // Unnamed meshes have no flattened dims.
  const DeviceMesh unnamed = DeviceMesh::create(std::vector<std::int64_t>{2, 2});
  EXPECT_EQ(find_flattened_dim(unnamed, Dims{0, 1}), std::nullopt);
  EXPECT_EQ(comms(unnamed, "P(sum),P(sum)", "R,R", {4}),
            (Strings{"all_reduce(0, sum)", "all_reduce(1, sum)"}));
}

TEST(Merge, SizeOneDimsVanish) {
  const DeviceMesh m = mesh_of({2, 1, 4}, {"dp", "cp", "ep"});
  flatten(m, {"dp", "ep"});
  EXPECT_EQ(comms(m, "P(sum),P(sum),P(sum)", "R,R,R", {8}), (Strings{"all_reduce(dp+cp+ep, sum)"}));
  // cp_ep has ep's layout.
  const DeviceMesh n = mesh_of({2, 1, 4}, {"dp", "cp", "ep"});
  flatten(n, {"cp", "ep"});
  EXPECT_EQ(find_flattened_dim(n, Dims{2}), "cp_ep");
  EXPECT_EQ(find_flattened_dim(n, Dims{1, 2}), "cp_ep");
}

TEST(Merge, TwoLevelModelFindsNonContiguousFlattenedDims) {
  const std::vector<std::int64_t> shape = {2, 2, 2};
  const DeviceMesh m = DeviceMesh::create(shape, {"A", "B", "C"}, {}, LayoutModel::two_level);
  flatten(m, {"A", "C"});
  EXPECT_EQ(find_flattened_dim(m, Dims{0, 2}), "A_C");
  EXPECT_EQ(find_flattened_dim(m, Dims{0, 1}), std::nullopt);
  EXPECT_EQ(comms(m, "P(sum),R,P(sum)", "R,R,R", {8}), (Strings{"all_reduce(A+C, sum)"}));
  EXPECT_EQ(comms(m, "P(sum),P(sum),R", "R,R,R", {8}),
            (Strings{"all_reduce(A, sum)", "all_reduce(B, sum)"}));
}

TEST(Merge, DimsAreRelativeToTheCurrentSubmesh) {
  const DeviceMesh root = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(root, {"A", "C"});
  const DeviceMesh ac = root.slice(std::vector<std::string>{"A", "C"});
  const Plan p = plan(ac, "P(sum),P(sum)", "R,R", {8});
  EXPECT_EQ(comm_strings(p.steps, ac), (Strings{"all_reduce(A+C, sum)"}));
  EXPECT_EQ(p.steps[0].mesh_dims, (Dims{0, 1}));
  const DeviceMesh bc = root.slice(std::vector<std::string>{"B", "C"});
  EXPECT_EQ(comms(bc, "P(sum),P(sum)", "R,R", {8}),
            (Strings{"all_reduce(B, sum)", "all_reduce(C, sum)"}));
}

TEST(Merge, AllToAllIsNeverMerged) {
  const DeviceMesh m = mesh_of({2, 2}, {"A", "B"});
  flatten(m, {"A", "B"});
  const Case c = spec(m, "S(0),R", "S(1),R", {8, 8});
  StepList steps = greedy_transforms(c.src, c.dst);
  ASSERT_EQ(steps.size(), 1u);
  steps.push_back(steps[0]);
  steps[1].mesh_dims = {1};
  std::vector<RunDecision> runs;
  EXPECT_EQ(merge_flattened_runs(m, c.src.placements, c.dst.placements, steps, &runs), steps);
  EXPECT_TRUE(runs.empty());
}

TEST(Merge, KillSwitchAndOptimizeOff) {
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(m, {"A", "C"});
  const Strings sequential = {"all_reduce(A, sum)", "all_reduce(C, sum)"};
  PlanOptions off;
  off.optimize = false;
  EXPECT_EQ(comms(m, "P(sum),R,P(sum)", "R,R,R", {8}, off), sequential);
  const Plan p = plan(m, "P(sum),R,P(sum)", "R,R,R", {8}, off);
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_EQ(p.runs[0].reason, MergeReason::optimization_disabled);
  EXPECT_TRUE(p.warnings.empty());
  {
    const DisableTransformOptimization guard;
    EXPECT_FALSE(transform_optimization_enabled());
    EXPECT_EQ(comms(m, "P(sum),R,P(sum)", "R,R,R", {8}), sequential);
    const Case c = spec(m, "P(sum),R,P(sum)", "R,R,R", {8});
    EXPECT_EQ(cached_plan_redistribute(c.src, c.dst)->steps.size(), 2u);
  }
  EXPECT_TRUE(transform_optimization_enabled());
  EXPECT_EQ(comms(m, "P(sum),R,P(sum)", "R,R,R", {8}), (Strings{"all_reduce(A+C, sum)"}));
}

TEST(Merge, WarningsOncePerMeshDimsAndReason) {
  const DeviceMesh m = mesh_of({3, 2, 2}, {"X", "Y", "Z"});
  const Plan p = plan(m, "P(sum),P(sum),R", "R,R,R", {8});
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_EQ(first_time_warnings(m, p).size(), 1u);
  EXPECT_TRUE(first_time_warnings(m, p).empty());
  const Plan q = plan(m, "P(avg),P(avg),R", "R,R,R", {8});
  EXPECT_TRUE(first_time_warnings(m, q).empty());
  const Plan r = plan(m, "R,P(sum),P(sum)", "R,R,R", {8});
  EXPECT_EQ(first_time_warnings(m, r).size(), 1u);
}

TEST(Plan, CachedPlansAreTheSameObject) {
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  const Case c = spec(m, "P(sum),R,P(sum)", "R,R,R", {8, 6});
  const auto a = cached_plan_redistribute(c.src, c.dst);
  const auto b = cached_plan_redistribute(c.src, c.dst, Dims{0, 0, 0});
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(cached_plan_redistribute(c.src, c.dst, Dims{1, 0, 0}).get(), a.get());
  // Registering a flattened dim changes the plan, so it is part of the key.
  flatten(m, {"A", "C"});
  const auto merged = cached_plan_redistribute(c.src, c.dst);
  EXPECT_NE(merged.get(), a.get());
  EXPECT_EQ(merged->steps.size(), 1u);
  EXPECT_EQ(*merged, plan_redistribute(c.src, c.dst));
  EXPECT_EQ(cached_plan_redistribute(c.src, c.dst, Dims{0, 0, 0}).get(), merged.get());
  // Every other input is part of the key as well.
  PlanOptions greedy_off;
  greedy_off.optimize = false;
  const auto unmerged = cached_plan_redistribute(c.src, c.dst, {}, greedy_off);
  EXPECT_NE(unmerged.get(), merged.get());
  EXPECT_EQ(unmerged->steps.size(), 2u);
  const Case wider = spec(m, "P(sum),R,P(sum)", "R,R,R", {8, 7});
  EXPECT_NE(cached_plan_redistribute(wider.src, wider.dst).get(), merged.get());
  const Case to_shard = spec(m, "P(sum),R,P(sum)", "R,R,S(0)", {8, 6});
  EXPECT_NE(cached_plan_redistribute(to_shard.src, to_shard.dst).get(), merged.get());
  {
    const DisableTransformOptimization off;
    EXPECT_EQ(cached_plan_redistribute(c.src, c.dst)->steps.size(), 2u);
  }
  // An equal mesh of another family without the flattened dim plans without merging.
  const DeviceMesh twin = mesh_of({2, 2, 2}, {"A", "B", "C"});
  const Case on_twin = spec(twin, "P(sum),R,P(sum)", "R,R,R", {8, 6});
  EXPECT_EQ(cached_plan_redistribute(on_twin.src, on_twin.dst)->steps.size(), 2u);
  // A coordinate of the wrong length is still refused, all zeros or not.
  EXPECT_THROW(cached_plan_redistribute(c.src, c.dst, Dims{0, 0}), Error);
}

// Zeros given, then none: both spellings of the first rank's coordinate find one plan.
TEST(Plan, CachedPlanOfExplicitZerosIsTheDefaultCoordinates) {
  const DeviceMesh m = mesh_of({2, 4}, {"X", "Y"});
  const Case c = spec(m, "S(0),R", "R,R", {16, 3});
  const auto zeros = cached_plan_redistribute(c.src, c.dst, Dims{0, 0});
  EXPECT_EQ(cached_plan_redistribute(c.src, c.dst).get(), zeros.get());
  EXPECT_EQ(*zeros, plan_redistribute(c.src, c.dst));
}

TEST(Plan, SpecMismatchIsAnError) {
  const DeviceMesh m = mesh_of({2, 2}, {"A", "B"});
  const DeviceMesh other = mesh_of({4}, {"A"});
  const DTensorSpec a =
      DTensorSpec::create(m, {Placement::replicate(), Placement::replicate()}, {4});
  EXPECT_THROW(plan_redistribute(a, DTensorSpec::create(other, {Placement::replicate()}, {4})),
               Error);
  EXPECT_THROW(plan_redistribute(a, DTensorSpec::create(
                                        m, {Placement::replicate(), Placement::replicate()}, {5})),
               Error);
  EXPECT_THROW(plan_redistribute(a, a, Dims{2, 0}), Error);
}

TEST(Merge, PlannerLookupAgreesWithFindFlattenedDim) {
  // The planner reads flat modes directly; find_flattened_dim goes through layouts. Both must
  // find the same flattened dim for every run of all_reduces.
  std::mt19937 rng(7);
  const std::vector<std::string> names = {"A", "B", "C", "D"};
  int merged = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const std::size_t nd = 2 + rng() % 3;
    std::vector<std::int64_t> shape;
    for (std::size_t i = 0; i < nd; ++i) shape.push_back(1 + static_cast<std::int64_t>(rng() % 3));
    const DeviceMesh m = DeviceMesh::create(
        shape, std::vector<std::string>(names.begin(), names.begin() + static_cast<long>(nd)));
    for (int f = 0; f < 3; ++f) {
      std::vector<std::string> dims;
      for (std::size_t i = 0; i < nd; ++i) {
        if (rng() % 2) dims.push_back(names[i]);
      }
      if (dims.size() >= 2) {
        try {
          m.slice(dims).flatten("flat" + std::to_string(f));
        } catch (const Error&) {
        }
      }
    }
    std::string from, to;
    Dims run;
    for (std::size_t i = 0; i < nd; ++i) {
      const bool partial = rng() % 2;
      if (partial) run.push_back(static_cast<std::int64_t>(i));
      from += std::string(i ? "," : "") + (partial ? "P(sum)" : "R");
      to += std::string(i ? "," : "") + "R";
    }
    if (run.size() < 2) continue;
    const Plan p = plan(m, from, to, {8});
    const std::optional<std::string> found = find_flattened_dim(m, run);
    SCOPED_TRACE(to_string(m.layout()) + " " + from);
    ASSERT_EQ(p.steps.size(), found ? 1u : run.size());
    if (found) {
      EXPECT_EQ(p.steps[0].flattened_name, *found);
      ++merged;
    }
  }
  EXPECT_GT(merged, 20);
}

// ---- min_cost ----

TEST(MinCost, MergesSubRunsAndReorders) {
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(m, {"A", "C"});
  PlanOptions mc;
  mc.planner = Planner::min_cost;
  const Plan p = plan(m, "P(sum),P(sum),P(sum)", "R,R,R", {1 << 20}, mc);
  EXPECT_EQ(comm_strings(p.steps, m), (Strings{"all_reduce(A+C, sum)", "all_reduce(B, sum)"}));
  EXPECT_LT(p.cost, p.greedy_cost);
  const Plan g = plan(m, "P(sum),P(sum),P(sum)", "R,R,R", {1 << 20});
  EXPECT_EQ(g.cost, g.greedy_cost);
  EXPECT_EQ(g.greedy_cost, p.greedy_cost);
  // Only A_B flattened: sub-run A+B then C.
  const DeviceMesh n = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(n, {"A", "B"});
  EXPECT_EQ(comm_strings(plan(n, "P(sum),P(sum),P(sum)", "R,R,R", {1 << 20}, mc).steps, n),
            (Strings{"all_reduce(A+B, sum)", "all_reduce(C, sum)"}));
  EXPECT_EQ(comm_strings(plan(n, "P(sum),P(sum),P(sum)", "S(0),S(0),S(0)", {1 << 20}, mc).steps, n),
            (Strings{"reduce_scatter(A+B, sum, dim=0)", "reduce_scatter(C, sum, dim=0)"}));
}

TEST(MinCost, ReducesBeforeGatheringAndFusesAllReduceWithChunk) {
  PlanOptions mc;
  mc.planner = Planner::min_cost;
  // The spec's example: greedy all_reduces C in full, reduce_scatters B, then chunks C. Reducing
  // on C after B's scatter and fusing it with the chunk is a reduce_scatter on C; with B_C
  // flattened, one reduce_scatter.
  const DeviceMesh m = mesh_of({2, 2, 2}, {"A", "B", "C"});
  const Plan g = plan(m, "S(0),P(sum),P(sum)", "S(0),S(0),S(0)", {1 << 20});
  EXPECT_EQ(all_steps(m, g.steps),
            (Strings{"all_reduce(C, sum)", "reduce_scatter(B, sum, dim=0)", "chunk(C, dim=0)"}));
  const Plan p = plan(m, "S(0),P(sum),P(sum)", "S(0),S(0),S(0)", {1 << 20}, mc);
  EXPECT_EQ(all_steps(m, p.steps),
            (Strings{"reduce_scatter(B, sum, dim=0)", "reduce_scatter(C, sum, dim=0)"}));
  EXPECT_LT(p.cost, p.greedy_cost);
  EXPECT_EQ(p.steps.back().output_shape, (Shape{1 << 17}));
  flatten(m, {"B", "C"});
  const Plan f = plan(m, "S(0),P(sum),P(sum)", "S(0),S(0),S(0)", {1 << 20}, mc);
  EXPECT_EQ(all_steps(m, f.steps), (Strings{"reduce_scatter(B+C, sum, dim=0)"}));
  // With uneven shards local sizes, hence costs, differ between the ranks of a group, and all
  // of them must issue the same collectives: min_cost stays greedy there.
  const Plan uneven = plan(m, "S(0),P(sum),P(sum)", "S(0),S(0),S(0)", {6}, mc);
  EXPECT_EQ(all_steps(m, uneven.steps),
            (Strings{"all_reduce(C, sum)", "reduce_scatter(B, sum, dim=0)", "chunk(C, dim=0)"}));
  EXPECT_EQ(uneven.cost, uneven.greedy_cost);
  // (P,S0,P) -> RRR: greedy all_reduces C, gathers B, all_reduces A; reducing both before the
  // gather lets them merge over A_C.
  const DeviceMesh n = mesh_of({2, 2, 2}, {"A", "B", "C"});
  flatten(n, {"A", "C"});
  const Plan q = plan(n, "P(sum),S(0),P(sum)", "R,R,R", {1 << 20}, mc);
  EXPECT_EQ(comm_strings(q.steps, n), (Strings{"all_reduce(A+C, sum)", "all_gather(B, dim=0)"}));
  EXPECT_LT(q.cost, q.greedy_cost);
  EXPECT_EQ(q.steps[0].bytes, (1 << 19) * 4);
}

Shape final_shape(const Plan& p, const Shape& start) {
  return p.steps.empty() ? start : p.steps.back().output_shape.to_vector();
}

TEST(MinCost, NeverWorseThanGreedyOnGeneratedProblems) {
  std::mt19937 rng(20261121);
  const std::vector<std::string> all_names = {"A", "B", "C", "D"};
  const std::vector<Placement> choices = {Placement::shard(0), Placement::shard(1),
                                          Placement::replicate(), Placement::partial(ReduceOp::sum),
                                          Placement::partial(ReduceOp::avg)};
  int planned = 0;
  int improved = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const std::size_t nd = 1 + rng() % 4;
    std::vector<std::int64_t> shape;
    std::vector<std::string> names(all_names.begin(), all_names.begin() + static_cast<long>(nd));
    for (std::size_t i = 0; i < nd; ++i) shape.push_back(1 + static_cast<std::int64_t>(rng() % 4));
    const DeviceMesh m = DeviceMesh::create(shape, names);
    // Register some random subsets (in ascending order) as flattened dims.
    for (int f = 0; f < 2 && nd > 1; ++f) {
      std::vector<std::string> dims;
      for (std::size_t i = 0; i < nd; ++i) {
        if (rng() % 2) dims.push_back(names[i]);
      }
      if (dims.size() >= 2) {
        try {
          m.slice(dims).flatten();
        } catch (const Error&) {
        }
      }
    }
    std::vector<Placement> src, dst;
    for (std::size_t i = 0; i < nd; ++i) {
      src.push_back(choices[rng() % choices.size()]);
      dst.push_back(choices[rng() % 3]);  // shard or replicate targets: always plannable
    }
    const Shape tensor = {static_cast<std::int64_t>(rng() % 40),
                          static_cast<std::int64_t>(1 + rng() % 9)};
    std::vector<std::int64_t> coord;
    for (std::size_t i = 0; i < nd; ++i)
      coord.push_back(static_cast<std::int64_t>(rng()) % shape[i]);
    const DTensorSpec s = DTensorSpec::create(m, src, tensor);
    const DTensorSpec d = DTensorSpec::create(m, dst, tensor);
    PlanOptions mc;
    mc.planner = Planner::min_cost;
    const Plan greedy = plan_redistribute(s, d, coord);
    const Plan best = plan_redistribute(s, d, coord, mc);
    ++planned;
    SCOPED_TRACE(to_string(src) + " -> " + to_string(dst));
    EXPECT_LE(best.cost, greedy.cost);
    EXPECT_EQ(best.greedy_cost, greedy.cost);
    if (best.cost < greedy.cost) ++improved;
    const Shape start = local_shard(s, coord).shape;
    const Shape want = local_shard(d, coord).shape;
    EXPECT_EQ(final_shape(greedy, start), want) << [&] {
      std::string out = "mesh " + to_string(m.layout()) + " coord";
      for (auto x : coord) out += " " + std::to_string(x);
      out += " tensor " + std::to_string(tensor[0]) + "," + std::to_string(tensor[1]) + "\n";
      for (const TransformStep& st : greedy.steps) {
        out += to_string(st, m) + " in " + std::to_string(st.input_shape[0]) + "," +
               std::to_string(st.input_shape[1]) + " out " + std::to_string(st.output_shape[0]) +
               "," + std::to_string(st.output_shape[1]) + "\n";
      }
      return out;
    }();
    EXPECT_EQ(final_shape(best, start), want);
    EXPECT_EQ(final_shape(Plan{greedy.unmerged, greedy.unmerged, {}, {}, 0, 0}, start), want);
  }
  EXPECT_EQ(planned, 3000);
  EXPECT_GT(improved, 0);
}

// ---- scale ----

TEST(Scale, SixteenKRankFourDimMeshPlansWithoutEnumeratingRanks) {
  const DeviceMesh m = mesh_of({8, 16, 8, 16}, {"pp", "dp", "cp", "tp"});
  flatten(m, {"dp", "cp"});
  const Case c = spec(m, "R,P(avg),P(avg),S(1)", "R,R,R,R", {1 << 16, 4096});
  PlanOptions mc;
  mc.planner = Planner::min_cost;
  const auto start = std::chrono::steady_clock::now();
  Plan p;
  for (int i = 0; i < 100; ++i) p = plan_redistribute(c.src, c.dst, Dims{7, 15, 7, 15}, mc);
  const double per_plan =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 100;
  // min_cost reduces over dp+cp before gathering tp: a sixteenth of the bytes.
  EXPECT_EQ(comm_strings(p.steps, m), (Strings{"all_reduce(dp+cp, sum)", "all_gather(tp, dim=1)"}));
  EXPECT_EQ(p.steps[0].avg_scale, 128);
  EXPECT_EQ(p.steps[0].group_size, 128);
  EXPECT_LT(p.cost, p.greedy_cost);
  const Plan greedy = plan_redistribute(c.src, c.dst, Dims{7, 15, 7, 15});
  EXPECT_EQ(comm_strings(greedy.steps, m),
            (Strings{"all_gather(tp, dim=1)", "all_reduce(dp+cp, sum)"}));
  // Generous bound for sanitizer and debug builds; the benchmark holds the real target.
  EXPECT_LT(per_plan, 2e-3);
}

}  // namespace
}  // namespace meshgate
