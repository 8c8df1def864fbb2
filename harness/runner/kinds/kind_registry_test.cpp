// Kinds registered from outside the runner (kind_registry.hpp): MESHGATE_REGISTER_KIND adds a
// kind after the built-in ones before main runs, its cases validate and run like any other's,
// and register_kind refuses what would make a kind unreachable or ambiguous. Every kind
// describes itself (its signals, whether it speaks the implementation protocol, whether it is
// built in), and `list --kinds` prints those descriptions.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "case_kind.hpp"
#include "kind_registry.hpp"
#include "kinds/kind_test_support.hpp"
#include "runner.hpp"
#include "validate.hpp"

namespace meshgate::runner {

// The layout kind's own parser, registered again under another name: a kind from outside is
// a parse function like any built-in one.
std::unique_ptr<PreparedCase> parse_layout_case(CaseNode& node, bool expect_error);

}  // namespace meshgate::runner

// At namespace scope, as a project outside meshgate writes it: with its keys only (the fields
// that follow keep their defaults), and with every field.
MESHGATE_REGISTER_KIND("layout_again", &meshgate::runner::parse_layout_case,
                       {"op", "args", "expect"});
MESHGATE_REGISTER_KIND("layout.described", &meshgate::runner::parse_layout_case,
                       {"op", "args", "expect"}, {"result"}, true);

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

// A kind's name is written after `kind:` and recorded in every row, where the results schema
// holds it to the same form.
TEST(KindRegistry, RefusesANameThatIsNoKindName) {
  for (const char* name : {"ring allreduce", "9ring", "-ring", "ring/2", "ring:x", "ring\n"}) {
    EXPECT_FALSE(valid_kind_name(name)) << name;
    EXPECT_THROW(register_kind({name, &parse_layout_case}), std::invalid_argument) << name;
    EXPECT_EQ(find_kind(name), nullptr) << name;
  }
  for (const char* name : {"ring_allreduce", "Ring-2", "my.ring", "r"}) {
    EXPECT_TRUE(valid_kind_name(name)) << name;
  }
}

TEST(KindRegistry, AKindDescribesItsSignalsAndWhetherItSpeaksTheProtocol) {
  const KindEntry* plain = find_kind("layout_again");
  ASSERT_NE(plain, nullptr);
  EXPECT_TRUE(plain->signals.empty());
  EXPECT_FALSE(plain->impl_protocol);
  EXPECT_FALSE(plain->built_in);
  const KindEntry* described = find_kind("layout.described");
  ASSERT_NE(described, nullptr);
  EXPECT_EQ(described->signals, std::vector<std::string>{"result"});
  EXPECT_TRUE(described->impl_protocol);
  EXPECT_FALSE(described->built_in);
  // A registration cannot pass itself off as meshgate's own.
  KindEntry claims{"claims_built_in", &parse_layout_case};
  claims.built_in = true;
  register_kind(claims);
  EXPECT_FALSE(find_kind("claims_built_in")->built_in);
  EXPECT_TRUE(find_kind("layout")->built_in);
  EXPECT_TRUE(find_kind("command")->built_in);
}

// One case of each built-in kind: whether the registry says the kind speaks the implementation
// protocol is whether its case is handed to another implementation. A new built-in kind needs
// a case here.
TEST(KindRegistry, TheBuiltInKindsSayTrulyWhetherTheirCasesGoToAnotherImplementation) {
  const std::map<std::string, std::string> one_case = {
      {"layout", "{name: a, kind: layout, op: size, args: ['4:1'], expect: 4}"},
      {"mesh", "{name: a, kind: mesh, mesh: {shape: [2, 2], names: [dp, tp]}, "
               "expect: {shape: [2, 2]}}"},
      {"gemm", "{name: a, kind: gemm, m: 4, n: 4, k: 4, dtype: float32, epilogue: bias}"},
      {"collective", "{name: a, kind: collective, op: all_reduce, mesh: {shape: [2]}, "
                     "dtype: float32, reduce: sum, bytes: [8]}"},
      {"redistribute", "{name: a, kind: redistribute, mesh: {shape: [2], names: [A]}, "
                       "tensor: {shape: [4]}, from: [S(0)], to: [R]}"},
      {"command", "{name: a, kind: command, command: [\"true\"]}"},
      {"fsdp", "{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4, 2]}}"},
      {"gemm_sweep", "{name: a, kind: gemm_sweep, seed: 1, count: 4, impls: [cpu_epilogue]}"},
  };
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  for (const KindEntry& kind : case_kinds()) {
    if (!kind.built_in) continue;
    const auto sample = one_case.find(std::string(kind.name));
    ASSERT_NE(sample, one_case.end()) << "no case of the built-in kind " << kind.name;
    PlannedCase planned = plan_one_case(sample->second, case_kinds());
    std::string why;
    EXPECT_EQ(planned.prepared->impl_request(dir, why).has_value(), kind.impl_protocol)
        << kind.name << ": " << why;
  }
}

TEST(KindRegistry, ListKindsDescribesEveryKindInRegistryOrder) {
  const nlohmann::ordered_json described = describe_kinds(case_kinds());
  EXPECT_EQ(described["common_keys"], nlohmann::json(common_case_keys()));
  ASSERT_EQ(described["kinds"].size(), case_kinds().size());
  EXPECT_EQ(described["kinds"][0],
            (nlohmann::ordered_json{{"name", "layout"},
                                    {"built_in", true},
                                    {"impl_protocol", true},
                                    {"signals", {"result"}},
                                    {"keys", {"op", "args", "expect"}}}));
  for (std::size_t i = 0; i < case_kinds().size(); ++i) {
    EXPECT_EQ(described["kinds"][i]["name"], std::string(case_kinds()[i].name));
  }
  std::ostringstream text, json, err;
  ListOptions options;
  options.kinds = true;
  EXPECT_EQ(list_command(options, case_kinds(), text, err), 0);
  EXPECT_NE(text.str().find("layout.described  registered  yes     result\n"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("command           built-in    no      -\n"), std::string::npos)
      << text.str();
  options.json = true;
  EXPECT_EQ(list_command(options, case_kinds(), json, err), 0);
  EXPECT_EQ(nlohmann::ordered_json::parse(json.str()), described);
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
