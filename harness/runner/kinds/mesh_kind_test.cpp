// The mesh kind: input errors found at validation (naming file, line, case and key), and the
// classification of layout-model disagreements that the compatibility report is built from.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "runner.hpp"
#include "validate.hpp"
#include "kinds/kind_test_support.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_mesh_case(CaseNode& node, bool expect_error);

namespace {

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {{"mesh", &parse_mesh_case}};
  return k;
}

PlannedCases plan(const std::string& case_yaml) { return plan_case(case_yaml, kinds()); }

std::string input_error(const std::string& case_yaml) {
  PlannedCases planned = plan(case_yaml);
  EXPECT_EQ(planned.errors.size(), 1u);
  return planned.errors.empty() ? "" : planned.errors.front();
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
            "t.yaml:3:56: case 's/a': key 'mesh.names': 1 names for a mesh of 2 dims: give one "
            "name per dim");
  // A value rejection: with expect_error the case passes as the expected rejection.
  PlannedCases planned = plan("{name: a, kind: mesh, mesh: {layout: \"(2,2):(4,1)\", names: [a, b, c]}, "
                              "expect_error: \"3 names for a mesh of 2 dims\"}");
  ASSERT_TRUE(planned.errors.empty()) << planned.errors.front();
  const CaseRun run = execute_case(planned.cases.at(0), std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
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
}  // namespace
}  // namespace meshgate::runner
