#include "yaml_prescan.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace meshgate::runner {
namespace {

std::vector<std::string> scan(const std::string& text, const CaseFileLimits& limits = {}) {
  return prescan_case_text(text, "f.yaml", limits);
}

// Anchors a0..a<levels-1>, each a list of `width` aliases of the one before: width^levels nodes.
std::string alias_bomb(int levels, int width) {
  std::string text = "a0: &a0 [x]\n";
  for (int level = 1; level < levels; ++level) {
    text += "a" + std::to_string(level) + ": &a" + std::to_string(level) + " [";
    for (int i = 0; i < width; ++i) text += (i ? ", *a" : "*a") + std::to_string(level - 1);
    text += "]\n";
  }
  return text;
}

TEST(YamlPrescan, AcceptsAnOrdinaryCaseFile) {
  EXPECT_EQ(scan("suite: s\ndefaults: &d {tags: [smoke]}\ncases:\n  - {name: a, kind: echo}\n"
                 "  - {name: b, kind: echo, copy: *d}\n"),
            std::vector<std::string>{});
}

TEST(YamlPrescan, AliasInsideItsOwnAnchorIsRefused) {
  EXPECT_EQ(scan("cases:\n  - args: &x [\"4:1\", *x]\n"),
            std::vector<std::string>{"f.yaml:2:22: alias '*x' refers to the anchor '&x' at line 2 "
                                     "that contains it: the value would contain itself forever"});
  // Deeper inside: a case that holds itself through a mapping.
  const std::vector<std::string> errors =
      scan("cases:\n  - &c\n    name: a\n    more: {again: [*c]}\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rfind("f.yaml:4:20: alias '*c'", 0), 0u) << errors[0];
  // A finished anchor may be repeated.
  EXPECT_TRUE(scan("a: &x [1, 2]\nb: [*x, *x]\n").empty());
}

TEST(YamlPrescan, AliasBombStopsAtTheNodeLimit) {
  const std::vector<std::string> errors = scan(alias_bomb(9, 9));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rfind("f.yaml:6:40: ", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find("alias '*a4' brings the YAML nodes that aliases add to the file past "
                           "100000"),
            std::string::npos)
      << errors[0];
  CaseFileLimits limits;
  limits.max_alias_nodes = 40;
  // Aliases of a 2-node list: a1 adds 3 x 2 nodes, a2 3 x (1 + 6) = 21; a3 would add 66 more.
  EXPECT_EQ(scan(alias_bomb(3, 3), limits), std::vector<std::string>{});
  EXPECT_EQ(scan(alias_bomb(4, 3), limits).size(), 1u);
}

TEST(YamlPrescan, NodesWrittenOutHaveALimitOfTheirOwn) {
  CaseFileLimits limits;
  limits.max_written_nodes = 5;
  EXPECT_EQ(scan("a: [1, 2]\n", limits), std::vector<std::string>{});  // map, key, list, 1, 2
  EXPECT_EQ(scan("a: [1, 2, 3]\n", limits),
            std::vector<std::string>{"f.yaml:1:11: the file holds more than 5 YAML nodes, the "
                                     "limit for a case file (more than its cases may hold once "
                                     "expanded); split the file"});
}

TEST(YamlPrescan, NodesWrittenOutDoNotCountAgainstTheAliasLimit) {
  CaseFileLimits limits;
  limits.max_alias_nodes = 10;
  // 2,000 written lists of 3 scalars: 8,001 nodes, none of them from an alias.
  std::string written = "cases:\n";
  for (int i = 0; i < 2000; ++i) written += "  - [a, b, c]\n";
  EXPECT_EQ(scan(written, limits), std::vector<std::string>{});
  // Three aliases of a written 4-node list add 12 nodes.
  const std::vector<std::string> errors = scan("a: &x [1, 2, 3]\nb: [*x, *x, *x]\n", limits);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "f.yaml:2:13: alias '*x' brings the YAML nodes that aliases add to the "
                       "file past 10, the limit for a case file (it guards against alias "
                       "bombs); write the values out or split the file");
}

TEST(YamlPrescan, NestingIsLimitedWithAliasesExpanded) {
  CaseFileLimits limits;
  limits.max_depth = 4;
  EXPECT_TRUE(scan("a: [[x]]\n", limits).empty());  // map, list, list, scalar
  const std::vector<std::string> errors = scan("a: [[[x]]]\n", limits);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0],
            "f.yaml:1:7: this value nests deeper than 4 levels of mappings and lists (aliases "
            "expanded), the limit for a case file");
  const std::vector<std::string> through_alias = scan("a: &x [[x]]\nb: [*x]\n", limits);
  ASSERT_EQ(through_alias.size(), 1u);
  EXPECT_EQ(through_alias[0].rfind("f.yaml:2:5: alias '*x' nests deeper than 4", 0), 0u)
      << through_alias[0];
}

// A limit's message comes alone, even after other problems deeper in the same value.
TEST(YamlPrescan, TheDepthErrorComesAlone) {
  CaseFileLimits limits;
  limits.max_depth = 6;
  const std::vector<std::string> errors =
      scan("a:\n  ? [k]\n  : {? [k]\n     : {? [k]\n        : [[[[[x]]]]]}}\n", limits);
  ASSERT_EQ(errors.size(), 1u) << errors[0];
  EXPECT_NE(errors[0].find("nests deeper than 6 levels"), std::string::npos) << errors[0];
}

// yaml-cpp ignores tags: `kind: !!python/object:os.system layout` would load as "layout".
TEST(YamlPrescan, TagsOtherThanYamlsCoreTypesAreRefused) {
  EXPECT_EQ(scan("kind: !!python/object:os.system layout\n"),
            std::vector<std::string>{
                "f.yaml:1:7: the YAML tag '!!python/object:os.system' is not allowed; case files "
                "use no tags but YAML's core types (!!str, !!int, !!float, !!bool, !!null): write "
                "the value plainly"});
  EXPECT_EQ(scan("a: !custom {k: 1}\nb: !<tag:x> [1]\n").size(), 2u);
  EXPECT_TRUE(scan("a: !!str 12\nb: !!int 3\nc: \"quoted\"\nd: plain\n").empty());
}

TEST(YamlPrescan, DuplicateAndNonStringKeysAreAllReported) {
  EXPECT_EQ(scan("cases:\n  - name: a\n    op: size\n    op: coalesce\n    x: {k: 1, k: 2}\n"),
            (std::vector<std::string>{
                "f.yaml:4:5: key 'op': defined twice in this mapping, first at line 3; remove one "
                "(YAML keeps only one of them)",
                "f.yaml:5:15: key 'k': defined twice in this mapping, first at line 5; remove one "
                "(YAML keeps only one of them)"}));
  // An alias used as a key stands for its scalar.
  EXPECT_EQ(scan("a: {&k op: 1, *k : 2}\n").size(), 1u);
  EXPECT_EQ(scan("? [a, b]\n: 1\n"),
            std::vector<std::string>{"f.yaml:1:3: a mapping key must be a string; case files have "
                                     "no null, list or mapping keys"});
  // The same key in two mappings is fine.
  EXPECT_TRUE(scan("a: {k: 1}\nb: {k: 2}\n").empty());
}

TEST(YamlPrescan, ASecondDocumentIsRefused) {
  EXPECT_EQ(scan("cases: []\n---\ncases: []\n"),
            std::vector<std::string>{"f.yaml:2:1: a second YAML document starts here; a case "
                                     "file holds one document (remove the '---' line or move "
                                     "the cases into the first document)"});
  EXPECT_TRUE(scan("---\ncases: []\n").empty());
}

TEST(YamlPrescan, EmptyFilesNameTheFile) {
  const std::vector<std::string> expected = {
      "f.yaml: the file is empty; a case file is a mapping with 'cases' (and optionally 'suite', "
      "'defaults')"};
  EXPECT_EQ(scan(""), expected);
  EXPECT_EQ(scan("# only a comment\n\n"), expected);
}

TEST(YamlPrescan, OtherEncodingsAreNamed) {
  const auto encoding_error = [](const std::string& text) {
    const std::vector<std::string> errors = scan(text);
    return errors.size() == 1 ? errors[0] : "no single error";
  };
  const std::string tail = "; case files must be UTF-8 (convert it, e.g. with iconv -t UTF-8)";
  EXPECT_EQ(encoding_error(std::string("\xFF\xFE"
                                       "c\0a\0",
                                       6)),
            "f.yaml: the file is encoded as UTF-16 (little-endian, with a byte-order mark)" + tail);
  EXPECT_EQ(encoding_error(std::string("\xFE\xFF\0c\0a", 6)),
            "f.yaml: the file is encoded as UTF-16 (big-endian, with a byte-order mark)" + tail);
  EXPECT_EQ(encoding_error(std::string("c\0a\0", 4)),
            "f.yaml: the file is encoded as UTF-16 (little-endian)" + tail);
  EXPECT_EQ(encoding_error(std::string("\0\0\xFE\xFF\0\0\0c", 8)),
            "f.yaml: the file is encoded as UTF-32 (big-endian, with a byte-order mark)" + tail);
  EXPECT_EQ(encoding_error(std::string("c\0\0\0", 4)),
            "f.yaml: the file is encoded as UTF-32 (little-endian)" + tail);
  // UTF-8 with a byte-order mark is UTF-8.
  EXPECT_TRUE(scan("\xEF\xBB\xBF"
                   "cases: []\n")
                  .empty());
}

TEST(YamlPrescan, BytesThatAreNotUtf8AreRefusedWithTheirPlace) {
  const std::string tail =
      "; case files are UTF-8 text with no control characters but tab and line breaks";
  EXPECT_EQ(scan("a: 1\nb: x\xFFy\n"),
            std::vector<std::string>{"f.yaml:2:5: a byte that is not UTF-8 (0xFF)" + tail});
  // An overlong '/', a UTF-16 surrogate and a character cut short are not UTF-8 either.
  EXPECT_EQ(scan("a: \xC0\xAF\n").size(), 1u);
  EXPECT_EQ(scan("a: \xED\xA0\x80\n").size(), 1u);
  EXPECT_EQ(scan("a: \xEF\xBC").size(), 1u);
  EXPECT_TRUE(scan("a: \"\xEF\xBC\x94:1\"\n").empty());  // a full-width digit is fine
}

TEST(YamlPrescan, ControlCharactersAreRefusedRawOrEscaped) {
  EXPECT_EQ(scan("a: x\x1B[31m\n"),
            std::vector<std::string>{"f.yaml:1:5: the control character U+001B; case files are "
                                     "UTF-8 text with no control characters but tab and line "
                                     "breaks"});
  EXPECT_EQ(scan("a: \"red\\e[31m\"\n"),
            std::vector<std::string>{"f.yaml:1:4: a string holds the control character U+001B "
                                     "(written as an escape); case files hold no control "
                                     "characters but tab and line breaks"});
  EXPECT_EQ(scan("a: \"\\u0085\"\n").size(), 1u);  // C1 controls too
  EXPECT_TRUE(scan("a:\tx\r\nb: \"tab\\there\"\r\n").empty());
}

TEST(YamlPrescan, LargeFilesAreRefusedBeforeParsing) {
  CaseFileLimits limits;
  limits.max_file_bytes = 10;
  EXPECT_EQ(scan("cases: [1, 2, 3]\n", limits),
            std::vector<std::string>{"f.yaml: the file has 17 bytes, above the limit of 10 bytes "
                                     "for a case file; split it"});
}

TEST(YamlPrescan, SyntaxErrorsComeAlone) {
  EXPECT_EQ(scan("cases:\n  - {name: z, kind: probe, value: 1"),
            std::vector<std::string>{"f.yaml:2:1: invalid YAML: end of map flow not found"});
}

}  // namespace
}  // namespace meshgate::runner
