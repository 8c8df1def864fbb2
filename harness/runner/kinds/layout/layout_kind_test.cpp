// The layout kind: input errors found at validation, naming file, line, case and key.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "external_impl.hpp"
#include "runner.hpp"
#include "kinds/kind_test_support.hpp"
#include "validate.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_layout_case(CaseNode& node, bool expect_error);

namespace {

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {{"layout", &parse_layout_case}};
  return k;
}

std::string input_error(const std::string& case_yaml) {
  PlannedCases planned = plan_case(case_yaml, kinds());
  EXPECT_EQ(planned.errors.size(), 1u);
  return planned.errors.empty() ? "" : planned.errors.front();
}

// `args` given but not a list is a wrong type at the value, not a missing key.
TEST(LayoutKind, ArgsThatAreNoListAreNamedAsSuch) {
  EXPECT_EQ(input_error("{name: a, kind: layout, op: size, args: \"8:1\", expect: 8}"),
            "t.yaml:3:45: case 's/a': key 'args': expected a list [layout] for size, got '8:1'");
  EXPECT_NE(input_error("{name: a, kind: layout, op: complement, args: {L: \"8:1\"}, expect: "
                        "\"1:0\"}")
                .find("key 'args': expected a list [layout, optional int] for complement, got a "
                      "mapping"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: layout, op: size, expect: 8}")
                .find("key 'args': is required: a list [layout] for size"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: layout, op: size, args: null, expect: 8}")
                .find("key 'args': is required: a list [layout] for size"),
            std::string::npos);
  EXPECT_TRUE(plan_case("{name: a, kind: layout, op: size, args: [\"8:1\"], expect: 8}", kinds())
                  .errors.empty());
}

// The ranks an op lists are compared structurally, so an expectation nested otherwise is a wrong
// type at `expect`, not a failure at run time.
TEST(LayoutKind, RankListsNestedOtherwiseThanTheResultAreInputErrors) {
  EXPECT_EQ(input_error("{name: a, kind: layout, op: all_ranks, args: [\"(2,3):(1,2)\"], "
                        "expect: 5}"),
            "t.yaml:3:75: case 's/a': key 'expect': expected ranks nested 1 list deep, as "
            "all_ranks gives them");
  EXPECT_NE(input_error("{name: a, kind: layout, op: global_ranks, args: [\"4:1\", 8], expect: "
                        "[0, 1, 2, 3, 4, 5, 6, 7]}")
                .find("expected ranks nested 2 lists deep, as global_ranks gives them"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: layout, op: remap, args: [\"(2,2):(2,1)\", [0, 1, 2, "
                        "3]], expect: [[0, 1], [2, 3]]}")
                .find("expected ranks nested 3 lists deep, as remap gives them"),
            std::string::npos);
  EXPECT_TRUE(plan_case("{name: a, kind: layout, op: remap, args: [\"2:2\", [10, 20, 30, 40]], "
                        "expect: [[10, 30], [20, 40]]}",
                        kinds())
                  .errors.empty());
}

// Another implementation's answer is judged by the same comparison as meshgate's own result:
// the request carries the parsed arguments in canonical CuTe text, a right result passes, a wrong
// one fails with expected against actual, and a result of another type is an ImplFailure.
TEST(LayoutKind, ObservablesOfAnotherImplementationAreJudgedLikeTheLibrarysResult) {
  PlannedCase planned = plan_one_case(
      "{name: a, kind: layout, op: coalesce, args: [\"(2, (1,6)):(1,(6,2))\"], expect: "
      "\"(2,6):(1,2)\"}",
      kinds());
  PreparedCase& prepared = *planned.prepared;
  std::string why;
  const std::optional<nlohmann::json> request = prepared.impl_request("/tmp", why);
  ASSERT_TRUE(request.has_value()) << why;
  EXPECT_EQ(*request, (nlohmann::json{{"op", "coalesce"}, {"args", nlohmann::json::array({"(2,(1,6)):(1,(6,2))"})}}));

  EXPECT_EQ(prepared.check_observables({{"result", "(2,6):(1,2)"}}, "/tmp").status, Status::pass);
  const Outcome wrong = prepared.check_observables({{"result", "((2,6)):((1,2))"}}, "/tmp");
  EXPECT_EQ(wrong.status, Status::fail);
  EXPECT_EQ(wrong.message, "coalesce: expected (2,6):(1,2), got ((2,6)):((1,2))");

  EXPECT_THROW(prepared.check_observables({{"result", 12}}, "/tmp"), ImplFailure);
  EXPECT_THROW(prepared.check_observables({{"result", "(2,6:(1,2)"}}, "/tmp"), ImplFailure);
  EXPECT_THROW(prepared.check_observables({{"layout", "(2,6):(1,2)"}}, "/tmp"), ImplFailure);
  EXPECT_THROW(prepared.check_observables(nlohmann::json::array(), "/tmp"), ImplFailure);
}

TEST(LayoutKind, ObservedResultsAreReadAsTheOpsResultType) {
  PlannedCase ranks = plan_one_case(
      "{name: a, kind: layout, op: global_ranks, args: [\"2:4\", 8], expect: [[0, 4], [1, 5], "
      "[2, 6], [3, 7]]}",
      kinds());
  EXPECT_EQ(ranks.prepared->check_observables({{"result", {{0, 4}, {1, 5}, {2, 6}, {3, 7}}}}, "/tmp")
                .status,
            Status::pass);
  EXPECT_EQ(ranks.prepared->check_observables({{"result", {{0, 4}, {1, 5}, {2, 6}, {7, 3}}}}, "/tmp")
                .status,
            Status::fail);
  // Ranks nested one list too shallow are not the op's result type.
  EXPECT_THROW(ranks.prepared->check_observables({{"result", {0, 4, 1, 5}}}, "/tmp"), ImplFailure);

  PlannedCase crd = plan_one_case(
      "{name: a, kind: layout, op: idx2crd, args: [5, \"(2,3)\"], expect: \"(1,2)\"}", kinds());
  EXPECT_EQ(crd.prepared->check_observables({{"result", "(1,2)"}}, "/tmp").status, Status::pass);
  EXPECT_EQ(crd.prepared->check_observables({{"result", 5}}, "/tmp").status, Status::fail);
  EXPECT_THROW(crd.prepared->check_observables({{"result", true}}, "/tmp"), ImplFailure);

  PlannedCase flag = plan_one_case(
      "{name: a, kind: layout, op: orthogonal, args: [\"(2,3):(3,2)\"], expect: false}", kinds());
  EXPECT_EQ(flag.prepared->check_observables({{"result", false}}, "/tmp").status, Status::pass);
  EXPECT_THROW(flag.prepared->check_observables({{"result", 0}}, "/tmp"), ImplFailure);
}

// An op of nanoseconds is timed in batches: a sample covers many calls and reports one call's
// time, far below what a single clock read resolves.
TEST(LayoutKind, ANanosecondOpIsTimedInBatchesOfManyCalls) {
  PlannedCase planned = plan_one_case(
      "{name: a, kind: layout, op: size, args: [\"(16,16,16):(256,16,1)\"], expect: 4096, "
      "perf: {warmup: 1, iters: 5}}",
      kinds());
  const CaseRun run = execute_case(planned, std::nullopt);
  ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  const nlohmann::json& time_s = run.outcome.metrics["time_s"];
  EXPECT_GT(time_s["calls_per_sample"].get<std::int64_t>(), 100);
  ASSERT_EQ(run.samples["time_s"][0].size(), 5u);
  for (const auto& t : run.samples["time_s"][0]) {
    EXPECT_GT(t.get<double>(), 1e-11);  // faster than a cycle: the op was optimised away
    EXPECT_LT(t.get<double>(), 1e-5);   // a size takes nanoseconds, not tens of microseconds
  }
}

}  // namespace
}  // namespace meshgate::runner
