// The redistribute kind on the threads backend: meshes whose ranks are not 0..n-1, meshes of
// several rows, and the validation of `expect` and `steps`.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "kinds/kind_test_support.hpp"
#include "runner.hpp"
#include "validate.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_redistribute_case(CaseNode& node, bool expect_error);

namespace {

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {{"redistribute", &parse_redistribute_case}};
  return k;
}

PlannedCase plan_one(const std::string& case_yaml) { return plan_one_case(case_yaml, kinds()); }

std::string input_error(const std::string& case_yaml) { return case_input_error(case_yaml, kinds()); }

// Before, the world had the mesh's size: the mesh's rank missing from it threw, and the others
// waited for it for ever (ranks 1..4, 0,1,2,5), or rank 0, outside the mesh, was rejected
// (4..7).
TEST(RedistributeKind, RanksOutsideTheMeshSitIdleAndTheMeshsLowestRankIsReported) {
  struct Mesh {
    const char* ranks;
    int world;
  };
  for (const Mesh& m : {Mesh{"\"1..4\"", 5}, Mesh{"[0, 1, 2, 5]", 6}, Mesh{"\"4..7\"", 8},
                        Mesh{"[3, 1, 0, 2]", 4}}) {
    SCOPED_TRACE(m.ranks);
    PlannedCase c = plan_one(
        std::string("{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B], ranks: ") +
        m.ranks +
        "}, flatten: [[A, B]], tensor: {shape: [8, 4]}, from: [S(0), S(1)], to: [R, R], "
        "expect: {comms: [\"all_gather(B, dim=1)\", \"all_gather(A, dim=0)\"], local_shape: "
        "[8, 4], warnings: 0}}");
    EXPECT_EQ(c.prepared->ranks(), m.world);
    const CaseRun run = execute_case(c, std::nullopt);
    ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
    EXPECT_EQ(run.outcome.plan,
              (std::vector<std::string>{"all_gather(B, dim=1)", "all_gather(A, dim=0)"}));
    EXPECT_EQ(run.outcome.metrics["bytes_per_rank"], 192);
  }
}

TEST(RedistributeKind, ExpectationsNameTheMeshsLowestRankWhenRankZeroIsOutside) {
  PlannedCase c = plan_one(
      "{name: a, kind: redistribute, mesh: {shape: [2], names: [A], ranks: \"3..4\"}, tensor: "
      "{shape: [5]}, from: [P(sum)], to: [S(0)], expect: {comms: [\"all_reduce(A, sum)\"], "
      "local_shape: [2], warnings: 1}}");
  const CaseRun run = execute_case(c, std::nullopt);
  ASSERT_EQ(run.outcome.status, Status::fail);
  EXPECT_EQ(run.outcome.message,
            "rank 3: collectives differ: expected [all_reduce(A, sum)], issued "
            "[reduce_scatter(A, sum, dim=0)]\n  #0: - all_reduce(A, sum)\n      + "
            "reduce_scatter(A, sum, dim=0); expect.local_shape [2] but rank 3 holds [3]; "
            "expect.warnings 1 but rank 3's plan has 0");
}

// A layout that leaves half its rank map to a second row: both rows redistribute, each on its
// own. Before, the world had 4 ranks, two of them from the second row, whose equal
// coordinates put them in the first row's groups, and the executor wrote past its buffers.
TEST(RedistributeKind, AMeshOfSeveralRowsRunsEveryRow) {
  for (const char* from : {"[S(0), S(1)]", "[P(sum), S(1)]", "[P(avg), R]"}) {
    SCOPED_TRACE(from);
    PlannedCase c = plan_one(std::string("{name: a, kind: redistribute, mesh: {layout: "
                                         "\"(2,2):(4,1)\", names: [A, B]}, tensor: {shape: [8, "
                                         "4]}, from: ") +
                             from + ", to: [R, R]}");
    EXPECT_EQ(c.prepared->ranks(), 8);
    const CaseRun run = execute_case(c, std::nullopt);
    EXPECT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  }
}

TEST(RedistributeKind, AMeshWhoseHighestRankNeedsTooManyRanksIsRejected) {
  EXPECT_NE(input_error("{name: a, kind: redistribute, mesh: {shape: [2], names: [A], ranks: [0, "
                        "5000000]}, tensor: {shape: [4]}, from: [R], to: [R]}")
                .find("key 'mesh': its highest rank is 5000000, so the case needs 5000001 ranks"),
            std::string::npos);
}

// Before, the rank with 0 elements returned at once and the other waited for ever (1 row), or
// the all_reduce read past the shorter rank's buffer (3 rows).
TEST(RedistributeKind, StepsPairingRanksOfDifferentShardsAreRejectedBeforeRunning) {
  for (const auto& [rows, counts] : {std::pair{1, "1 at coordinate [0] and 0 at [1]"},
                                     std::pair{3, "2 at coordinate [0] and 1 at [1]"}}) {
    const std::string error = input_error(
        "{name: a, kind: redistribute, mesh: {shape: [2], names: [A]}, tensor: {shape: [" +
        std::to_string(rows) +
        "]}, from: [S(0)], to: [R], steps: [\"all_reduce(A, sum)\"], expect: {wrong_shapes: "
        "2}}");
    EXPECT_NE(error.find("key 'steps': ValueError: step 'all_reduce(A, sum)' cannot run: the "
                         "ranks of one of its groups would pass different element counts, " +
                         std::string(counts)),
              std::string::npos)
        << error;
  }
  // PyTorch's padded all_gather of the same uneven shards pairs up and runs.
  PlannedCase c = plan_one(
      "{name: a, kind: redistribute, mesh: {shape: [2], names: [A]}, tensor: {shape: [3]}, "
      "from: [S(0)], to: [R], steps: [\"all_gather(A, dim=0)\"]}");
  const CaseRun run = execute_case(c, std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
}

// Before, each of these ran and was reported as a fail of the kernel.
TEST(RedistributeKind, ImpossibleExpectationsAreInputErrorsNamingTheEntry) {
  const std::string head =
      "{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B]}, flatten: [[A, B]], "
      "tensor: {shape: [4, 2]}, from: [P(sum), P(sum)], to: [R, R], expect: ";
  for (const auto& [expect, error] : {
           std::pair{"{warnings: -1}", "key 'expect.warnings': must be a count >= 0, got -1"},
           std::pair{"{local_shape: [4, -4]}",
                     "key 'expect.local_shape': size -4 of dim 1 is outside [0, 2], the "
                     "tensor's size there"},
           std::pair{"{local_shape: [5, 2]}",
                     "key 'expect.local_shape': size 5 of dim 0 is outside [0, 4]"},
           std::pair{"{local_shape: [4]}",
                     "key 'expect.local_shape': [4] has another rank than the tensor [4, 2]"},
           std::pair{"{comms: [\"allreduce(A)\"]}",
                     "key 'expect.comms': ValueError: step 'allreduce(A)': unknown kind "
                     "'allreduce'"},
           std::pair{"{comms: [\"all_reduce(A+B, sum)\", \"all_reduce(Z, sum)\"]}",
                     "key 'expect.comms': ValueError: step 'all_reduce(Z, sum)': 'Z' is not a "
                     "dim of the mesh"},
           std::pair{"{comms: [\"all_gather(A, dim=2)\"]}", "the tensor has 2 dims"},
           std::pair{"{comms: [\"chunk(A, dim=0)\"]}",
                     "'chunk(A, dim=0)' is a local step; comms lists the collectives issued"},
           std::pair{"{comms: [\"all_reduce(B+A, sum)\"]}",
                     "'all_reduce(B+A, sum)' is never issued as written: the executor writes "
                     "it 'all_reduce(A+B, sum)'"},
           std::pair{"{comms: [\"all_reduce(A+B,sum)\"]}", "is never issued as written"},
       }) {
    const std::string got = input_error(head + expect + "}");
    EXPECT_NE(got.find(error), std::string::npos) << expect << "\n" << got;
  }
  // The entry's own line and column: the second comm string.
  EXPECT_EQ(input_error(head + "{comms: [\"all_reduce(A+B, sum)\", \"all_reduce(Z, sum)\"]}}")
                .rfind("t.yaml:3:194: case 's/a': key 'expect.comms'", 0),
            0u);
  // Well-formed expectations still run.
  PlannedCase c = plan_one(head +
                           "{comms: [\"all_reduce(A+B, sum)\"], local_shape: [4, 2], warnings: "
                           "0}}");
  const CaseRun run = execute_case(c, std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
}

// Before, a dim named "A+B" issued "all_reduce(A+B, sum)" on its own, which reads as the merged
// group of A and B, and an empty name issued "all_reduce(, sum)".
TEST(RedistributeKind, DimNamesThatCommStringsCannotNameAreRejected) {
  for (const char* names : {"[\"A+B\", C]", "[\"\", C]", "[A, \"C,D\"]", "[\"A \", B]"}) {
    const std::string error =
        input_error(std::string("{name: a, kind: redistribute, mesh: {shape: [2, 2], names: ") +
                    names + "}, tensor: {shape: [4]}, from: [P(sum), P(sum)], to: [R, R]}");
    EXPECT_NE(error.find("key 'mesh.names': ValueError: mesh dim "), std::string::npos)
        << names << "\n"
        << error;
  }
}

// Before, these ran and were reported as a fail of the kernel ("rejected: RuntimeError: backend
// 'threads' does not support all_reduce(avg) for int64"), naming no file, line or key.
TEST(RedistributeKind, AnAvgReductionOfAnIntegerDtypeIsAnInputErrorNamingTheDtype) {
  const std::string head = "{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B]}, ";
  for (const char* body : {
           "tensor: {shape: [4], dtype: int64}, from: [P(avg), R], to: [R, R]}",
           "tensor: {shape: [4], dtype: int32}, from: [R, P(avg)], to: [R, S(0)]}",
           "flatten: [[A, B]], tensor: {shape: [4], dtype: int64}, from: [P(avg), P(avg)], to: "
           "[R, R]}",
       }) {
    const std::string error = input_error(head + body);
    EXPECT_NE(error.find("key 'tensor.dtype': the plan issues "), std::string::npos) << body << "\n"
                                                                                     << error;
    EXPECT_NE(error.find("avg reduction of int"), std::string::npos) << error;
  }
  // No avg collective: the integer dtype runs.
  for (const char* body : {
           "tensor: {shape: [4], dtype: int64}, from: [P(avg), R], to: [P(avg), S(0)]}",
           "tensor: {shape: [4], dtype: int64}, from: [R, R], to: [P(avg), R]}",
           "tensor: {shape: [4], dtype: int64}, from: [P(sum), P(sum)], to: [R, R]}",
       }) {
    PlannedCase c = plan_one(head + body);
    const CaseRun run = execute_case(c, std::nullopt);
    EXPECT_EQ(run.outcome.status, Status::pass) << body << "\n" << run.outcome.message;
  }
}

// 9 rows over A leave 5 rows on A=0 (two gathers) and 4 on A=1 (one merged gather). Before, no
// key could say that the ranks' plans differ, so a case claiming it asserted rank 0's only.
TEST(RedistributeKind, DistinctPlansCountsTheRanksDifferentListsOfCollectives) {
  const std::string head =
      "{name: a, kind: redistribute, mesh: {shape: [2, 2, 2], names: [A, B, C]}, flatten: [[B, "
      "C]], tensor: {shape: [9, 2]}, from: [S(0), S(0), S(0)], to: [S(0), R, R], expect: ";
  PlannedCase right = plan_one(head + "{distinct_plans: 2}}");
  const CaseRun pass = execute_case(right, std::nullopt);
  EXPECT_EQ(pass.outcome.status, Status::pass) << pass.outcome.message;
  PlannedCase wrong = plan_one(head + "{distinct_plans: 1}}");
  const CaseRun fail = execute_case(wrong, std::nullopt);
  EXPECT_EQ(fail.outcome.status, Status::fail);
  EXPECT_EQ(fail.outcome.message,
            "expect.distinct_plans 1 but the ranks' plans issue 2 different lists of collectives");
  EXPECT_NE(input_error(head + "{distinct_plans: 0}}")
                .find("key 'expect.distinct_plans': must be a count >= 1"),
            std::string::npos);
}

}  // namespace
}  // namespace meshgate::runner
