#include "layout/int_tuple.hpp"

#include <gtest/gtest.h>

#include <string>
#include <unordered_set>

#include "core/error.hpp"
#include "layout/layout_test_support.hpp"
#include "layout/random_layouts_test.hpp"

namespace meshgate {
namespace {

using namespace meshgate::testing;

TEST(IntTuple, ConstructionAndAccess) {
  const IntTuple eight = 8;
  EXPECT_TRUE(eight.is_int());
  EXPECT_EQ(eight.value(), 8);
  EXPECT_EQ(rank(eight), 1u);

  const IntTuple empty;
  EXPECT_FALSE(empty.is_int());
  EXPECT_EQ(empty.length(), 0u);
  EXPECT_EQ(to_string(empty), "()");

  const IntTuple t = IntTuple::tuple({2, IntTuple::tuple({1, 6})});
  EXPECT_EQ(t.length(), 2u);
  EXPECT_EQ(rank(t), 2u);
  EXPECT_EQ(t[0], IntTuple(2));
  EXPECT_EQ(t[1], IntTuple::tuple({1, 6}));
  EXPECT_EQ(t[1][1].value(), 6);
  ASSERT_EQ(t.elements().size(), 2u);
  EXPECT_EQ(t.elements()[1], T("(1,6)"));
}

TEST(IntTuple, AccessErrorsNameTheKind) {
  const IntTuple t = T("(2,3)");
  EXPECT_EQ(error_of([&] { (void)t.value(); }).kind(), ErrorKind::type);
  EXPECT_EQ(error_of([&] { (void)IntTuple(8).length(); }).kind(), ErrorKind::type);
  EXPECT_EQ(error_of([&] { (void)IntTuple(8).elements(); }).kind(), ErrorKind::type);
  const Error out = error_of([&] { (void)t[2]; });
  EXPECT_EQ(out.kind(), ErrorKind::index);
  EXPECT_NE(std::string(out.what()).find("(2,3)"), std::string::npos);
}

TEST(IntTuple, StructuralEqualityDistinguishesIntFromSingleton) {
  EXPECT_NE(IntTuple(8), T("(8)"));
  EXPECT_EQ(T("(8)"), T("(8,)"));
  EXPECT_NE(T("(2,(3))"), T("(2,3)"));
  EXPECT_NE(T("()"), T("(())"));
  EXPECT_EQ(T("((2,3),4)"), IntTuple::tuple({IntTuple::tuple({2, 3}), 4}));
  EXPECT_NE(IntTuple(8).hash(), T("(8)").hash());
  EXPECT_EQ(std::hash<IntTuple>{}(T("(2,(1,6))")), T(" ( 2 , ( 1 , 6 ) ) ").hash());
  std::unordered_set<IntTuple> set{IntTuple(8), T("(8)"), T("(8,)"), T("()")};
  EXPECT_EQ(set.size(), 3u);
}

TEST(IntTuple, ParseAndPrintCuteNotation) {
  EXPECT_EQ(T("8"), IntTuple(8));
  EXPECT_EQ(to_string(T("(8)")), "(8)");
  EXPECT_EQ(to_string(T("(8,)")), "(8)");
  EXPECT_EQ(to_string(T("(2,(1,6))")), "(2,(1,6))");
  EXPECT_EQ(to_string(T("()")), "()");
  EXPECT_EQ(to_string(T("( )")), "()");
  EXPECT_EQ(to_string(T("  ( 2 ,\t( 1,6 ) )  ")), "(2,(1,6))");
  EXPECT_EQ(T("-3"), IntTuple(-3));
  EXPECT_EQ(to_string(T("(-1,(2,-6))")), "(-1,(2,-6))");
  EXPECT_EQ(to_string(T("((),(()))")), "((),(()))");
  EXPECT_EQ(to_string(T("((2,3),)")), "((2,3))");
}

TEST(IntTuple, ParseErrorsNameThePosition) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"(2,(1", "expected ',' or ')' at column 5 in '(2,(1'"},
      {"", "expected an integer or '(' at column 0 in ''"},
      {"(2,,3)", "expected an integer or '(' at column 3 in '(2,,3)'"},
      {"(2 3)", "expected ',' or ')' at column 3 in '(2 3)'"},
      {"(2,3))", "expected end of text at column 5 in '(2,3))'"},
      {"x", "expected an integer or '(' at column 0 in 'x'"},
      {"(,)", "expected an integer or '(' at column 1 in '(,)'"},
      {"-", "expected an integer or '(' at column 0 in '-'"},
      {"8:1", "expected end of text at column 1 in '8:1'"},
      // A character outside ASCII is quoted whole (columns count bytes): full-width digits.
      {"(\uFF12,\uFF14)", "at column 1 in '(\uFF12,\uFF14)' (found '\uFF12')"},
      {"8\u00e9", "at column 1 in '8\u00e9' (found '\u00e9')"},
      {"(2,\U0001F600)", "(found '\U0001F600')"},
  };
  for (const Case& c : cases) {
    const Error e = error_of([&] { (void)T(c.text); });
    EXPECT_EQ(e.kind(), ErrorKind::value) << c.text;
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
        << c.text << " -> " << e.what();
  }
  const std::string deep = std::string(100, '(') + "1" + std::string(100, ')');
  const Error nested = error_of([&] { (void)T(deep); });
  EXPECT_EQ(nested.kind(), ErrorKind::value);
  EXPECT_NE(std::string(nested.what()).find("deeper than 64 levels at column 64"),
            std::string::npos)
      << nested.what();
  EXPECT_EQ(to_string(T(std::string(64, '(') + "1" + std::string(64, ')'))).size(), 129u);
  const Error big = error_of([] { (void)T("(99999999999999999999)"); });
  EXPECT_EQ(big.kind(), ErrorKind::value);
  EXPECT_NE(std::string(big.what()).find("column 1"), std::string::npos) << big.what();
}

TEST(IntTuple, ProductLeavesFlattenRank) {
  EXPECT_EQ(product(T("(2,(1,6))")), 12);
  EXPECT_EQ(product(T("()")), 1);
  EXPECT_EQ(product(IntTuple(7)), 7);
  EXPECT_EQ(leaves(T("((2,3),(4,(5)))")), (std::vector<std::int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(leaves(IntTuple(4)), (std::vector<std::int64_t>{4}));
  EXPECT_EQ(flatten(T("((2,3),(4,(5)))")), T("(2,3,4,5)"));
  EXPECT_EQ(flatten(IntTuple(4)), IntTuple(4));
  EXPECT_EQ(flatten(T("(4)")), T("(4)"));
  EXPECT_EQ(flatten(T("(())")), T("()"));
  EXPECT_EQ(rank(T("((2,3),4)")), 2u);
}

TEST(IntTuple, SuffixProductIsLexicographic) {
  EXPECT_EQ(suffix_product(T("(2,(2,3))")), T("(6,(3,1))"));
  EXPECT_EQ(suffix_product(T("(2,4)")), T("(4,1)"));
  EXPECT_EQ(suffix_product(IntTuple(8)), IntTuple(1));
  EXPECT_EQ(suffix_product(T("(2,3)"), 5), T("(15,5)"));
  EXPECT_EQ(suffix_product(T("((2,3),(4,5))")), T("((60,20),(5,1))"));
  EXPECT_EQ(suffix_product(T("()")), T("()"));
}

TEST(IntTuple, MatchStructure) {
  EXPECT_TRUE(match_structure(IntTuple(2), IntTuple(7)));
  EXPECT_TRUE(match_structure(T("(2,(1,6))"), T("(1,(6,2))")));
  EXPECT_FALSE(match_structure(T("(2,3)"), T("(1)")));
  EXPECT_FALSE(match_structure(T("(8)"), IntTuple(1)));
  EXPECT_FALSE(match_structure(T("(2,(3,4))"), T("((2,3),4)")));
  EXPECT_TRUE(match_structure(T("()"), T("()")));
}

TEST(IntTuple, Crd2IdxExamples) {
  const IntTuple shape = T("(2,(2,3))");
  EXPECT_EQ(crd2idx(T("(1,(1,2))"), shape), 11);
  EXPECT_EQ(crd2idx(IntTuple(11), shape), 11);
  EXPECT_EQ(crd2idx(T("(1,4)"), shape), 10);
  // An int coordinate is split right to left; mode 0 keeps the unreduced remainder.
  EXPECT_EQ(crd2idx(IntTuple(7), T("(2,3)"), T("(1,2)")), 1 * 2 + 2 * 1);
  EXPECT_EQ(crd2idx(IntTuple(13), T("(2,3)"), T("(1,2)")), 4 * 1 + 1 * 2);
  EXPECT_EQ(crd2idx(IntTuple(5), T("(2,(2,3))"), T("(1,(6,2))")), 0 + 6 + 4);
  EXPECT_EQ(crd2idx(IntTuple(3), IntTuple(8), IntTuple(5)), 15);
  EXPECT_EQ(crd2idx(IntTuple(3), T("()"), T("()")), 0);
  // Python floor semantics for negative coordinates: -1 on (2,3) is (-1, 2).
  EXPECT_EQ(crd2idx(IntTuple(-1), T("(2,3)")), -3 + 2);
}

TEST(IntTuple, Crd2IdxErrors) {
  EXPECT_EQ(error_of([] { (void)crd2idx(T("(1,2)"), IntTuple(4), IntTuple(1)); }).kind(),
            ErrorKind::assertion);
  EXPECT_EQ(error_of([] { (void)crd2idx(T("(1,2,3)"), T("(2,3)")); }).kind(), ErrorKind::assertion);
  EXPECT_EQ(error_of([] { (void)crd2idx(IntTuple(1), T("(2,3)"), IntTuple(1)); }).kind(),
            ErrorKind::assertion);
  EXPECT_EQ(error_of([] { (void)crd2idx(IntTuple(1), T("(3,0)"), T("(0,1)")); }).kind(),
            ErrorKind::value);
}

// Python divides INT64_MIN by -1 exactly; in int64 the quotient does not fit and the
// instruction traps, so the modes of size or stride -1 must be handled before dividing.
TEST(IntTuple, DivisionOfInt64MinByMinusOneIsAnError) {
  const Error crd = error_of([] { (void)crd2idx(IntTuple(INT64_MIN), T("(2,-1)")); });
  EXPECT_EQ(crd.kind(), ErrorKind::value);
  EXPECT_TRUE(contains(crd, "integer overflow in crd2idx")) << crd.what();
  const Error idx = error_of([] { (void)idx2crd(IntTuple(INT64_MIN), IntTuple(4), IntTuple(-1)); });
  EXPECT_EQ(idx.kind(), ErrorKind::value);
  EXPECT_TRUE(contains(idx, "integer overflow in idx2crd")) << idx.what();
  // The remainder by -1 is 0 in Python and needs no division.
  EXPECT_EQ(idx2crd(IntTuple(INT64_MIN + 1), IntTuple(-1), IntTuple(-1)), IntTuple(0));
  EXPECT_EQ(crd2idx(IntTuple(INT64_MIN), T("(-1,1)"), T("(0,5)")), 0);
}

TEST(IntTuple, Idx2CrdExamples) {
  EXPECT_EQ(idx2crd(IntTuple(11), T("(2,(2,3))")), T("(1,(1,2))"));
  EXPECT_EQ(idx2crd(IntTuple(5), T("(2,3)")), T("(1,2)"));
  EXPECT_EQ(idx2crd(IntTuple(5), IntTuple(4)), IntTuple(1));
  EXPECT_EQ(idx2crd(IntTuple(9), T("(2,3)"), T("(1,2)")), T("(1,1)"));
  EXPECT_EQ(idx2crd(T("(5,7)"), T("(2,(2,3))")), T("(0,(0,1))"));
  EXPECT_EQ(error_of([] { (void)idx2crd(T("(1,2)"), IntTuple(4)); }).kind(), ErrorKind::assertion);
  EXPECT_EQ(error_of([] { (void)idx2crd(IntTuple(3), T("(2,3)"), IntTuple(1)); }).kind(),
            ErrorKind::assertion);
}

// @post crd2idx(idx2crd(i, S), S) == i for all i < product(S), and the coordinate lies in S.
TEST(IntTupleContract, Crd2IdxIdx2CrdRoundTrip) {
  testing::LayoutGenerator gen(0x1d2c);
  int checked = 0;
  for (int n = 0; n < 1500; ++n) {
    const IntTuple shape = gen.nest(gen.extents(5, 256, gen.coin()));
    const std::int64_t total = product(shape);
    for (std::int64_t i = 0; i < total; ++i) {
      const IntTuple crd = idx2crd(IntTuple(i), shape);
      ASSERT_TRUE(match_structure(crd, shape)) << to_string(shape) << " i=" << i;
      const std::vector<std::int64_t> c = leaves(crd);
      const std::vector<std::int64_t> s = leaves(shape);
      for (std::size_t k = 0; k < c.size(); ++k) ASSERT_TRUE(c[k] >= 0 && c[k] < s[k]);
      ASSERT_EQ(crd2idx(crd, shape), i) << to_string(shape) << " crd=" << to_string(crd);
      ASSERT_EQ(crd2idx(IntTuple(i), shape), i) << to_string(shape);
      ++checked;
    }
  }
  EXPECT_GT(checked, 50000);
}

TEST(IntTupleContract, ParsePrintRoundTrip) {
  testing::LayoutGenerator gen(0x5eed);
  for (int n = 0; n < 3000; ++n) {
    std::vector<std::int64_t> values = gen.extents(6, 1 << 20, false);
    for (auto& v : values) v *= gen.coin(0.2) ? -1 : 1;
    const IntTuple t = gen.nest(values);
    const std::string text = to_string(t);
    ASSERT_EQ(parse_int_tuple(text), t) << text;
    ASSERT_EQ(parse_int_tuple(text).hash(), t.hash()) << text;
    ASSERT_EQ(IntTuple(t), t);
  }
}

// Arbitrary text either parses to a value that prints back to itself or is rejected with
// Error(value) naming a column inside the text.
TEST(IntTupleContract, ParseRejectsGarbageCleanly) {
  testing::LayoutGenerator gen(0xbad);
  const std::string alphabet = "()(),,0123456789- x";
  int parsed = 0;
  int rejected = 0;
  for (int n = 0; n < 20000; ++n) {
    std::string text;
    const auto len = gen.uniform(0, 12);
    for (std::int64_t i = 0; i < len; ++i) {
      text += alphabet[static_cast<std::size_t>(
          gen.uniform(0, static_cast<std::int64_t>(alphabet.size()) - 1))];
    }
    try {
      const IntTuple t = parse_int_tuple(text);
      ASSERT_EQ(parse_int_tuple(to_string(t)), t) << text;
      ++parsed;
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::value) << text;
      ASSERT_NE(std::string(e.what()).find("column"), std::string::npos) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(parsed, 100);
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace meshgate
