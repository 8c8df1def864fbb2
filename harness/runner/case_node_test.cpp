#include <gtest/gtest.h>

#include "case_kind.hpp"
#include "diagnostics.hpp"

namespace meshgate::runner {
namespace {

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CaseNode, GettersReadTypedValues) {
  CaseNode node(YAML::Load("{a: 3, b: [1, 2], c: text, d: 2.5, e: true}"), "f.yaml", "s/x");
  EXPECT_EQ(node.required<int>("a"), 3);
  EXPECT_EQ(node.required<std::vector<int>>("b"), (std::vector<int>{1, 2}));
  EXPECT_EQ(node.optional<std::string>("c"), "text");
  EXPECT_EQ(node.optional<double>("d"), 2.5);
  EXPECT_EQ(node.optional<bool>("e"), true);
  EXPECT_EQ(node.optional<int>("missing"), std::nullopt);
  EXPECT_TRUE(node.has("a"));
  EXPECT_FALSE(node.has("missing"));
  EXPECT_NO_THROW(node.finish());
}

TEST(CaseNode, WrongTypeNamesPositionCaseAndKey) {
  CaseNode node(YAML::Load("name: x\nvalue: [1, 2]\ntext: [a]\n"), "f.yaml", "s/x");
  EXPECT_EQ(error_of([&] { node.required<int>("value"); }),
            "f.yaml:2:8: case 's/x': key 'value': expected an integer, got a list");
  EXPECT_EQ(error_of([&] { node.optional<std::string>("text"); }),
            "f.yaml:3:7: case 's/x': key 'text': expected a string, got a list");
  EXPECT_EQ(error_of([&] { node.required<int>("absent"); }),
            "f.yaml:1:1: case 's/x': key 'absent': is required (an integer)");
  EXPECT_EQ(error_of([&] { node.required<std::vector<int>>("name"); }),
            "f.yaml:1:7: case 's/x': key 'name': expected a list of integers, got 'x'");
}

TEST(CaseNode, UnknownKeySuggestsTheClosestKnownKey) {
  CaseNode node(YAML::Load("name: x\nexepct: 3\nzzz: 1\n"), "typo.yaml", "s/x");
  node.raw("name");
  node.optional<int>("expect");
  const std::vector<std::string> errors = node.unknown_key_errors();
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0],
            "typo.yaml:2:1: case 's/x': key 'exepct': unknown key (did you mean 'expect'?)");
  EXPECT_EQ(errors[1],
            "typo.yaml:3:1: case 's/x': key 'zzz': unknown key; known keys here: expect, name");
  EXPECT_EQ(error_of([&] { node.finish(); }), errors[0]);
  EXPECT_EQ(node.unknown_key_errors(/*close_only=*/true).size(), 1u);
}

TEST(CaseNode, ChildKeysAreValidatedWithTheirPath) {
  CaseNode node(YAML::Load("expect:\n  layot: \"8:1\"\n  shape: [2]\nperf: 3\n"), "f.yaml", "s/x");
  CaseNode expect = node.child("expect");
  expect.optional<std::string>("layout");
  EXPECT_EQ(expect.required<std::vector<int>>("shape"), std::vector<int>{2});
  const std::vector<std::string> errors = node.unknown_key_errors();
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0],
            "f.yaml:2:3: case 's/x': key 'expect.layot': unknown key (did you mean 'layout'?)");
  EXPECT_EQ(errors[1], "f.yaml:4:1: case 's/x': key 'perf': unknown key; known keys here: expect");
  EXPECT_EQ(error_of([&] { node.child("perf"); }),
            "f.yaml:4:7: case 's/x': key 'perf': expected a mapping, got '3'");
  EXPECT_EQ(error_of([&] { expect.fail("shape", "must have 2 entries"); }),
            "f.yaml:3:10: case 's/x': key 'expect.shape': must have 2 entries");
}

TEST(CaseNode, FailAtPointsAtTheGivenNode) {
  CaseNode node(YAML::Load("args:\n  - \"8:1\"\n  - bad\n"), "f.yaml", "s/x");
  const YAML::Node args = node.raw("args");
  EXPECT_EQ(error_of([&] { node.fail_at(args[1], "args", "not a layout"); }),
            "f.yaml:3:5: case 's/x': key 'args': not a layout");
}

TEST(CaseNode, AssignmentRebindsWithoutTouchingTheCaseFile) {
  const YAML::Node root = YAML::Load("{a: {x: 1}, b: {y: 2}}");
  CaseNode a(root["a"], "f.yaml", "s/a");
  const CaseNode b(root["b"], "f.yaml", "s/b");
  a = b;
  EXPECT_EQ(a.required<int>("y"), 2);
  EXPECT_EQ(a.case_id(), "s/b");
  EXPECT_EQ(root["a"]["x"].as<int>(), 1);
}

TEST(Diagnostics, ClosestMatchNeedsToBeClose) {
  EXPECT_EQ(closest_match("exepct", {"expect", "expect_error"}), "expect");
  EXPECT_EQ(closest_match("iter", {"iters", "warmup", "runs"}), "iters");
  EXPECT_EQ(closest_match("banana", {"expect", "op"}), std::nullopt);
  EXPECT_EQ(location("f.yaml", YAML::Mark::null_mark()), "f.yaml");
}

}  // namespace
}  // namespace meshgate::runner
