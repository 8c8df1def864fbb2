// Kinds registered from outside the runner (kind_registry.hpp): MESHGATE_REGISTER_KIND adds a
// kind after the built-in ones before main runs, its cases validate and run like any other's,
// and register_kind refuses what would make a kind unreachable or ambiguous.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "case_kind.hpp"
#include "kind_registry.hpp"
#include "kinds/kind_test_support.hpp"
#include "runner.hpp"

namespace meshgate::runner {

// The layout kind's own parser, registered again under another name: a kind from outside is
// a parse function like any built-in one.
std::unique_ptr<PreparedCase> parse_layout_case(CaseNode& node, bool expect_error);

}  // namespace meshgate::runner

// At namespace scope, as a project outside meshgate writes it.
MESHGATE_REGISTER_KIND("layout_again", &meshgate::runner::parse_layout_case,
                       {"op", "args", "expect"});

namespace meshgate::runner {
namespace {

const KindEntry* find_kind(std::string_view name) {
  for (const KindEntry& kind : case_kinds()) {
    if (kind.name == name) return &kind;
  }
  return nullptr;
}

TEST(KindRegistry, ARegisteredKindFollowsTheBuiltInOnes) {
  std::vector<std::string> names;
  for (const KindEntry& kind : case_kinds()) names.emplace_back(kind.name);
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names.front(), "layout");
  EXPECT_NE(std::find(names.begin(), names.end(), "command"), names.end());
  const auto again = std::find(names.begin(), names.end(), "layout_again");
  ASSERT_NE(again, names.end());
  EXPECT_GT(again - names.begin(),
            std::find(names.begin(), names.end(), "command") - names.begin());
  EXPECT_EQ(find_kind("layout_again")->keys, (std::vector<std::string>{"op", "args", "expect"}));
}

TEST(KindRegistry, ItsCasesValidateAndRun) {
  PlannedCase planned = plan_one_case(
      "{name: six, kind: layout_again, op: size, args: ['(2,3):(3,1)'], expect: 6}", case_kinds());
  const CaseRun result = execute_case(planned, std::nullopt);
  EXPECT_EQ(result.outcome.status, Status::pass) << result.outcome.message;
  EXPECT_EQ(result.outcome.metrics["result"], "6");

  PlannedCase wrong = plan_one_case(
      "{name: five, kind: layout_again, op: size, args: ['(2,3):(3,1)'], expect: 5}", case_kinds());
  EXPECT_EQ(execute_case(wrong, std::nullopt).outcome.status, Status::fail);
}

TEST(KindRegistry, ItsKeysAreCheckedAsABuiltInKindsAre) {
  EXPECT_NE(case_input_error("{name: a, kind: layout_again, op: size, args: ['4:1'], expect: 4, "
                             "agrs: 1}",
                             case_kinds())
                .find("unknown key (did you mean 'args'?)"),
            std::string::npos);
  EXPECT_NE(case_input_error("{name: b, kind: layout_agian, op: size, args: ['4:1'], expect: 4}",
                             case_kinds())
                .find("did you mean 'layout_again'?"),
            std::string::npos);
}

TEST(KindRegistry, RefusesADuplicateAnEmptyNameAndNoParseFunction) {
  EXPECT_THROW(register_kind({"layout_again", &parse_layout_case}), std::invalid_argument);
  EXPECT_THROW(register_kind({"layout", &parse_layout_case}), std::invalid_argument);
  EXPECT_THROW(register_kind({"", &parse_layout_case}), std::invalid_argument);
  EXPECT_THROW(register_kind({"no-parse", nullptr}), std::invalid_argument);
  EXPECT_EQ(find_kind("no-parse"), nullptr);
}

TEST(KindRegistry, KeepsItsOwnCopyOfTheName) {
  {
    std::string name = "transient";
    register_kind({name, &parse_layout_case});
    name.assign("overwritten");
  }
  ASSERT_NE(find_kind("transient"), nullptr);
  EXPECT_EQ(find_kind("overwritten"), nullptr);
}

}  // namespace
}  // namespace meshgate::runner
