#include "case_file.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace meshgate::runner {
namespace {

LoadedCases load(const std::string& text, const std::string& file = "suite.yaml") {
  LoadedCases out;
  load_case_text(text, file, out);
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
            "suite.yaml:3:12; names must be unique in a suite (use ${...} with a matrix)");
}

TEST(CaseFile, MatrixWithoutNameVariableDuplicates) {
  const LoadedCases loaded = load(
      "cases:\n"
      "  - {name: a, kind: echo, matrix: {x: [1, 2]}}\n");
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_NE(loaded.errors[0].find("duplicate case id"), std::string::npos);
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
