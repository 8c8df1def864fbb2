// The mesh kind: input errors found at validation (naming file, line, case and key), and the
// classification of layout-model disagreements that the compatibility report is built from.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "external_impl.hpp"
#include "kinds/kind_test_support.hpp"
#include "runner.hpp"
#include "validate.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_mesh_case(CaseNode& node, bool expect_error);

namespace {

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {{"mesh", &parse_mesh_case}};
  return k;
}

PlannedCases plan(const std::string& case_yaml) {
  return plan_case(case_yaml, kinds());
}

std::string input_error(const std::string& case_yaml) {
  return case_input_error(case_yaml, kinds());
}

nlohmann::json disagreements(const std::string& case_yaml) {
  PlannedCases planned = plan(case_yaml);
  EXPECT_TRUE(planned.errors.empty()) << planned.errors.front();
  const CaseRun run = execute_case(planned.cases.at(0), std::nullopt);
  return run.outcome.metrics["model_disagreements"];
}

std::vector<std::string> classes(const nlohmann::json& items) {
  std::vector<std::string> out;
  for (const auto& d : items)
    out.push_back(d["class"].get<std::string>() + " " + d["observable"].get<std::string>());
  return out;
}

TEST(MeshKind, NamesThatDoNotMatchTheDimsAreInputErrors) {
  EXPECT_EQ(input_error("{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp]}, expect: "
                        "{shape: [2, 4]}}"),
            "t.yaml:3:56: case 's/a': key 'mesh.names': RuntimeError: mesh_shape and "
            "mesh_dim_names should have same length! Found len(mesh_dim_names): 1 and "
            "len(mesh_shape):2. (1 names for a mesh of 2 dims: give one name per dim)");
  // A value rejection: with expect_error the case passes as the expected rejection.
  PlannedCases planned = plan(
      "{name: a, kind: mesh, mesh: {layout: \"(2,2):(4,1)\", names: [a, b, c]}, "
      "expect_error: \"3 names for a mesh of 2 dims\"}");
  ASSERT_TRUE(planned.errors.empty()) << planned.errors.front();
  const CaseRun run = execute_case(planned.cases.at(0), std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
}

Outcome run_case(const std::string& case_yaml) {
  PlannedCases planned = plan(case_yaml);
  EXPECT_TRUE(planned.errors.empty()) << planned.errors.front();
  if (planned.cases.empty()) return {};
  return execute_case(planned.cases.at(0), std::nullopt).outcome;
}

// Where PyTorch rejects what a case file's mesh says, the case file's rejection opens with
// PyTorch's words right after the key, so an expect_error copied from PyTorch matches.
TEST(MeshKind, MeshRejectionsOpenWithPyTorchsWords) {
  EXPECT_EQ(input_error("{name: a, kind: mesh, mesh: {shape: [2, 2], names: [dp, dp]}, expect: "
                        "{shape: [2, 2]}}"),
            "t.yaml:3:56: case 's/a': key 'mesh.names': RuntimeError: Each mesh_dim_name must be "
            "unique. Found repeated mesh_dim_name in mesh_dim_names ('dp', 'dp') (give every dim "
            "a name of its own)");
  EXPECT_EQ(input_error("{name: a, kind: mesh, mesh: {layout: \"(2,4):(4,1,1)\"}, expect: "
                        "{shape: [2, 4]}}"),
            "t.yaml:3:42: case 's/a': key 'mesh.layout': ValueError: sizes (2, 4) and strides "
            "(4, 1, 1) don't match (layout '(2,4):(4,1,1)': shape and stride must have the same "
            "nesting, int for int and tuples of equal length)");
  EXPECT_EQ(input_error("{name: a, kind: mesh, mesh: {shape: [4], ranks: [1, 0, 1, 0]}, expect: "
                        "{shape: [4]}}"),
            "t.yaml:3:53: case 's/a': key 'mesh.ranks': ValueError: ranks list must not contain "
            "duplicate entries, got [0, 0, 1, 1] (DeviceMesh cannot have duplicate values, but "
            "found [1, 0, 1, 0]: list every rank once)");
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {shape: [2, 2], ranks: [0, 0, 1, 1]}, "
                        "expect: {shape: [2, 2]}}")
                .find("key 'mesh.ranks': RuntimeError: Each device mesh dimension should get only "
                      "one process group, but got 0 in [0, 1]!"),
            std::string::npos);
  for (const char* expected :
       {"mesh_shape and mesh_dim_names should have same length!",
        "RuntimeError: mesh_shape and mesh_dim_names should have same length! Found "
        "len(mesh_dim_names): 2 and len(mesh_shape):1."}) {
    EXPECT_EQ(run_case(std::string("{name: a, kind: mesh, mesh: {shape: [8], names: [dp, tp]}, "
                                   "expect_error: \"") +
                       expected + "\"}")
                  .status,
              Status::pass)
        << expected;
  }
  EXPECT_EQ(run_case("{name: a, kind: mesh, mesh: {layout: \"(2,4):(4,1,1)\"}, expect_error: "
                     "\"sizes (2, 4) and strides (4, 1, 1) don't match\"}")
                .status,
            Status::pass);
  EXPECT_EQ(run_case("{name: a, kind: mesh, mesh: {shape: [2, 2, 2], names: [dp, cp, tp]}, ops: "
                     "[{flatten: {dims: [cp, tp], name: dp}}], expect_error: \"dp already exists "
                     "for submesh of the DeviceMesh((dp=2, cp=2, tp=2)\"}")
                .status,
            Status::pass);
}

// A rank list that cannot fill the mesh is an input error at mesh.ranks, found before anything
// runs, in every kind that reads a mesh: a mesh given by its shape takes one rank per position
// (the ranks are PyTorch's mesh tensor); a mesh given by a layout takes any rank map that its
// mesh tensor and every dim's process groups fit; a rank is never negative.
TEST(MeshKind, RankListsThatCannotFillTheMeshAreInputErrors) {
  EXPECT_EQ(input_error("{name: a, kind: mesh, mesh: {shape: [2, 4], ranks: [0, 1, 2, 3, 4, 5, 6, "
                        "7, 8, 9]}, expect: {shape: [2, 4]}}"),
            "t.yaml:3:56: case 's/a': key 'mesh.ranks': RuntimeError: shape '[2, 4]' is invalid "
            "for input of size 10 (10 ranks for a mesh of 8 (shape 2x4): list one rank per mesh "
            "position, in row-major order)");
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {shape: [2, 4], ranks: [0, 1, 2, 3]}, "
                        "expect: {shape: [2, 4]}}")
                .find("key 'mesh.ranks': RuntimeError: shape '[2, 4]' is invalid for input of "
                      "size 4 (4 ranks for a mesh of 8 (shape 2x4)"),
            std::string::npos);
  EXPECT_EQ(input_error("{name: a, kind: mesh, mesh: {shape: [2, 2], ranks: [-1, 0, 1, 2]}, "
                        "expect: {shape: [2, 2]}}"),
            "t.yaml:3:57: case 's/a': key 'mesh.ranks': ValueError: Rank -1 is out of range. "
            "(rank -1 is negative: ranks are process indices 0, 1, 2, ...)");
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {shape: [2], ranks: \"-1..0\"}, expect: "
                        "{shape: [2]}}")
                .find("key 'mesh.ranks': expected a list of ranks or an inclusive range of ranks "
                      "from 0 up"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {layout: \"(2,2):(4,1)\", names: [a, b], "
                        "ranks: [0, 1, 2, 3, 4, 5, 6]}, expect: {shape: [2, 2]}}")
                .find("key 'mesh.ranks': RuntimeError: setStorage: "),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {layout: \"(2,2):(4,1)\", names: [a, b], "
                        "ranks: [0, 1, 2, 3, 4, 5, 6]}, expect: {shape: [2, 2]}}")
                .find(" ranks) (7 ranks for the layout (2,2):(4,1): 8 ranks, or any multiple of 8, "
                      "fit its mesh tensor and the process groups of every dim)"),
            std::string::npos);
  // The mesh tensor [[0,1],[3,4]] fits 5 ranks, but dim 0's groups run past them.
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {layout: \"(2,2):(3,1)\", names: [a, b], "
                        "ranks: \"0..4\"}, expect: {shape: [2, 2]}}")
                .find("5 ranks for the layout (2,2):(3,1): 6 ranks, or any multiple of 6, fit"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {layout: \"(2,2):(4,1)\", ranks: [0, 1, 2, "
                        "3]}, expect: {shape: [2, 2]}}")
                .find("key 'mesh.ranks': AssertionError: The rank map contains 4 element"),
            std::string::npos);

  // Value rejections: a case that expects the reference's error passes on the same text.
  EXPECT_EQ(run_case("{name: a, kind: mesh, mesh: {layout: \"(2,2):(4,1)\", ranks: [0, 1, 2, 3]}, "
                     "expect_error: AssertionError}")
                .status,
            Status::pass);
  EXPECT_EQ(run_case("{name: a, kind: mesh, mesh: {layout: \"2:2\", ranks: [0, 1, 2]}, "
                     "expect_error: \"out of bounds for storage of size 24\"}")
                .status,
            Status::pass);

  // Rank lists that are no permutation of 0..n-1, and a layout over more ranks than it spans.
  for (const char* mesh :
       {"{shape: [2, 4], names: [dp, tp], ranks: \"8..15\"}",
        "{shape: [2, 2], ranks: [1, 2, 3, 4]}", "{layout: \"(2,2):(4,1)\", ranks: \"0..15\"}",
        "{layout: \"2:2\", ranks: [10, 20, 30, 40]}"}) {
    const Outcome outcome =
        run_case(std::string("{name: a, kind: mesh, rank: 0, mesh: ") + mesh + ", expect: {}}");
    EXPECT_NE(outcome.status, Status::error) << mesh << ": " << outcome.message;
  }
}

// Without ranks, a layout mesh gets a rank map that every dim's groups fit: (2,2):(3,1) gets
// 0..5, whose dim-0 groups [0,3], [1,4], [2,5] need rank 5.
TEST(MeshKind, TheDefaultRankMapOfALayoutFitsEveryDimsGroups) {
  const Outcome outcome = run_case(
      "{name: a, kind: mesh, mesh: {layout: \"(2,2):(3,1)\", names: [a, b]}, expect: {groups: "
      "[[[0, 3], [1, 4], [2, 5]], [[0, 1], [2, 3], [4, 5]]], mesh_for_rank: {0: [[0, 1], [3, "
      "4]]}}}");
  EXPECT_EQ(outcome.status, Status::pass) << outcome.message << outcome.rejection.value_or("");
}

// A flatten name of the wrong type is not the default name, and expected groups or submeshes
// nested other than the observable they are compared with are input errors, not failures.
TEST(MeshKind, MistypedFlattenNamesAndRankListsAreInputErrors) {
  EXPECT_EQ(input_error("{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp, tp]}, ops: "
                        "[{flatten: {name: [x, y]}}], expect: {names: [dp_tp]}}"),
            "t.yaml:3:90: case 's/a': key 'ops.flatten': name is one dim name");
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp, tp]}, flatten: "
                        "[{dims: [dp, tp], name: {n: 1}}], expect: {names: [dp, tp]}}")
                .find("key 'flatten': name is one dim name"),
            std::string::npos);
  // name: null is _flatten(None): the dims joined by "_".
  EXPECT_EQ(run_case("{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp, tp]}, ops: "
                     "[{flatten: {name: null}}], expect: {names: [dp_tp]}}")
                .status,
            Status::pass);
  for (const char* groups : {"5", "[[0, 4], [1, 5]]", "[[[0, 4], [1, [5]]]]"}) {
    EXPECT_NE(input_error(std::string("{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp, "
                                      "tp]}, expect: {groups: ") +
                          groups + "}}")
                  .find("key 'expect.groups': expected "),
              std::string::npos)
        << groups;
  }
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp, tp]}, ops: "
                        "[{submeshes: tp}], expect: {submeshes: [0, 1, 2, 3]}}")
                .find("key 'expect.submeshes': expected one list of ranks per submesh"),
            std::string::npos);
}

// A layout mesh takes the sizes a shape mesh takes; a negative size would make the default rank
// map's length negative, and a 0-dim layout has nothing to group.
TEST(MeshKind, LayoutSizesBelowOneAreInputErrors) {
  EXPECT_EQ(input_error("{name: a, kind: mesh, mesh: {layout: \"-2:1\"}, expect: {shape: [2]}}"),
            "t.yaml:3:42: case 's/a': key 'mesh.layout': mesh sizes must be positive");
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {layout: \"(2,(0,2)):(1,(2,2))\"}, expect: "
                        "{shape: [2]}}")
                .find("key 'mesh.layout': mesh sizes must be positive"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {layout: \"():()\"}, expect: {shape: []}}")
                .find("key 'mesh.layout': a mesh has at least one dim"),
            std::string::npos);
}

// The default rank map of a layout is a multiple of every dim's complement span, which can be
// far above the cosize the memory estimate counts: refused before it is allocated.
TEST(MeshKind, ADefaultRankMapBeyondTheRankLimitIsAnInputError) {
  EXPECT_NE(input_error("{name: a, kind: mesh, mesh: {layout: \"(2,2,2,2):(853,421,211,101)\"}, "
                        "expect: {shape: [2, 2, 2, 2]}}")
                .find("key 'mesh.layout': the layout (2,2,2,2):(853,421,211,101) needs a rank map "
                      "of 15306114286 ranks"),
            std::string::npos);
  // The same bound as a written range: a rank map within it is built.
  EXPECT_EQ(run_case("{name: a, kind: mesh, mesh: {layout: \"(2,2):(5,1)\"}, expect: {shape: "
                     "[2, 2]}}")
                .status,
            Status::pass);
}

// The estimate counts the rank map the mesh is built with: for a layout without ranks, the
// smallest one its dims' process groups fit, which can exceed the cosize (2:2 has cosize 3,
// and its groups {0,2} and {1,3} need 4 ranks).
TEST(MeshKind, MemoryEstimateCountsTheDefaultRankMap) {
  const auto estimate_of = [](const std::string& mesh) {
    return plan_one_case("{name: a, kind: mesh, mesh: " + mesh + ", expect: {shape: [2]}}", kinds())
        .prepared->memory_estimate()
        .detail;
  };
  EXPECT_NE(estimate_of("{layout: \"2:2\"}").find("a mesh of 4 ranks"), std::string::npos)
      << estimate_of("{layout: \"2:2\"}");
  EXPECT_NE(
      estimate_of("{layout: \"2:2\", ranks: [0, 1, 2, 3, 4, 5, 6, 7]}").find("a mesh of 8 ranks"),
      std::string::npos);
  EXPECT_NE(estimate_of("{shape: [2]}").find("a mesh of 2 ranks"), std::string::npos);
}

TEST(MeshKind, ModelDifferencesNameKnownClasses) {
  EXPECT_NE(input_error("{name: a, kind: mesh, compare_models: true, model_differences: "
                        "[breakage], mesh: {shape: [2]}}")
                .find("key 'model_differences': unknown change class 'breakage'"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: mesh, model_differences: [relaxation], mesh: {shape: "
                        "[2]}, expect: {shape: [2]}}")
                .find("only means something with compare_models: true"),
            std::string::npos);
}

TEST(MeshKind, DisagreementsAreClassifiedFromOneLevelToTwoLevel) {
  // A 1-D mesh: the same ranks, but the dim's layout is 8:1 in one_level and (8):(1) in
  // two_level, where len() raises; == with init_device_mesh((8,)) flips.
  const nlohmann::json flat = disagreements(
      "{name: a, kind: mesh, compare_models: true, model_differences: [representation_change], "
      "mesh: {shape: [2, 4], names: [r, s]}, equal_to: {shape: [8], names: [dp]}, ops: "
      "[{flatten: {name: dp}}]}");
  EXPECT_EQ(classes(flat), (std::vector<std::string>{"representation_change == / hash with "
                                                     "equal_to",
                                                     "representation_change mesh._layout[0]"}));
  EXPECT_EQ(flat[0]["one_level"], "false");
  EXPECT_EQ(flat[0]["two_level"], "true");
  EXPECT_EQ(flat[1]["one_level"], "8:1 (int shape, len 1)");
  EXPECT_EQ(flat[1]["two_level"], "(8):(1) (tuple shape, len raises RuntimeError)");

  // Rejected by one_level only: a relaxation, whichever model is the case's own.
  for (const char* model : {"one_level", "two_level"}) {
    const nlohmann::json relaxed = disagreements(
        std::string("{name: a, kind: mesh, model: ") + model +
        ", compare_models: true, model_differences: [relaxation], mesh: {shape: [1, 8], names: "
        "[pp, dp]}, ops: [{slice: [dp, pp]}], expect_error: true}");
    EXPECT_EQ(classes(relaxed), (std::vector<std::string>{"relaxation configuration"})) << model;
    EXPECT_EQ(relaxed[0]["two_level"], "accepts") << model;
  }

  // Accepted by the set check, rejected by #172343's check_orthogonal: a new rejection.
  const nlohmann::json rejected = disagreements(
      "{name: a, kind: mesh, compare_models: true, model_differences: [new_rejection, "
      "representation_change], mesh: {layout: \"(2,2):(3,1)\", names: [a, b], ranks: \"0..5\"}}");
  EXPECT_EQ(classes(rejected).back(), "new_rejection check_orthogonal of #172343");
}
// The request hands the case over resolved (the default rank map, the asked ranks), another
// implementation's observables are judged by the same check as meshgate's own mesh, and
// observables of the wrong form or missing ones the case expects are ImplFailures.
TEST(MeshKind, ObservablesOfAnotherImplementationAreJudgedLikeTheLibrarysMesh) {
  PlannedCases planned = plan(
      "{name: a, kind: mesh, model: two_level, mesh: {shape: [2, 2, 2], names: [dp, cp, tp]}, "
      "ops: [{flatten: {dims: [dp, tp], name: dp_tp}}], expect: {layout: \"((2,2)):((4,1))\", "
      "names: [dp_tp], groups: [[[0, 1, 4, 5], [2, 3, 6, 7]]], coordinates: {3: [1], 2: null}, "
      "mesh_for_rank: {3: [2, 3, 6, 7]}}}");
  ASSERT_TRUE(planned.errors.empty()) << planned.errors.front();
  PreparedCase& prepared = *planned.cases.at(0).prepared;
  std::string why;
  const std::optional<nlohmann::json> request = prepared.impl_request("/tmp", why);
  ASSERT_TRUE(request.has_value()) << why;
  EXPECT_EQ((*request)["mesh"]["ranks"], nlohmann::json({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ((*request)["model"], "two_level");
  EXPECT_EQ((*request)["ops"][0]["flatten"]["name"], "dp_tp");
  EXPECT_EQ((*request)["observe"]["coordinates"], nlohmann::json({3, 2}));
  EXPECT_EQ((*request)["observe"]["submeshes"], false);

  const auto observed = [](nlohmann::json groups, nlohmann::json coordinate_of_2) {
    return nlohmann::json{{"layout", "((2,2)):((4,1))"},
                          {"shape", {4}},
                          {"names", {"dp_tp"}},
                          {"groups", std::move(groups)},
                          {"coordinates", {{"2", std::move(coordinate_of_2)}, {"3", {1}}}},
                          {"mesh_for_rank", {{"3", {2, 3, 6, 7}}}}};
  };
  const nlohmann::json right_groups = nlohmann::json::array({{{0, 1, 4, 5}, {2, 3, 6, 7}}});
  const Outcome pass = prepared.check_observables(observed(right_groups, nullptr), "/tmp");
  EXPECT_EQ(pass.status, Status::pass) << pass.message;

  const Outcome fail = prepared.check_observables(
      observed(nlohmann::json::array({{{0, 1, 2, 3}, {4, 5, 6, 7}}}), nullptr), "/tmp");
  EXPECT_EQ(fail.status, Status::fail);
  EXPECT_EQ(fail.message,
            "groups: expected [[[0,1,4,5],[2,3,6,7]]], got [[[0,1,2,3],[4,5,6,7]]]");
  const Outcome coordinate = prepared.check_observables(observed(right_groups, {0}), "/tmp");
  EXPECT_EQ(coordinate.message, "coordinates of rank 2: expected null, got [0]");

  nlohmann::json flat_groups = observed(nlohmann::json::array({0, 1, 4, 5}), nullptr);
  EXPECT_THROW(prepared.check_observables(flat_groups, "/tmp"), ImplFailure);
  nlohmann::json bad_layout = observed(right_groups, nullptr);
  bad_layout["layout"] = "((2,2)):((4,1)";
  EXPECT_THROW(prepared.check_observables(bad_layout, "/tmp"), ImplFailure);
  nlohmann::json missing_rank = observed(right_groups, nullptr);
  missing_rank["coordinates"].erase("3");
  try {
    prepared.check_observables(missing_rank, "/tmp");
    ADD_FAILURE() << "a missing coordinate the case expects must be an ImplFailure";
  } catch (const ImplFailure& e) {
    EXPECT_EQ(std::string(e.what()),
              "answered no 'coordinates' of rank 3, which the case expects");
  }
  nlohmann::json no_groups = observed(right_groups, nullptr);
  no_groups.erase("groups");
  EXPECT_THROW(prepared.check_observables(no_groups, "/tmp"), ImplFailure);
  EXPECT_THROW(prepared.check_observables("garbage", "/tmp"), ImplFailure);
}

// A case of either layout model is handed over with the models whose answer the runner can
// judge; an implementation answers which one it computed (absent: the case's own).
struct Handed {
  std::unique_ptr<PreparedCase> prepared;
  nlohmann::json request;  // null when the case is not handed over
  std::string why;
};

Handed hand_over(const std::string& case_yaml) {
  PlannedCases planned = plan(case_yaml);
  EXPECT_TRUE(planned.errors.empty()) << planned.errors.front();
  Handed h{std::move(planned.cases.at(0).prepared), nullptr, ""};
  if (auto request = h.prepared->impl_request("/tmp", h.why)) h.request = *request;
  return h;
}

// A one_level case answered under two_level is judged on every observable on which meshgate's
// two models agree (shape, groups) and not on the one where they differ (the layout text), and
// the row says so; a wrong group still fails.
TEST(MeshKind, ACaseOfTheOtherModelIsJudgedOnTheObservablesBothModelsShare) {
  Handed h = hand_over(
      "{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp, tp]}, ops: [{flatten: {name: "
      "dp_tp}}], expect: {layout: \"8:1\", shape: [8], groups: [[[0, 1, 2, 3, 4, 5, 6, 7]]], "
      "coordinates: {5: [5]}}}");
  ASSERT_FALSE(h.request.is_null()) << h.why;
  EXPECT_EQ(h.request["model"], "one_level");
  EXPECT_EQ(h.request["models"], nlohmann::json({"one_level", "two_level"}));
  EXPECT_EQ(h.request["unjudged_models"], nlohmann::json::object());

  const auto answer = [](std::string model, std::string layout, nlohmann::json groups) {
    nlohmann::json a = {{"layout", std::move(layout)},
                        {"shape", {8}},
                        {"names", {"dp_tp"}},
                        {"groups", std::move(groups)},
                        {"coordinates", {{"5", {5}}}},
                        {"mesh_for_rank", nlohmann::json::object()}};
    if (!model.empty()) a["model"] = std::move(model);
    return a;
  };
  const nlohmann::json groups = {{{0, 1, 2, 3, 4, 5, 6, 7}}};
  const Outcome pass =
      h.prepared->check_observables(answer("two_level", "((8)):((1))", groups), "/tmp");
  EXPECT_EQ(pass.status, Status::pass) << pass.message;
  const nlohmann::json& judging = pass.metrics["model_judging"];
  EXPECT_EQ(judging["case_model"], "one_level");
  EXPECT_EQ(judging["impl_model"], "two_level");
  EXPECT_EQ(judging["judged"], nlohmann::json({"shape", "groups", "coordinates of rank 5"}));
  EXPECT_EQ(judging["not_compared"], nlohmann::json({"layout"}));
  EXPECT_NE(judging["note"].get<std::string>().find(
                "not compared: layout (the case is written for the one_level layout model and "
                "the implementation has two_level"),
            std::string::npos)
      << judging["note"];

  // Whatever layout text a two_level answer has, a wrong group is a failure that says what
  // was left out.
  const Outcome wrong = h.prepared->check_observables(
      answer("two_level", "(8):(1)", nlohmann::json({{{0, 4, 1, 5, 2, 6, 3, 7}}})), "/tmp");
  EXPECT_EQ(wrong.status, Status::fail);
  EXPECT_EQ(wrong.message.rfind("groups: expected [[[0,1,2,3,4,5,6,7]]], got [[[0,4,1,5,2,6,3,7]]] "
                                "[judged on shape, groups, coordinates of rank 5; not compared: "
                                "layout",
                                0),
            0u)
      << wrong.message;

  // An answer that names no model claims the case's own: every observable is judged.
  const Outcome unnamed = h.prepared->check_observables(answer("", "((8)):((1))", groups), "/tmp");
  EXPECT_EQ(unnamed.status, Status::fail);
  EXPECT_EQ(unnamed.message, "layout: expected 8:1, got ((8)):((1))");
  EXPECT_FALSE(unnamed.metrics.contains("model_judging"));
  EXPECT_EQ(h.prepared->check_observables(answer("one_level", "8:1", groups), "/tmp").status,
            Status::pass);
  EXPECT_THROW(h.prepared->check_observables(answer("three_level", "8:1", groups), "/tmp"),
               ImplFailure);
}

// Where only one model rejects the case, or both reject it but the other not with the words
// the case expects, an answer of the other model cannot be judged: the request lists the
// case's model alone and says why, and an answer of the other model is an ImplFailure.
TEST(MeshKind, ACaseWhoseVerdictDependsOnTheModelIsJudgedOnItsOwnModelOnly) {
  // one_level rejects the non-contiguous flattened slice; two_level accepts it.
  Handed relaxed = hand_over(
      "{name: a, kind: mesh, mesh: {shape: [2, 2, 2], names: [dp, cp, tp]}, flatten: [{dims: "
      "[dp, tp], name: dp_tp}], ops: [{slice: dp_tp}], expect_error: NotImplementedError}");
  ASSERT_FALSE(relaxed.request.is_null()) << relaxed.why;
  EXPECT_EQ(relaxed.request["models"], nlohmann::json({"one_level"}));
  EXPECT_NE(relaxed.request["unjudged_models"]["two_level"].get<std::string>().find(
                "meshgate's two_level model accepts it"),
            std::string::npos)
      << relaxed.request["unjudged_models"];
  EXPECT_THROW(relaxed.prepared->check_observables(
                   {{"model", "two_level"}, {"layout", "((2,2)):((4,1))"}, {"shape", {4}}},
                   "/tmp"),
               ImplFailure);

  // Both models reject the transposed slice with the same KeyError: judged on the rejection.
  Handed both = hand_over(
      "{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp, tp]}, ops: [{slice: [tp, dp]}], "
      "expect_error: \"ascending order\"}");
  EXPECT_EQ(both.request["models"], nlohmann::json({"one_level", "two_level"})) << both.why;

  // Both reject, but with different exception types: not the other model.
  Handed types = hand_over(
      "{name: a, kind: mesh, mesh: {shape: [2, 2, 2], names: [dp, cp, tp]}, flatten: [{dims: "
      "[dp, tp], name: dp_tp}], ops: [{slice: [dp_tp, cp]}], expect_error: NotImplementedError}");
  EXPECT_EQ(types.request["models"], nlohmann::json({"one_level"}));
  EXPECT_NE(types.request["unjudged_models"]["two_level"].get<std::string>().find(
                "not with the expected 'NotImplementedError': KeyError"),
            std::string::npos)
      << types.request["unjudged_models"];

  // Both reject with the same words, but the case expects meshgate's explanation after them,
  // which no other implementation prints.
  Handed explained = hand_over(
      "{name: a, kind: mesh, mesh: {shape: [2, 2, 2], names: [dp, cp, tp]}, ops: [{unflatten: "
      "{dim: 0, sizes: [2, 2], names: [a, b]}}], expect_error: \"dim 0 is 'dp' of the mesh\"}");
  EXPECT_EQ(explained.request["models"], nlohmann::json({"one_level"}));
  EXPECT_NE(explained.request["unjudged_models"]["two_level"].get<std::string>().find(
                "the case expects words of meshgate's own explanation"),
            std::string::npos)
      << explained.request["unjudged_models"];

  // PyTorch ships the 2-level model with #172343's check_orthogonal, which rejects (2,2):(3,1)
  // at creation where the set-based check of one_level accepts it.
  Handed orthogonal = hand_over(
      "{name: a, kind: mesh, mesh: {layout: \"(2,2):(3,1)\", names: [a, b], ranks: \"0..5\"}, "
      "expect: {shape: [2, 2]}}");
  EXPECT_EQ(orthogonal.request["models"], nlohmann::json({"one_level"}));
  EXPECT_NE(orthogonal.request["unjudged_models"]["two_level"].get<std::string>().find(
                "check_orthogonal of PR #172343 rejects (2,2):(3,1)"),
            std::string::npos)
      << orthogonal.request["unjudged_models"];

  // Every observable the case expects differs between the models: nothing to judge.
  Handed layout_only = hand_over(
      "{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp, tp]}, expect: {layout: "
      "\"(2,4):(4,1)\"}}");
  EXPECT_EQ(layout_only.request["models"], nlohmann::json({"one_level"}));
  EXPECT_NE(layout_only.request["unjudged_models"]["two_level"].get<std::string>().find(
                "every observable the case expects (layout) differs"),
            std::string::npos)
      << layout_only.request["unjudged_models"];
}

// An answer of the case's own model is judged on everything the case expects, whatever
// meshgate's own model makes of the case; under the other model, a case both of meshgate's
// models reject but that expects a result has nothing to judge.
TEST(MeshKind, AnAnswerOfTheCasesOwnModelIsJudgedOnAllItExpects) {
  Handed h = hand_over(
      "{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp, tp]}, ops: [{slice: [tp, dp]}], "
      "expect: {shape: [4, 2]}}");
  ASSERT_FALSE(h.request.is_null()) << h.why;
  EXPECT_EQ(h.request["models"], nlohmann::json({"one_level"}));
  EXPECT_NE(h.request["unjudged_models"]["two_level"].get<std::string>().find(
                "both of meshgate's layout models reject the case, which expects a result"),
            std::string::npos)
      << h.request["unjudged_models"];
  const auto answer = [](std::vector<std::int64_t> shape) {
    return nlohmann::json{{"model", "one_level"}, {"layout", "(4,2):(1,4)"}, {"shape", shape}};
  };
  EXPECT_EQ(h.prepared->check_observables(answer({4, 2}), "/tmp").status, Status::pass);
  const Outcome fail = h.prepared->check_observables(answer({2, 4}), "/tmp");
  EXPECT_EQ(fail.status, Status::fail);
  EXPECT_EQ(fail.message, "shape: expected [4,2], got [2,4]");
}

// A compare_models case is judged on the side of the comparison the implementation computes:
// expect where the models agree, meshgate's answer for the implementation's model for the rest
// of what a mesh shows; model_differences, models_agree and equal_to are no observables.
TEST(MeshKind, AModelComparisonIsJudgedOnTheSideTheImplementationComputes) {
  Handed h = hand_over(
      "{name: a, kind: mesh, compare_models: true, model_differences: [representation_change], "
      "mesh: {shape: [2, 2, 2], names: [dp, cp, tp]}, ops: [{flatten: {dims: [dp, cp], name: "
      "dp_cp}}], expect: {layout: \"4:2\", groups: [[[0, 2, 4, 6], [1, 3, 5, 7]]]}}");
  ASSERT_FALSE(h.request.is_null()) << h.why;
  EXPECT_EQ(h.request["models"], nlohmann::json({"one_level", "two_level"}));
  const auto answer = [](std::string layout, std::vector<std::string> names) {
    return nlohmann::json{{"model", "two_level"},
                          {"layout", std::move(layout)},
                          {"shape", {4}},
                          {"names", std::move(names)},
                          {"groups", {{{0, 2, 4, 6}, {1, 3, 5, 7}}}}};
  };
  const Outcome pass = h.prepared->check_observables(answer("((4)):((2))", {"dp_cp"}), "/tmp");
  EXPECT_EQ(pass.status, Status::pass) << pass.message;
  EXPECT_EQ(pass.metrics["model_judging"]["judged"], nlohmann::json({"groups"}));
  EXPECT_EQ(pass.metrics["model_judging"]["against_meshgate"],
            nlohmann::json({"layout", "shape", "names"}));
  EXPECT_EQ(pass.metrics["model_judging"]["not_observable"],
            nlohmann::json({"model_differences"}));

  const Outcome fail = h.prepared->check_observables(answer("((2,2)):((4,2))", {"cp"}), "/tmp");
  EXPECT_EQ(fail.status, Status::fail);
  EXPECT_EQ(fail.message.rfind("layout (meshgate's two_level model): expected \"((4)):((2))\", got "
                               "\"((2,2)):((4,2))\"; names (meshgate's two_level model): expected "
                               "[\"dp_cp\"], got [\"cp\"] [",
                               0),
            0u)
      << fail.message;

  // Without expect, the case is judged on meshgate's answer alone, also for its own model.
  Handed bare = hand_over(
      "{name: a, kind: mesh, compare_models: true, models_agree: false, mesh: {shape: [2, 4], "
      "names: [dp, tp]}, equal_to: {shape: [8]}, ops: [{flatten: {name: w}}]}");
  ASSERT_FALSE(bare.request.is_null()) << bare.why;
  const Outcome own = bare.prepared->check_observables(
      {{"model", "one_level"}, {"layout", "8:1"}, {"shape", {8}}, {"names", {"w"}},
       {"groups", {{{0, 1, 2, 3, 4, 5, 6, 7}}}}},
      "/tmp");
  EXPECT_EQ(own.status, Status::pass) << own.message;
  EXPECT_EQ(own.metrics["model_judging"]["not_observable"],
            nlohmann::json({"models_agree", "equal_to"}));
  EXPECT_THROW(bare.prepared->check_observables(
                   {{"model", "one_level"}, {"layout", "8:1"}, {"shape", {8}}}, "/tmp"),
               ImplFailure);  // groups are judged, and missing
}

// expect.warnings counts the warnings of meshgate's DeviceMesh model, no observable of the
// protocol: the case's other observables are judged and the row says so; a case expecting
// warnings alone is not handed over.
TEST(MeshKind, WarningsAreLeftOutOfWhatAnotherImplementationIsJudgedOn) {
  Handed h = hand_over(
      "{name: a, kind: mesh, model: two_level, mesh: {shape: [2, 4], names: [dp, tp]}, expect: "
      "{shape: [2, 4], warnings: 0}}");
  ASSERT_FALSE(h.request.is_null()) << h.why;
  const Outcome pass = h.prepared->check_observables(
      {{"model", "two_level"}, {"layout", "((2),(4)):((4),(1))"}, {"shape", {2, 4}}}, "/tmp");
  EXPECT_EQ(pass.status, Status::pass) << pass.message;
  EXPECT_EQ(pass.metrics["model_judging"]["not_observable"], nlohmann::json({"warnings"}));
  EXPECT_NE(pass.metrics["model_judging"]["note"].get<std::string>().find(
                "not compared: warnings (no observable of the meshgate.impl/1 protocol)"),
            std::string::npos);

  Handed only = hand_over(
      "{name: a, kind: mesh, mesh: {shape: [2, 4], names: [dp, tp]}, expect: {warnings: 0}}");
  EXPECT_TRUE(only.request.is_null());
  EXPECT_NE(only.why.find("expect.warnings"), std::string::npos) << only.why;
}

}  // namespace
}  // namespace meshgate::runner
