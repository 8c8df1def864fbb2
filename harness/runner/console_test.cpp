#include "console.hpp"
#include "diagnostics.hpp"

#include <gtest/gtest.h>

#include <sstream>

namespace meshgate::runner {
namespace {

TEST(Printable, KeepsTextAndUtf8AsTheyAre) {
  EXPECT_EQ(printable("layout/coalesce-a (2,4):(4,1) <b>|`"),
            "layout/coalesce-a (2,4):(4,1) <b>|`");
  EXPECT_EQ(printable("fw-\uFF12 \u00e9 \U0001F600"), "fw-\uFF12 \u00e9 \U0001F600");
}

TEST(Printable, WritesControlsAndEscapeSequencesVisibly) {
  EXPECT_EQ(printable("bell\a-esc\x1b[31mred\x1b[0m"), "bell\\x07-esc\\x1B[31mred\\x1B[0m");
  EXPECT_EQ(printable(std::string("nul\0del\x7f", 8)), "nul\\x00del\\x7F");
  EXPECT_EQ(printable("a\nb\rc\td"), "a\\nb\\rc\\td");
  // C1 controls (U+009B is an 8-bit CSI), the line separator and a bidi override.
  EXPECT_EQ(printable("x\u009by\u2028z\u202e"), "x\\u009By\\u2028z\\u202E");
}

TEST(Printable, WritesBytesThatAreNotUtf8AsHex) {
  EXPECT_EQ(printable("cut \xef\xbc"), "cut \\xEF\\xBC");            // a character cut in half
  EXPECT_EQ(printable("stray \x80 end"), "stray \\x80 end");         // continuation alone
  EXPECT_EQ(printable("overlong \xc0\xaf"), "overlong \\xC0\\xAF");  // '/' in two bytes
  EXPECT_EQ(printable("surrogate \xed\xa0\x80"), "surrogate \\xED\\xA0\\x80");
}

TEST(ConsoleEnd, HumanLinesShowControlCharactersInNamesAndMessages) {
  std::ostringstream out;
  Console console(out, /*progress=*/false);
  const nlohmann::ordered_json row = {{"id", "s/\x1b[2Jwipe"},
                                      {"status", "fail"},
                                      {"message", "expected 8:1\ngot \x1b[31m8:2\x07"},
                                      {"seconds", 0.001}};
  console.end(row, 1, 1);
  EXPECT_EQ(out.str(),
            "[1/1] fail   s/\\x1B[2Jwipe  (1.0 ms)\n"
            "      expected 8:1\n"
            "      got \\x1B[31m8:2\\x07\n");
}

}  // namespace
}  // namespace meshgate::runner
