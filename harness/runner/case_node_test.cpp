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
            "f.yaml:2:8: case 's/x': key 'value': expected an integer, got a list; to run the "
            "case once per value, list them under matrix: {value: [...]} and write value: "
            "\"${value}\"");
  EXPECT_EQ(error_of([&] { node.optional<std::string>("text"); }),
            "f.yaml:3:7: case 's/x': key 'text': expected a string, got a list; to run the case "
            "once per value, list them under matrix: {text: [...]} and write text: \"${text}\"");
  EXPECT_EQ(error_of([&] { node.required<int>("absent"); }),
            "f.yaml:1:1: case 's/x': key 'absent': is required (an integer)");
  EXPECT_EQ(error_of([&] { node.required<std::vector<int>>("name"); }),
            "f.yaml:1:7: case 's/x': key 'name': expected a list of integers, got 'x'");
}

TEST(CaseNode, AWholeNumberTooLargeForItsKeySaysTheRange) {
  CaseNode node(YAML::Load("iters: 1000000000000\nshape: [99999999999999999999999, 2]\n"
                           "small: -129\nword: twelve\n"),
                "f.yaml", "s/x");
  EXPECT_EQ(error_of([&] { node.required<int>("iters"); }),
            "f.yaml:1:8: case 's/x': key 'iters': 1000000000000 is out of range: expected an "
            "integer from -2147483648 to 2147483647");
  EXPECT_EQ(error_of([&] { node.required<std::vector<std::int64_t>>("shape"); }),
            "f.yaml:2:9: case 's/x': key 'shape': 99999999999999999999999 is out of range: "
            "expected an integer from -9223372036854775808 to 9223372036854775807");
  EXPECT_EQ(error_of([&] { node.required<std::int8_t>("small"); }),
            "f.yaml:3:8: case 's/x': key 'small': -129 is out of range: expected an integer from "
            "-128 to 127");
  // Not a number at all: the type is what is wrong.
  EXPECT_EQ(error_of([&] { node.required<int>("word"); }),
            "f.yaml:4:7: case 's/x': key 'word': expected an integer, got 'twelve'");
}

// yaml-cpp reads "2" as the number 2; a quoted value is text wherever a number belongs.
TEST(CaseNode, AQuotedNumberIsNoNumber) {
  CaseNode node(YAML::Load("a: \"3\"\nshape: [2, \"2\"]\nplain: [2, 2]\nt: \"3\"\n"), "f.yaml",
                "s/x");
  EXPECT_NE(error_of([&] { node.required<int>("a"); })
                .find("key 'a': expected an integer, got '3' (quoted, so it is text: write it "
                      "without quotes)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { node.required<std::vector<std::int64_t>>("shape"); })
                .find("key 'shape': expected a list of integers"),
            std::string::npos);
  EXPECT_EQ(node.required<std::vector<std::int64_t>>("plain"), (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(node.required<std::string>("t"), "3");
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

// After an early stop the later keys were never asked for: one-letter keys such as n and k
// then looked like typos of m. The kind's vocabulary keeps them known and still suggests.
TEST(CaseNode, AVocabularyKeepsUnreadKeysKnownAndSuggests) {
  CaseNode node(YAML::Load("m: two\nn: 2\nk: 2\nldz: 4\nexpect:\n  shap: [2]\n"), "v.yaml", "s/x");
  EXPECT_EQ(error_of([&] { node.required<int>("m"); }),
            "v.yaml:1:4: case 's/x': key 'm': expected an integer, got 'two'");
  EXPECT_EQ(node.unknown_key_errors(true).size(), 2u);  // n and k, as typos of m
  const std::vector<std::string> vocabulary = {"m", "n", "k", "ldx", "expect", "expect.shape"};
  const std::vector<std::string> errors = node.unknown_key_errors(true, vocabulary);
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_EQ(errors[0], "v.yaml:4:1: case 's/x': key 'ldz': unknown key (did you mean 'ldx'?)");
  // Inside a mapping the kind entered, its dotted keys are the vocabulary of that level.
  node.child("expect");
  const std::vector<std::string> nested = node.unknown_key_errors(true, vocabulary);
  ASSERT_EQ(nested.size(), 2u) << ::testing::PrintToString(nested);
  EXPECT_EQ(nested[1],
            "v.yaml:6:3: case 's/x': key 'expect.shap': unknown key (did you mean 'shape'?)");
}

// A library message that quotes a long value whole once filled the 500-character line before
// its remedy ("expected one of nt, nn, tn, tt"): the value is cut as quote_value cuts it.
TEST(CaseNode, LongValuesInAMessageAreCutLikeAQuotedValue) {
  const std::string value(10000, 'x');
  CaseNode node(YAML::Load("layout: " + value + "\nlist: [a, " + value + "y]\n"), "l.yaml", "s/x");
  const std::string cut = std::string(57, 'x') + "...";
  EXPECT_EQ(error_of([&] {
              node.fail("layout", "ValueError: unknown layout '" + value +
                                      "': expected one of nt, nn, tn, tt");
            }),
            "l.yaml:1:9: case 's/x': key 'layout': ValueError: unknown layout '" + cut +
                "': expected one of nt, nn, tn, tt");
  // Inside a list too, and every time the message repeats it.
  EXPECT_EQ(error_of([&] { node.fail("list", "KeyError: '" + value + "y' or '" + value + "y'"); }),
            "l.yaml:2:7: case 's/x': key 'list': KeyError: '" + cut + "' or '" + cut + "'");
  // A value of another key that the message quotes as well.
  EXPECT_EQ(error_of([&] { node.fail("layout", "not in [" + value + "y]"); }),
            "l.yaml:1:9: case 's/x': key 'layout': not in [" + cut + "]");
  // Short values and text that is not the case's stay as they are.
  EXPECT_EQ(error_of([&] { node.fail("layout", "no 'nt' here"); }),
            "l.yaml:1:9: case 's/x': key 'layout': no 'nt' here");
}

// expect_error is matched against the message as a substring: cutting the text it expects would
// make a long expect_error unmatchable by the very message it names.
TEST(CaseNode, ALongExpectErrorStaysWholeInTheMessage) {
  const std::string expected =
      "avg of int32 is supported by no backend (it would round): use a floating-point dtype";
  CaseNode node(YAML::Load("reduce: avg\nexpect_error: \"" + expected + "\"\n"), "e.yaml", "s/x");
  EXPECT_EQ(error_of([&] { node.fail("reduce", expected + ", or sum"); }),
            "e.yaml:1:9: case 's/x': key 'reduce': " + expected + ", or sum");
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

TEST(CaseNode, LibraryMessagesArePrintedSafely) {
  CaseNode node(YAML::Load("args: [x]\n"), "f.yaml", "s/x");
  // A library that quoted only the first byte of a full-width digit, and an escape sequence.
  EXPECT_EQ(error_of([&] { node.fail("args", "found '\xEF' in \x1B[31m"); }),
            "f.yaml:1:7: case 's/x': key 'args': found '\\xEF' in \\x1B[31m");
}

TEST(Diagnostics, Utf8SequencesAreCheckedStrictly) {
  EXPECT_EQ(utf8_sequence_length("a"), 1u);
  EXPECT_EQ(utf8_sequence_length("\xC3\xA9"), 2u);          // é
  EXPECT_EQ(utf8_sequence_length("\xEF\xBC\x94"), 3u);      // full-width 4
  EXPECT_EQ(utf8_sequence_length("\xF0\x9F\x98\x80"), 4u);  // emoji
  EXPECT_EQ(utf8_sequence_length("\xEF\xBC"), 0u);          // cut short
  EXPECT_EQ(utf8_sequence_length("\xC0\xAF"), 0u);          // overlong
  EXPECT_EQ(utf8_sequence_length("\xED\xA0\x80"), 0u);      // surrogate
  EXPECT_EQ(utf8_sequence_length("\xF4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(utf8_sequence_length("\x80"), 0u);
  EXPECT_EQ(first_control_character("tab\there"), "U+0009");
  EXPECT_EQ(first_control_character("\xC2\x9B"), "U+009B");
  EXPECT_EQ(first_control_character("dp_tp"), std::nullopt);
}

TEST(Diagnostics, PrintableEscapesWhatATerminalWouldObey) {
  EXPECT_EQ(printable("a\x1B[31mb\tc\rd\x7F"), "a\\x1B[31mb\\tc\\rd\\x7F");
  EXPECT_EQ(printable("one\ntwo"), "one\\ntwo");
  EXPECT_EQ(printable("one\ntwo", /*keep_newlines=*/true), "one\ntwo");
  EXPECT_EQ(printable("\xC2\x9B"
                      "2J"),
            "\\u009B2J");  // C1 CSI
  EXPECT_EQ(printable("abc\xE2\x80\xAE"
                      "def"),
            "abc\\u202Edef");  // right-to-left override
  EXPECT_EQ(printable("x\xFF\xEF\xBC"), "x\\xFF\\xEF\\xBC");
  EXPECT_EQ(printable("\xEF\xBC\x94:1 \xC3\xA9"), "\xEF\xBC\x94:1 \xC3\xA9");
  const std::string once = printable(
      "a\x1B\xFF"
      "b");
  EXPECT_EQ(printable(once), once);
}

TEST(Diagnostics, LongLinesAreCutOnCharacterBoundaries) {
  std::string digits;
  for (int i = 0; i < 600; ++i) digits += "\xEF\xBC\x94";  // 600 three-byte characters
  const std::string message = message_text("first line\n" + digits + "\nlast");
  const std::size_t first = message.find('\n');
  const std::size_t second = message.find('\n', first + 1);
  ASSERT_NE(second, std::string::npos);
  EXPECT_EQ(message.substr(0, first), "first line");
  EXPECT_EQ(message.substr(second + 1), "last");
  const std::string cut = message.substr(first + 1, second - first - 1);
  const std::string marker = " ... (126 more characters)";
  ASSERT_GT(cut.size(), marker.size());
  EXPECT_EQ(cut.substr(cut.size() - marker.size()), marker);
  // 474 whole characters and the marker: 500 characters, no byte of a character left over.
  EXPECT_EQ(cut.size() - marker.size(), 474u * 3);
  EXPECT_EQ(printable(cut), cut);
  EXPECT_EQ(message_text(message), message);
  EXPECT_EQ(message_text(std::string(500, 'x')), std::string(500, 'x'));
  EXPECT_EQ(quote_value(std::string(100, 'y')), "'" + std::string(57, 'y') + "...'");
}

}  // namespace
}  // namespace meshgate::runner
