#include "case_file.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace meshgate::runner {
namespace {

LoadedCases load(const std::string& text, const std::string& file = "suite.yaml",
                 const CaseFileLimits& limits = {}) {
  LoadedCases out;
  load_case_text(text, file, out, limits);
  check_unique_ids(out);
  return out;
}

TEST(CaseFile, SuiteDefaultsToFileStem) {
  const LoadedCases loaded = load("cases:\n  - {name: a, kind: echo}\n", "dir/layout-algebra.yaml");
  ASSERT_TRUE(loaded.errors.empty()) << loaded.errors[0];
  ASSERT_EQ(loaded.cases.size(), 1u);
  EXPECT_EQ(loaded.cases[0].suite, "layout-algebra");
  EXPECT_EQ(loaded.cases[0].id, "layout-algebra/a");
  EXPECT_EQ(loaded.cases[0].file, "dir/layout-algebra.yaml");
}

TEST(CaseFile, MatrixExpandsInKeyOrderWithTypedSubstitution) {
  const LoadedCases loaded = load(
      "suite: s\n"
      "cases:\n"
      "  - name: m-${n}-${shape}\n"
      "    kind: probe\n"
      "    matrix: {n: [1, 2], shape: [[2, 4], x]}\n"
      "    value: ${n}\n"
      "    dims: ${shape}\n"
      "    label: \"n=${n}\"\n");
  ASSERT_TRUE(loaded.errors.empty()) << loaded.errors[0];
  ASSERT_EQ(loaded.cases.size(), 4u);
  EXPECT_EQ(loaded.cases[0].name, "m-1-2x4");
  EXPECT_EQ(loaded.cases[1].name, "m-1-x");
  EXPECT_EQ(loaded.cases[2].name, "m-2-2x4");
  EXPECT_EQ(loaded.cases[3].name, "m-2-x");
  const YAML::Node& first = loaded.cases[0].node;
  // A value that is exactly ${x} keeps the matrix value's type.
  EXPECT_EQ(first["value"].as<int>(), 1);
  ASSERT_TRUE(first["dims"].IsSequence());
  EXPECT_EQ(first["dims"].as<std::vector<int>>(), (std::vector<int>{2, 4}));
  EXPECT_EQ(first["label"].as<std::string>(), "n=1");
  EXPECT_EQ(loaded.cases[3].node["value"].as<int>(), 2);
}

TEST(CaseFile, ExpandedCasesKeepTheirPositions) {
  const LoadedCases loaded = load(
      "cases:\n"
      "  - name: a-${x}\n"
      "    kind: probe\n"
      "    matrix: {x: [1, 2]}\n"
      "    label: v${x}\n");
  ASSERT_EQ(loaded.cases.size(), 2u);
  for (const CaseSpec& spec : loaded.cases) {
    EXPECT_EQ(spec.mark.line, 1);
    EXPECT_EQ(spec.mark.column, 4);
    // A substituted string keeps its own place in the file.
    EXPECT_EQ(spec.node["label"].Mark().line, 4);
    EXPECT_EQ(spec.node["label"].Mark().column, 11);
  }
}

TEST(CaseFile, DefaultsMergeUnderCasesAndTagsUnite) {
  const LoadedCases loaded = load(
      "defaults: {tags: [smoke], value: 7, kind: probe}\n"
      "cases:\n"
      "  - {name: a, tags: [nightly, smoke]}\n"
      "  - {name: b, value: 3, kind: echo}\n");
  ASSERT_TRUE(loaded.errors.empty()) << loaded.errors[0];
  ASSERT_EQ(loaded.cases.size(), 2u);
  EXPECT_EQ(loaded.cases[0].tags, (std::vector<std::string>{"nightly", "smoke"}));
  EXPECT_EQ(loaded.cases[0].kind, "probe");
  EXPECT_EQ(loaded.cases[0].node["value"].as<int>(), 7);
  EXPECT_EQ(loaded.cases[1].tags, (std::vector<std::string>{"smoke"}));
  EXPECT_EQ(loaded.cases[1].kind, "echo");
  EXPECT_EQ(loaded.cases[1].node["value"].as<int>(), 3);
}

TEST(CaseFile, CaseSpecsSortWithoutRewritingTheirNodes) {
  LoadedCases loaded =
      load("cases:\n  - {name: b, kind: echo, v: 2}\n  - {name: a, kind: echo, v: 1}\n");
  std::sort(loaded.cases.begin(), loaded.cases.end(),
            [](const CaseSpec& l, const CaseSpec& r) { return l.name < r.name; });
  EXPECT_EQ(loaded.cases[0].name, "a");
  EXPECT_EQ(loaded.cases[0].node["v"].as<int>(), 1);
  EXPECT_EQ(loaded.cases[1].node["v"].as<int>(), 2);
}

TEST(CaseFile, DuplicateNamesNameBothLines) {
  const LoadedCases loaded = load(
      "suite: s\n"
      "cases:\n"
      "  - {name: a, kind: echo}\n"
      "  - name: a\n"
      "    kind: echo\n");
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0],
            "suite.yaml:4:11: case 's/a': key 'name': duplicate case id, first defined at "
            "suite.yaml:3:12; names must be unique in a suite");
}

TEST(CaseFile, MatrixKeysTheNameDoesNotMentionAreAppendedToIt) {
  const LoadedCases loaded = load(
      "suite: s\n"
      "cases:\n"
      "  - name: a-${y}\n"
      "    kind: echo\n"
      "    matrix: {x: [1, 2], y: [p, q], z: [only], w: [[2, 4], {k: v/w}]}\n");
  ASSERT_TRUE(loaded.errors.empty()) << loaded.errors[0];
  std::vector<std::string> ids;
  for (const CaseSpec& spec : loaded.cases) ids.push_back(spec.id);
  // y is in the name, z has a single value: neither is appended; x and w are, in key order.
  EXPECT_EQ(ids, (std::vector<std::string>{"s/a-p-1-2x4", "s/a-p-1-k-v-w", "s/a-q-1-2x4",
                                           "s/a-q-1-k-v-w", "s/a-p-2-2x4", "s/a-p-2-k-v-w",
                                           "s/a-q-2-2x4", "s/a-q-2-k-v-w"}));
  // The name keeps its position for messages.
  EXPECT_EQ(loaded.cases[0].node["name"].Mark().line, 2);
}

TEST(CaseFile, AppendedMatrixValuesCanStillCollide) {
  const LoadedCases loaded = load(
      "suite: s\n"
      "cases:\n"
      "  - {name: a-1, kind: echo}\n"
      "  - {name: a, kind: echo, matrix: {x: [1, 2]}}\n");
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_NE(loaded.errors[0].find("case 's/a-1': key 'name': duplicate case id"), std::string::npos)
      << loaded.errors[0];
}

TEST(CaseFile, UnknownMatrixVariableIsAnError) {
  const LoadedCases loaded = load(
      "cases:\n"
      "  - name: a-${dtyp}\n"
      "    kind: echo\n"
      "    matrix: {dtype: [f32]}\n");
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0],
            "suite.yaml:2:11: case #1: key 'name': '${dtyp}' is not a matrix key (did you mean "
            "'dtype'?)");
}

TEST(CaseFile, StructuralErrorsAreAllReported) {
  const LoadedCases loaded = load(
      "suite: s\n"
      "casez: []\n"
      "cases:\n"
      "  - {kind: echo}\n"
      "  - {name: b, kind: [x]}\n"
      "  - {name: c, kind: echo, tags: smoke}\n");
  ASSERT_EQ(loaded.errors.size(), 1u) << "an unknown top-level key stops the file";
  EXPECT_EQ(loaded.errors[0],
            "suite.yaml:2:1: key 'casez': unknown top-level key (did you mean 'cases'?); a case "
            "file has suite, defaults and cases");
  const LoadedCases cases = load(
      "suite: s\n"
      "cases:\n"
      "  - {kind: echo}\n"
      "  - {name: b, kind: [x]}\n"
      "  - {name: c, kind: echo, tags: smoke}\n");
  ASSERT_EQ(cases.errors.size(), 3u);
  EXPECT_EQ(cases.errors[0],
            "suite.yaml:3:5: case #1: key 'name': is required (a string unique in the suite)");
  EXPECT_EQ(cases.errors[1],
            "suite.yaml:4:21: case 's/b': key 'kind': expected a string, got a list");
  EXPECT_EQ(cases.errors[2],
            "suite.yaml:5:33: case 's/c': key 'tags': expected a list of strings, got 'smoke'");
}

TEST(CaseFile, InvalidYamlNamesThePosition) {
  const LoadedCases loaded = load("cases:\n  - {name: a, kind: echo\n");
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0].rfind("suite.yaml:", 0), 0u) << loaded.errors[0];
  EXPECT_NE(loaded.errors[0].find("invalid YAML"), std::string::npos);
}

TEST(CaseFile, SelfReferencesAreRefusedBeforeAnyTreeIsBuilt) {
  // In a case's value, in defaults, and a whole case: each used to overflow the stack.
  const std::vector<std::pair<std::string, std::string>> files = {
      {"cases:\n  - name: a\n    kind: echo\n    args: &x [\"4:1\", *x]\n", "suite.yaml:4:22: "},
      {"defaults: &d {tags: [smoke], more: *d}\ncases:\n  - {name: a, kind: echo}\n",
       "suite.yaml:1:36: "},
      {"cases:\n  - &c {name: a, kind: echo, again: *c}\n", "suite.yaml:2:37: "}};
  for (const auto& [text, place] : files) {
    const LoadedCases loaded = load(text);
    ASSERT_EQ(loaded.errors.size(), 1u) << text;
    EXPECT_EQ(loaded.errors[0].rfind(place, 0), 0u) << loaded.errors[0];
    EXPECT_NE(loaded.errors[0].find("that contains it"), std::string::npos) << loaded.errors[0];
    EXPECT_TRUE(loaded.cases.empty());
  }
}

TEST(CaseFile, MatrixCombinationsAreCountedBeforeExpanding) {
  std::string matrix;
  for (int key = 0; key < 8; ++key) {
    matrix += (key ? ", k" : "k") + std::to_string(key) + ": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]";
  }
  const LoadedCases loaded =
      load("cases:\n  - name: m-${k0}\n    kind: echo\n    matrix: {" + matrix + "}\n");
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(
      loaded.errors[0],
      "suite.yaml:4:13: case 'suite/m-${k0}': key 'matrix': expands to k0: 10 x k1: 10 x k2: "
      "10 x k3: 10 x "
      "k4: 10 x k5: 10 x k6: 10 x k7: 10 = 100000000 combinations, above the limit of 10000 "
      "per case; split the case or shorten its lists");
  // So many keys that the product overflows 64 bits: still counted, still refused.
  std::string huge;
  for (int key = 0; key < 30; ++key) {
    huge += (key ? ", k" : "k") + std::to_string(key) + ": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]";
  }
  const LoadedCases overflow =
      load("cases:\n  - name: m-${k0}\n    kind: echo\n    matrix: {" + huge + "}\n");
  ASSERT_EQ(overflow.errors.size(), 1u);
  EXPECT_NE(overflow.errors[0].find("= 1e+30 combinations, above the limit"), std::string::npos)
      << overflow.errors[0];
}

TEST(CaseFile, ExpandedCasesStayWithinTheFilesNodeBudget) {
  const std::string text =
      "defaults: {tags: [smoke]}\n"
      "cases:\n"
      "  - name: a-${x}\n"
      "    kind: echo\n"
      "    matrix: {x: [1, 2, 3]}\n";
  CaseFileLimits limits;
  // Each expanded case: its mapping (1), name and kind (2 + 2) and the tags from the defaults
  // (key, list, tag: 3): 8 nodes. The matrix is spent and left out.
  limits.max_case_nodes = 24;
  EXPECT_EQ(load(text, "suite.yaml", limits).cases.size(), 3u);
  EXPECT_FALSE(load(text, "suite.yaml", limits).cases[0].node["matrix"].IsDefined());
  limits.max_case_nodes = 23;
  const LoadedCases over = load(text, "suite.yaml", limits);
  ASSERT_EQ(over.errors.size(), 1u);
  EXPECT_EQ(over.errors[0],
            "suite.yaml:3:5: case #1: key 'matrix': the file's cases, defaults merged and matrices "
            "expanded, pass 23 YAML nodes, the limit for a case file; split the file or shorten "
            "its matrices");
}

TEST(CaseFile, ExpandedCasesAreIndependentCopiesThatKeepTypesAndTags) {
  const LoadedCases loaded = load(
      "defaults: {tags: [smoke], label: \"in ${x}\", expect_error: \"true\"}\n"
      "cases:\n"
      "  - name: a-${x}\n"
      "    kind: echo\n"
      "    matrix: {x: [1, [2, 3]]}\n"
      "    value: ${x}\n"
      "    tags: [t]\n");
  ASSERT_TRUE(loaded.errors.empty()) << loaded.errors[0];
  ASSERT_EQ(loaded.cases.size(), 2u);
  // Defaults are substituted per combination, and tags are united in each case's own list.
  EXPECT_EQ(loaded.cases[0].node["label"].as<std::string>(), "in 1");
  EXPECT_EQ(loaded.cases[1].node["label"].as<std::string>(), "in 2x3");
  EXPECT_EQ(loaded.cases[0].tags, (std::vector<std::string>{"t", "smoke"}));
  EXPECT_EQ(loaded.cases[1].tags, (std::vector<std::string>{"t", "smoke"}));
  EXPECT_TRUE(loaded.cases[1].node["value"].IsSequence());
  // A quoted "true" stays a string: its tag travels with the copy.
  EXPECT_EQ(loaded.cases[0].node["expect_error"].Tag(), "!");
  EXPECT_EQ(loaded.cases[0].node["expect_error"].Mark().line, 0);
  // Editing one expanded case leaves the other alone.
  YAML::Node first = loaded.cases[0].node;
  first["tags"].push_back("extra");
  EXPECT_EQ(loaded.cases[1].node["tags"].size(), 2u);
}

TEST(CaseFile, EmptyCaseListsNameTheFile) {
  const LoadedCases loaded = load("suite: s\ncases: []\n", "dir/empty.yaml");
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0],
            "dir/empty.yaml:2:8: key 'cases': the list is empty; a case file holds at least one "
            "case");
}

TEST(CaseFile, IdentifiersRefuseControlCharacters) {
  const LoadedCases names = load(
      "suite: s\n"
      "cases:\n"
      "  - {name: \"a\\tb\", kind: echo}\n"
      "  - {name: c, kind: echo, tags: [\"x\\ny\"]}\n");
  ASSERT_EQ(names.errors.size(), 2u);
  EXPECT_EQ(names.errors[0],
            "suite.yaml:3:12: case #1: key 'name': 'a\\tb' contains the control character U+0009; "
            "names are printed and typed on the command line");
  EXPECT_EQ(names.errors[1],
            "suite.yaml:4:34: case 's/c': key 'tags': 'x\\ny' contains the control character "
            "U+000A; tags are printed and typed on the command line");
  const LoadedCases suite = load("suite: \"s\\t1\"\ncases:\n  - {name: a, kind: echo}\n");
  ASSERT_EQ(suite.errors.size(), 1u);
  EXPECT_EQ(suite.errors[0],
            "suite.yaml:1:8: key 'suite': 's\\t1' contains the control character U+0009; suite "
            "names are printed and typed on the command line");
  const LoadedCases stem = load("cases:\n  - {name: a, kind: echo}\n", "dir/bad\x1B.yaml");
  ASSERT_EQ(stem.errors.size(), 1u);
  EXPECT_EQ(stem.errors[0],
            "dir/bad\\x1B.yaml:1:1: the file's name, the default suite name, contains the "
            "control character U+001B; rename the file or set 'suite:'");
}

TEST(CaseFile, MessagesShortenLongValues) {
  const LoadedCases loaded =
      load("cases:\n  - {name: a, kind: echo, tags: [" + std::string(2000, 'x') + ", \"\"]}\n");
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0],
            "suite.yaml:2:2036: case 'suite/a': key 'tags': expected a non-empty string, got ''");
  const LoadedCases kind = load("cases:\n  - {name: a, kind: [" + std::string(2000, 'k') + "]}\n");
  ASSERT_EQ(kind.errors.size(), 1u);
  const LoadedCases name =
      load("cases:\n  - {name: \"a " + std::string(2000, 'n') + "\", kind: x}\n");
  ASSERT_EQ(name.errors.size(), 1u);
  EXPECT_EQ(name.errors[0], "suite.yaml:2:12: case #1: key 'name': 'a " + std::string(55, 'n') +
                                "...' contains '/' or whitespace; use '-' to separate words");
}

TEST(CaseFile, DirectoriesAreSearchedRecursivelyInSortedOrder) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / "meshgate_case_file_test";
  fs::remove_all(root);
  fs::create_directories(root / "b");
  fs::create_directories(root / "a");
  for (const char* name : {"b/z.yaml", "a/y.yml", "a/x.yaml", "a/notes.txt"}) {
    std::ofstream(root / name) << "cases:\n  - {name: one, kind: echo}\n";
  }
  std::vector<std::string> errors;
  const std::vector<std::string> files = find_case_files({root.string()}, errors);
  EXPECT_TRUE(errors.empty());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(fs::path(files[0]).filename(), "x.yaml");
  EXPECT_EQ(fs::path(files[1]).filename(), "y.yml");
  EXPECT_EQ(fs::path(files[2]).filename(), "z.yaml");
  const LoadedCases loaded = load_cases({root.string(), (root / "missing.yaml").string()});
  EXPECT_EQ(loaded.cases.size(), 3u);
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_NE(loaded.errors[0].find("no such case file or directory"), std::string::npos);
  fs::remove_all(root);
}

}  // namespace
}  // namespace meshgate::runner
