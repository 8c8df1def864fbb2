// meshgate-plan's command line: remedies that work when followed, a bounded mesh size, and
// sizes the planner cannot count reported as plain errors (exit 2, never an exception).
#include "plan_command.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace meshgate::runner {
namespace {

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result plan(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  Result r;
  r.code = plan_command(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Before, an unnamed mesh was told to "register one with --flatten 0,1", which then failed
// with "Cannot slice a DeviceMesh without mesh_dim_names!".
TEST(PlanCommand, AnUnnamedMeshIsToldToNameItsDimsAndTheRemedyWorks) {
  const Result unnamed = plan({"--mesh", "2x2", "--from", "P(sum),P(sum)", "--to", "R,R"});
  ASSERT_EQ(unnamed.code, 0) << unnamed.err;
  EXPECT_NE(unnamed.out.find("not merged (no_flattened_mesh): the mesh has no dim names, and only "
                             "a named mesh has flattened dims; name them and register one, e.g. "
                             "--mesh 2x2:A,B --flatten A,B"),
            std::string::npos)
      << unnamed.out;
  const Result flatten_unnamed =
      plan({"--mesh", "2x2", "--flatten", "0,1", "--from", "P(sum),P(sum)", "--to", "R,R"});
  EXPECT_EQ(flatten_unnamed.code, 2);
  EXPECT_NE(flatten_unnamed.err.find("--flatten needs a mesh with dim names: write --mesh 2x2:A,B"),
            std::string::npos)
      << flatten_unnamed.err;
  const Result followed =
      plan({"--mesh", "2x2:A,B", "--flatten", "A,B", "--from", "P(sum),P(sum)", "--to", "R,R"});
  ASSERT_EQ(followed.code, 0) << followed.err;
  EXPECT_NE(followed.out.find("collectives issued: all_reduce(A+B, sum)"), std::string::npos)
      << followed.out;
  // A named mesh keeps its own remedy.
  const Result named =
      plan({"--mesh", "2x2x2:A,B,C", "--from", "P(sum),R,P(sum)", "--to", "R,R,R"});
  EXPECT_NE(named.out.find("register one with --flatten A,C"), std::string::npos) << named.out;
}

// Before, 16384x16384 took 34 s and 10 GB, 32768x32768 was killed for memory and 65536x65536
// aborted with an uncaught std::bad_alloc (exit 134).
TEST(PlanCommand, MeshesAboveTheRankLimitAreUsageErrors) {
  for (const char* mesh : {"16384x16384:A,B", "65536x65536:A,B",
                           "4294967296x4294967296x4294967296:A,B,C", "4096x1025:A,B"}) {
    const Result r = plan({"--mesh", mesh, "--from", "P(sum),P(sum)", "--to", "R,R"});
    EXPECT_EQ(r.code, 2) << mesh;
    EXPECT_NE(r.err.find(std::string("--mesh ") + mesh + ": more than 4194304 (2^22) ranks"),
              std::string::npos)
        << r.err;
  }
  const Result largest =
      plan({"--mesh", "2048x2048:A,B", "--from", "P(sum),P(sum)", "--to", "R,R"});
  EXPECT_EQ(largest.code, 0) << largest.err;
  const Result zero = plan({"--mesh", "0x4:A,B", "--from", "R,R", "--to", "R,R"});
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.err.find("every dim needs at least one rank, got 0"), std::string::npos);
}

// Before: "chunk_range(size=-4611686018427387904, ...)" from an overflowing padding.
TEST(PlanCommand, ATensorTooLargeToCountIsAPlainSizeError) {
  const Result r = plan({"--mesh", "2x2:A,B", "--from", "S(0),S(0)", "--to", "R,R", "--shape",
                         "9223372036854775807"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "meshgate-plan: ValueError: tensor shape [9223372036854775807] of 4-byte elements is "
            "too large to plan on a mesh of 4 ranks: its bytes times the ranks must stay within "
            "2^62, the most a plan counts a padded buffer in; give smaller sizes\n");
}

// Before, "--mesh 2x2:A," planned with an empty dim name and printed "all_reduce(, sum)", and a
// dim named "A+B" printed like the merged group of A and B.
TEST(PlanCommand, DimNamesThatCommStringsCannotNameAreUsageErrors) {
  for (const char* mesh : {"2x2:A,", "2x2:A+B,C", "2x2:A, B", "2x2:A(0),B"}) {
    const Result r = plan({"--mesh", mesh, "--from", "P(sum),P(sum)", "--to", "R,R"});
    EXPECT_EQ(r.code, 2) << mesh;
    EXPECT_NE(r.err.find(std::string("--mesh ") + mesh + ": ValueError: mesh dim "),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("cannot name unambiguously"), std::string::npos) << r.err;
  }
  const Result spaced =
      plan({"--mesh", "2x2:data parallel,tp", "--from", "P(sum),P(sum)", "--to", "R,R"});
  EXPECT_EQ(spaced.code, 0) << spaced.err;
  EXPECT_NE(spaced.out.find("all_reduce(data parallel, sum)"), std::string::npos) << spaced.out;
}

}  // namespace
}  // namespace meshgate::runner
