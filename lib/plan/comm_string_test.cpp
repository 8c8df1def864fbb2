// The comm-string contract alone: what the formatter writes, that the parser reads it back,
// which strings the parser rejects and why, and which dim names a comm string can hold.
#include "plan/comm_string.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"

namespace meshgate {
namespace {

using Strings = std::vector<std::string>;

CommString comm(StepKind kind, Strings group, ReduceOp op, std::int64_t src, std::int64_t dst) {
  return CommString{kind, std::move(group), op, src, dst};
}

// Every kind, with the arguments it takes (the others at their defaults).
std::vector<std::pair<CommString, std::string>> examples() {
  return {
      {comm(StepKind::all_reduce, {"A", "C"}, ReduceOp::sum, -1, -1), "all_reduce(A+C, sum)"},
      {comm(StepKind::reduce_scatter, {"B"}, ReduceOp::avg, -1, 0),
       "reduce_scatter(B, avg, dim=0)"},
      {comm(StepKind::all_gather, {"B", "C"}, ReduceOp::sum, 1, -1), "all_gather(B+C, dim=1)"},
      {comm(StepKind::all_to_all, {"B"}, ReduceOp::sum, 0, 1), "all_to_all(B, dim=0->1)"},
      {comm(StepKind::local_chunk, {"dp"}, ReduceOp::sum, -1, 2), "chunk(dp, dim=2)"},
      {comm(StepKind::local_partial, {"0"}, ReduceOp::max, -1, -1), "partial(0, max)"},
  };
}

std::string parse_error(std::string_view text) {
  try {
    parse_comm_string(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::value) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "'" << text << "' was accepted";
  return "";
}

TEST(CommString, FormatsEveryKind) {
  for (const auto& [c, text] : examples()) EXPECT_EQ(to_string(c), text);
}

TEST(CommString, ParsesWhatItFormats) {
  for (const auto& [c, text] : examples()) {
    EXPECT_EQ(parse_comm_string(text), c) << text;
    EXPECT_EQ(to_string(parse_comm_string(to_string(c))), to_string(c));
  }
  // Every reduce op and large tensor dims survive the trip.
  for (ReduceOp op :
       {ReduceOp::sum, ReduceOp::avg, ReduceOp::product, ReduceOp::min, ReduceOp::max}) {
    const CommString c = comm(StepKind::reduce_scatter, {"x", "y", "z"}, op, -1, 123456789);
    EXPECT_EQ(parse_comm_string(to_string(c)), c);
  }
}

TEST(CommString, FormatIgnoresArgumentsTheKindDoesNotTake) {
  EXPECT_EQ(format_comm_string(StepKind::all_gather, "A+B", ReduceOp::max, 0, 7),
            "all_gather(A+B, dim=0)");
  EXPECT_EQ(format_comm_string(StepKind::all_reduce, "A", ReduceOp::avg, 3, 4),
            "all_reduce(A, avg)");
}

TEST(CommString, BlanksAroundArgumentsAreIgnored) {
  EXPECT_EQ(parse_comm_string("all_reduce( A+C ,sum )"),
            comm(StepKind::all_reduce, {"A", "C"}, ReduceOp::sum, -1, -1));
}

TEST(CommString, RejectsMalformedStringsSayingWhy) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"all_gather A", "write it as kind(dims, ...)"},
      {"all_gather(A, dim=0", "write it as kind(dims, ...)"},
      {"", "write it as kind(dims, ...)"},
      {"gather(A, dim=0)", "unknown kind 'gather': use all_reduce, reduce_scatter"},
      {" all_reduce(A, sum)", "unknown kind ' all_reduce'"},
      {"all_reduce(A)", "takes 2 arguments, got 1"},
      {"all_reduce()", "takes 2 arguments, got 1"},
      {"reduce_scatter(A, sum)", "takes 3 arguments, got 2"},
      {"all_gather(A, dim=0, dim=1)", "takes 2 arguments, got 3"},
      {"all_reduce(A, mean)", "unknown reduce op"},
      {"all_gather(A, 0)", "expected dim=N, got '0'"},
      {"all_gather(A, dim=-1)", "expected dim=N, got 'dim=-1'"},
      {"all_gather(A, dim=1x)", "expected dim=N, got 'dim=1x'"},
      {"chunk(A, dim=)", "expected dim=N, got 'dim='"},
      {"all_to_all(A, dim=0)", "expected dim=A->B, got 'dim=0'"},
      {"all_to_all(A, dim=0->x)", "expected dim=N, got 'dim=x'"},
  };
  for (const auto& [text, why] : bad) {
    const std::string error = parse_error(text);
    EXPECT_NE(error.find("step '" + text + "': "), std::string::npos) << error;
    EXPECT_NE(error.find(why), std::string::npos) << text << ": " << error;
  }
}

TEST(CommString, GroupNamesAreKeptAsWrittenForTheMeshToCheck) {
  EXPECT_EQ(parse_comm_string("all_gather(C+A, dim=0)").group, (Strings{"C", "A"}));
  EXPECT_EQ(parse_comm_string("all_gather(A+, dim=0)").group, (Strings{"A", ""}));
  EXPECT_EQ(parse_comm_string("all_gather(, dim=0)").group, (Strings{""}));
}

TEST(CommString, DimsByNameOrByIndexOnAnUnnamedMesh) {
  const std::vector<std::int64_t> shape = {2, 2, 2};
  const DeviceMesh named = DeviceMesh::create(shape, {"A", "B", "C"});
  const DeviceMesh unnamed = DeviceMesh::create(shape);
  const std::vector<std::int64_t> dims = {0, 2};
  EXPECT_EQ(comm_dim_name(named, 1), "B");
  EXPECT_EQ(comm_dim_name(unnamed, 1), "1");
  EXPECT_EQ(comm_group_name(named, dims), "A+C");
  EXPECT_EQ(comm_group_name(unnamed, dims), "0+2");

  TransformStep step;
  step.kind = StepKind::reduce_scatter;
  step.mesh_dims.assign(dims);
  step.reduce_op = ReduceOp::avg;
  step.dst_tensor_dim = 1;
  step.group_size = 4;
  EXPECT_EQ(to_string(step, named), "reduce_scatter(A+C, avg, dim=1)");
  EXPECT_EQ(to_string(step, unnamed), "reduce_scatter(0+2, avg, dim=1)");
  // Comm lists hold the collectives of groups larger than one rank only.
  TransformStep chunk = step;
  chunk.kind = StepKind::local_chunk;
  TransformStep single = step;
  single.group_size = 1;
  EXPECT_EQ(comm_strings(StepList{step, chunk, single}, named), (Strings{to_string(step, named)}));
}

TEST(CommString, NamesThatCannotStandInACommStringAreRejected) {
  EXPECT_NO_THROW(check_comm_string_names(Strings{"dp", "tp", "x y"}));
  for (const std::string name : {"", "A+B", "a,b", "f(x)", " A", "A\t"}) {
    const Strings names = {"ok", name};
    try {
      check_comm_string_names(names);
      ADD_FAILURE() << "'" << name << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::value);
      EXPECT_NE(std::string(e.what()).find("mesh dim 1 is named '" + name + "'"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace meshgate
