#include "filter.hpp"

#include <gtest/gtest.h>

namespace meshgate::runner {
namespace {

CaseSpec spec(std::string suite, std::string name, std::vector<std::string> tags) {
  CaseSpec s;
  s.suite = std::move(suite);
  s.name = std::move(name);
  s.id = s.suite + "/" + s.name;
  s.tags = std::move(tags);
  return s;
}

TEST(Filter, GlobMatchesLikeFnmatch) {
  EXPECT_TRUE(glob_match("layout/coalesce-*", "layout/coalesce-x"));
  EXPECT_FALSE(glob_match("layout/coalesce-*", "layout/composition"));
  EXPECT_TRUE(glob_match("*/a?c", "s/abc"));
  EXPECT_FALSE(glob_match("*/a?c", "s/abbc"));
  EXPECT_TRUE(glob_match("s/[ab]-*", "s/b-1"));
  EXPECT_FALSE(glob_match("s/[!ab]-*", "s/b-1"));
  EXPECT_TRUE(glob_match("s/[0-9]", "s/7"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("a*b*c", "a-b-x-c"));
  EXPECT_FALSE(glob_match("a*b*c", "a-b-x-d"));
}

CaseFilter filter(std::vector<std::string> suites, std::vector<std::string> tags,
                  std::vector<std::string> patterns) {
  CaseFilter f;
  f.suites = std::move(suites);
  f.tags = std::move(tags);
  f.case_patterns = std::move(patterns);
  return f;
}

TEST(Filter, AllGivenCriteriaMustHold) {
  const CaseSpec a = spec("layout", "coalesce-1", {"smoke"});
  const CaseSpec b = spec("mesh", "flatten", {"nightly"});
  EXPECT_TRUE(selects({}, a));
  EXPECT_TRUE(selects(filter({"layout"}, {}, {}), a));
  EXPECT_FALSE(selects(filter({"layout"}, {}, {}), b));
  EXPECT_TRUE(selects(filter({}, {"nightly", "smoke"}, {}), b));
  EXPECT_FALSE(selects(filter({}, {"premerge"}, {}), a));
  EXPECT_TRUE(selects(filter({}, {}, {"mesh/flatten"}), b));
  EXPECT_TRUE(selects(filter({}, {}, {"layout/coalesce-*"}), a));
  EXPECT_FALSE(selects(filter({"layout"}, {"nightly"}, {}), a));
  const std::vector<CaseSpec> selected =
      select_cases(filter({}, {"smoke"}, {}), std::vector<CaseSpec>{a, b});
  ASSERT_EQ(selected.size(), 1u);
  EXPECT_EQ(selected[0].id, "layout/coalesce-1");
}

}  // namespace
}  // namespace meshgate::runner
