// The redistribute kind on the threads backend: meshes whose ranks are not 0..n-1, meshes of
// several rows, and the validation of `expect` and `steps`; and the judging of another
// implementation's observables (impl_request / check_observables).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "external_impl.hpp"
#include "kinds/kind_test_support.hpp"
#include "redistribute/reference.hpp"
#include "runner.hpp"
#include "validate.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_redistribute_case(CaseNode& node, bool expect_error);

namespace {

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {{"redistribute", &parse_redistribute_case}};
  return k;
}

PlannedCase plan_one(const std::string& case_yaml) { return plan_one_case(case_yaml, kinds()); }

std::string input_error(const std::string& case_yaml) { return case_input_error(case_yaml, kinds()); }

// Before, the world had the mesh's size: the mesh's rank missing from it threw, and the others
// waited for it for ever (ranks 1..4, 0,1,2,5), or rank 0, outside the mesh, was rejected
// (4..7).
TEST(RedistributeKind, RanksOutsideTheMeshSitIdleAndTheMeshsLowestRankIsReported) {
  struct Mesh {
    const char* ranks;
    int world;
  };
  for (const Mesh& m : {Mesh{"\"1..4\"", 5}, Mesh{"[0, 1, 2, 5]", 6}, Mesh{"\"4..7\"", 8},
                        Mesh{"[3, 1, 0, 2]", 4}}) {
    SCOPED_TRACE(m.ranks);
    PlannedCase c = plan_one(
        std::string("{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B], ranks: ") +
        m.ranks +
        "}, flatten: [[A, B]], tensor: {shape: [8, 4]}, from: [S(0), S(1)], to: [R, R], "
        "expect: {comms: [\"all_gather(B, dim=1)\", \"all_gather(A, dim=0)\"], local_shape: "
        "[8, 4], warnings: 0}}");
    EXPECT_EQ(c.prepared->ranks(), m.world);
    const CaseRun run = execute_case(c, std::nullopt);
    ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
    EXPECT_EQ(run.outcome.plan,
              (std::vector<std::string>{"all_gather(B, dim=1)", "all_gather(A, dim=0)"}));
    EXPECT_EQ(run.outcome.metrics["bytes_per_rank"], 192);
  }
}

TEST(RedistributeKind, ExpectationsNameTheMeshsLowestRankWhenRankZeroIsOutside) {
  PlannedCase c = plan_one(
      "{name: a, kind: redistribute, mesh: {shape: [2], names: [A], ranks: \"3..4\"}, tensor: "
      "{shape: [5]}, from: [P(sum)], to: [S(0)], expect: {comms: [\"all_reduce(A, sum)\"], "
      "local_shape: [2], warnings: 1}}");
  const CaseRun run = execute_case(c, std::nullopt);
  ASSERT_EQ(run.outcome.status, Status::fail);
  EXPECT_EQ(run.outcome.message,
            "rank 3: collectives differ: expected [all_reduce(A, sum)], issued "
            "[reduce_scatter(A, sum, dim=0)]\n  #0: - all_reduce(A, sum)\n      + "
            "reduce_scatter(A, sum, dim=0); expect.local_shape [2] but rank 3 holds [3]; "
            "expect.warnings 1 but rank 3's plan has 0");
}

// A layout that leaves half its rank map to a second row: both rows redistribute, each on its
// own. Before, the world had 4 ranks, two of them from the second row, whose equal
// coordinates put them in the first row's groups, and the executor wrote past its buffers.
TEST(RedistributeKind, AMeshOfSeveralRowsRunsEveryRow) {
  for (const char* from : {"[S(0), S(1)]", "[P(sum), S(1)]", "[P(avg), R]"}) {
    SCOPED_TRACE(from);
    PlannedCase c = plan_one(std::string("{name: a, kind: redistribute, mesh: {layout: "
                                         "\"(2,2):(4,1)\", names: [A, B]}, tensor: {shape: [8, "
                                         "4]}, from: ") +
                             from + ", to: [R, R]}");
    EXPECT_EQ(c.prepared->ranks(), 8);
    const CaseRun run = execute_case(c, std::nullopt);
    EXPECT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  }
}

TEST(RedistributeKind, AMeshWhoseHighestRankNeedsTooManyRanksIsRejected) {
  EXPECT_NE(input_error("{name: a, kind: redistribute, mesh: {shape: [2], names: [A], ranks: [0, "
                        "5000000]}, tensor: {shape: [4]}, from: [R], to: [R]}")
                .find("key 'mesh': its highest rank is 5000000, so the case needs 5000001 ranks"),
            std::string::npos);
}

// Before, the rank with 0 elements returned at once and the other waited for ever (1 row), or
// the all_reduce read past the shorter rank's buffer (3 rows).
TEST(RedistributeKind, StepsPairingRanksOfDifferentShardsAreRejectedBeforeRunning) {
  for (const auto& [rows, counts] : {std::pair{1, "1 at coordinate [0] and 0 at [1]"},
                                     std::pair{3, "2 at coordinate [0] and 1 at [1]"}}) {
    const std::string error = input_error(
        "{name: a, kind: redistribute, mesh: {shape: [2], names: [A]}, tensor: {shape: [" +
        std::to_string(rows) +
        "]}, from: [S(0)], to: [R], steps: [\"all_reduce(A, sum)\"], expect: {wrong_shapes: "
        "2}}");
    EXPECT_NE(error.find("key 'steps': ValueError: step 'all_reduce(A, sum)' cannot run: the "
                         "ranks of one of its groups would pass different element counts, " +
                         std::string(counts)),
              std::string::npos)
        << error;
  }
  // PyTorch's padded all_gather of the same uneven shards pairs up and runs.
  PlannedCase c = plan_one(
      "{name: a, kind: redistribute, mesh: {shape: [2], names: [A]}, tensor: {shape: [3]}, "
      "from: [S(0)], to: [R], steps: [\"all_gather(A, dim=0)\"]}");
  const CaseRun run = execute_case(c, std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
}

// Before, each of these ran and was reported as a fail of the kernel.
TEST(RedistributeKind, ImpossibleExpectationsAreInputErrorsNamingTheEntry) {
  const std::string head =
      "{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B]}, flatten: [[A, B]], "
      "tensor: {shape: [4, 2]}, from: [P(sum), P(sum)], to: [R, R], expect: ";
  for (const auto& [expect, error] : {
           std::pair{"{warnings: -1}", "key 'expect.warnings': must be a count >= 0, got -1"},
           std::pair{"{local_shape: [4, -4]}",
                     "key 'expect.local_shape': size -4 of dim 1 is outside [0, 2], the "
                     "tensor's size there"},
           std::pair{"{local_shape: [5, 2]}",
                     "key 'expect.local_shape': size 5 of dim 0 is outside [0, 4]"},
           std::pair{"{local_shape: [4]}",
                     "key 'expect.local_shape': [4] has another rank than the tensor [4, 2]"},
           std::pair{"{comms: [\"allreduce(A)\"]}",
                     "key 'expect.comms': ValueError: step 'allreduce(A)': unknown kind "
                     "'allreduce'"},
           std::pair{"{comms: [\"all_reduce(A+B, sum)\", \"all_reduce(Z, sum)\"]}",
                     "key 'expect.comms': ValueError: step 'all_reduce(Z, sum)': 'Z' is not a "
                     "dim of the mesh"},
           std::pair{"{comms: [\"all_gather(A, dim=2)\"]}", "the tensor has 2 dims"},
           std::pair{"{comms: [\"chunk(A, dim=0)\"]}",
                     "'chunk(A, dim=0)' is a local step; comms lists the collectives issued"},
           std::pair{"{comms: [\"all_reduce(B+A, sum)\"]}",
                     "'all_reduce(B+A, sum)' is never issued as written: the executor writes "
                     "it 'all_reduce(A+B, sum)'"},
           std::pair{"{comms: [\"all_reduce(A+B,sum)\"]}", "is never issued as written"},
       }) {
    const std::string got = input_error(head + expect + "}");
    EXPECT_NE(got.find(error), std::string::npos) << expect << "\n" << got;
  }
  // The entry's own line and column: the second comm string.
  EXPECT_EQ(input_error(head + "{comms: [\"all_reduce(A+B, sum)\", \"all_reduce(Z, sum)\"]}}")
                .rfind("t.yaml:3:194: case 's/a': key 'expect.comms'", 0),
            0u);
  // Well-formed expectations still run.
  PlannedCase c = plan_one(head +
                           "{comms: [\"all_reduce(A+B, sum)\"], local_shape: [4, 2], warnings: "
                           "0}}");
  const CaseRun run = execute_case(c, std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
}

// Before, a dim named "A+B" issued "all_reduce(A+B, sum)" on its own, which reads as the merged
// group of A and B, and an empty name issued "all_reduce(, sum)".
TEST(RedistributeKind, DimNamesThatCommStringsCannotNameAreRejected) {
  for (const char* names : {"[\"A+B\", C]", "[\"\", C]", "[A, \"C,D\"]", "[\"A \", B]"}) {
    const std::string error =
        input_error(std::string("{name: a, kind: redistribute, mesh: {shape: [2, 2], names: ") +
                    names + "}, tensor: {shape: [4]}, from: [P(sum), P(sum)], to: [R, R]}");
    EXPECT_NE(error.find("key 'mesh.names': ValueError: mesh dim "), std::string::npos)
        << names << "\n"
        << error;
  }
}

// Before, these ran and were reported as a fail of the kernel ("rejected: RuntimeError: backend
// 'threads' does not support all_reduce(avg) for int64"), naming no file, line or key.
TEST(RedistributeKind, AnAvgReductionOfAnIntegerDtypeIsAnInputErrorNamingTheDtype) {
  const std::string head = "{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B]}, ";
  for (const char* body : {
           "tensor: {shape: [4], dtype: int64}, from: [P(avg), R], to: [R, R]}",
           "tensor: {shape: [4], dtype: int32}, from: [R, P(avg)], to: [R, S(0)]}",
           "flatten: [[A, B]], tensor: {shape: [4], dtype: int64}, from: [P(avg), P(avg)], to: "
           "[R, R]}",
       }) {
    const std::string error = input_error(head + body);
    EXPECT_NE(error.find("key 'tensor.dtype': the plan issues "), std::string::npos) << body << "\n"
                                                                                     << error;
    EXPECT_NE(error.find("avg reduction of int"), std::string::npos) << error;
  }
  // No avg collective: the integer dtype runs.
  for (const char* body : {
           "tensor: {shape: [4], dtype: int64}, from: [P(avg), R], to: [P(avg), S(0)]}",
           "tensor: {shape: [4], dtype: int64}, from: [R, R], to: [P(avg), R]}",
           "tensor: {shape: [4], dtype: int64}, from: [P(sum), P(sum)], to: [R, R]}",
       }) {
    PlannedCase c = plan_one(head + body);
    const CaseRun run = execute_case(c, std::nullopt);
    EXPECT_EQ(run.outcome.status, Status::pass) << body << "\n" << run.outcome.message;
  }
}

// 9 rows over A leave 5 rows on A=0 (two gathers) and 4 on A=1 (one merged gather). Before, no
// key could say that the ranks' plans differ, so a case claiming it asserted rank 0's only.
TEST(RedistributeKind, DistinctPlansCountsTheRanksDifferentListsOfCollectives) {
  const std::string head =
      "{name: a, kind: redistribute, mesh: {shape: [2, 2, 2], names: [A, B, C]}, flatten: [[B, "
      "C]], tensor: {shape: [9, 2]}, from: [S(0), S(0), S(0)], to: [S(0), R, R], expect: ";
  PlannedCase right = plan_one(head + "{distinct_plans: 2}}");
  const CaseRun pass = execute_case(right, std::nullopt);
  EXPECT_EQ(pass.outcome.status, Status::pass) << pass.outcome.message;
  PlannedCase wrong = plan_one(head + "{distinct_plans: 1}}");
  const CaseRun fail = execute_case(wrong, std::nullopt);
  EXPECT_EQ(fail.outcome.status, Status::fail);
  EXPECT_EQ(fail.outcome.message,
            "expect.distinct_plans 1 but the ranks' plans issue 2 different lists of collectives");
  EXPECT_NE(input_error(head + "{distinct_plans: 0}}")
                .find("key 'expect.distinct_plans': must be a count >= 1"),
            std::string::npos);
}

// ---- another implementation's observables ------------------------------------------------

// A 2x2 mesh gathering (S0, S1) to (R, R): every rank ends with the whole global tensor.
const char* kGatherCase =
    "{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B]}, flatten: [[A, B]], "
    "tensor: {shape: [8, 4]}, from: [S(0), S(1)], to: [R, R], expect: {comms: "
    "[\"all_gather(B, dim=1)\", \"all_gather(A, dim=0)\"], local_shape: [8, 4], warnings: 0}}";

struct Scratch {
  std::filesystem::path dir;
  Scratch() {
    dir = std::filesystem::temp_directory_path() /
          ("meshgate-redistribute-kind-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
};

// What a right implementation answers for kGatherCase: each rank's output is `output(rank)`.
nlohmann::json gather_observables(const std::filesystem::path& dir,
                                  const std::function<HostTensor(int)>& output) {
  nlohmann::json comms = nlohmann::json::object();
  nlohmann::json outputs = nlohmann::json::object();
  nlohmann::json warnings = nlohmann::json::object();
  for (int rank = 0; rank < 4; ++rank) {
    const std::string key = std::to_string(rank);
    comms[key] = {"all_gather(B, dim=1)", "all_gather(A, dim=0)"};
    const HostTensor out = output(rank);
    outputs[key] = write_tensor_file(dir / ("out-" + key + ".bin"),
                                     std::string(comm::to_string(out.dtype)), out.shape,
                                     out.data.data(), out.bytes());
    warnings[key] = 0;
  }
  return {{"comms", comms}, {"outputs", outputs}, {"warnings", warnings}};
}

HostTensor gather_global() { return make_global_tensor({8, 4}, comm::DType::f32, 4); }

TEST(RedistributeKindImpl, TheRequestCarriesEveryRanksSourceShard) {
  PlannedCase c = plan_one(kGatherCase);
  Scratch scratch;
  std::string why;
  const std::optional<nlohmann::json> request = c.prepared->impl_request(scratch.dir, why);
  ASSERT_TRUE(request) << why;
  EXPECT_EQ((*request)["world"], 4);
  EXPECT_EQ((*request)["mesh"]["ranks"], nlohmann::json({0, 1, 2, 3}));
  EXPECT_EQ((*request)["mesh"]["names"], nlohmann::json({"A", "B"}));
  EXPECT_EQ((*request)["flatten"], nlohmann::json::parse(R"([{"dims": ["A", "B"], "name": null}])"));
  EXPECT_EQ((*request)["from"], nlohmann::json({"S(0)", "S(1)"}));
  EXPECT_EQ((*request)["api"], "internal");
  ASSERT_EQ((*request)["inputs"].size(), 4u);
  // Rank 3 sits at (1, 1): rows 4..7, columns 2..3 of the global tensor.
  const TensorFile in = read_tensor_file((*request)["inputs"]["3"], scratch.dir, "inputs.3");
  EXPECT_EQ(in.shape, (std::vector<std::int64_t>{4, 2}));
  const HostTensor global = gather_global();
  float first = 0;
  std::memcpy(&first, in.bytes.data(), sizeof first);
  EXPECT_EQ(first, global.get(4 * 4 + 2));
}

TEST(RedistributeKindImpl, RightObservablesPass) {
  PlannedCase c = plan_one(kGatherCase);
  Scratch scratch;
  std::string why;
  ASSERT_TRUE(c.prepared->impl_request(scratch.dir, why)) << why;
  const Outcome o = c.prepared->check_observables(
      gather_observables(scratch.dir, [](int) { return gather_global(); }), scratch.dir);
  EXPECT_EQ(o.status, Status::pass) << o.message;
  EXPECT_EQ(o.plan, (std::vector<std::string>{"all_gather(B, dim=1)", "all_gather(A, dim=0)"}));
  EXPECT_EQ(o.metrics["distinct_plans"], 1);
  EXPECT_EQ(o.metrics["meshgate_plan"], nlohmann::json({"all_gather(B, dim=1)", "all_gather(A, dim=0)"}));
}

TEST(RedistributeKindImpl, WrongObservablesFailWithTheNativeChecksWords) {
  PlannedCase c = plan_one(kGatherCase);
  Scratch scratch;
  std::string why;
  ASSERT_TRUE(c.prepared->impl_request(scratch.dir, why)) << why;
  PreparedCase& p = *c.prepared;

  // One element of rank 2's replica is off: a wrong value, and replicas that differ.
  nlohmann::json obs = gather_observables(scratch.dir, [](int rank) {
    HostTensor t = gather_global();
    if (rank == 2) t.set(5, t.get(5) + 1);
    return t;
  });
  Outcome o = p.check_observables(obs, scratch.dir);
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(o.message.find("1 wrong element(s) against the global tensor's target shard"),
            std::string::npos)
      << o.message;
  EXPECT_NE(o.message.find("rank(s) hold replicas that differ bitwise"), std::string::npos);

  // A merged gather where the case expects two, and a warning count other than expected.
  obs = gather_observables(scratch.dir, [](int) { return gather_global(); });
  for (int rank = 0; rank < 4; ++rank) obs["comms"][std::to_string(rank)] = {"all_gather(A+B, dim=0)"};
  obs["warnings"]["0"] = 1;
  o = p.check_observables(obs, scratch.dir);
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_EQ(o.message,
            "rank 0: collectives differ: expected [all_gather(B, dim=1), all_gather(A, dim=0)], "
            "issued [all_gather(A+B, dim=0)]\n  #0: - all_gather(B, dim=1)\n      + "
            "all_gather(A+B, dim=0)\n  #1: - all_gather(A, dim=0)\n      + (none); "
            "expect.warnings 0 but rank 0's plan has 1");

  // Without warnings in the answer, expect.warnings is not judged; rank 0's list is right and
  // the others' differ, which only expect.distinct_plans (absent here) would judge.
  obs.erase("warnings");
  obs["comms"]["0"] = {"all_gather(B, dim=1)", "all_gather(A, dim=0)"};
  o = p.check_observables(obs, scratch.dir);
  EXPECT_EQ(o.status, Status::pass) << o.message;
  EXPECT_EQ(o.metrics["distinct_plans"], 2);
  EXPECT_TRUE(o.metrics["warnings"].is_null());
}

TEST(RedistributeKindImpl, AWrongShapeAndAWrongDtypeFail) {
  PlannedCase c = plan_one(kGatherCase);
  Scratch scratch;
  std::string why;
  ASSERT_TRUE(c.prepared->impl_request(scratch.dir, why)) << why;
  Outcome o = c.prepared->check_observables(
      gather_observables(scratch.dir,
                         [](int rank) {
                           return rank == 1 ? narrow(gather_global(), 0, 0, 4) : gather_global();
                         }),
      scratch.dir);
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(o.message.find("1 rank(s) ended with a local shape other than the target shard's"),
            std::string::npos)
      << o.message;
  o = c.prepared->check_observables(
      gather_observables(scratch.dir,
                         [](int) { return make_global_tensor({8, 4}, comm::DType::f64, 4); }),
      scratch.dir);
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(o.message.find("the outputs' dtype is not the tensor's float32"), std::string::npos)
      << o.message;
}

// R -> P(sum) under the internal api divides by the group size: the judge sums the Partial
// dim's group before comparing, as run() does.
TEST(RedistributeKindImpl, APartialTargetIsReducedBeforeComparing) {
  PlannedCase c = plan_one(
      "{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B]}, tensor: {shape: [8, "
      "4]}, from: [R, R], to: [P(sum), R], expect: {comms: [], local_shape: [8, 4]}}");
  Scratch scratch;
  std::string why;
  ASSERT_TRUE(c.prepared->impl_request(scratch.dir, why)) << why;
  const auto answer = [&](bool divide_it) {
    nlohmann::json obs = gather_observables(scratch.dir, [&](int) {
      HostTensor t = gather_global();
      if (divide_it) divide(t, 2);
      return t;
    });
    for (int rank = 0; rank < 4; ++rank) obs["comms"][std::to_string(rank)] = nlohmann::json::array();
    return c.prepared->check_observables(obs, scratch.dir);
  };
  const Outcome right = answer(true);
  EXPECT_EQ(right.status, Status::pass) << right.message;
  const Outcome wrong = answer(false);
  EXPECT_EQ(wrong.status, Status::fail);
  EXPECT_NE(wrong.message.find(" wrong element(s) against the global tensor's target shard"),
            std::string::npos)
      << wrong.message;
}

TEST(RedistributeKindImpl, GarbageIsAnImplFailure) {
  PlannedCase c = plan_one(kGatherCase);
  Scratch scratch;
  std::string why;
  ASSERT_TRUE(c.prepared->impl_request(scratch.dir, why)) << why;
  PreparedCase& p = *c.prepared;
  const nlohmann::json right = gather_observables(scratch.dir, [](int) { return gather_global(); });
  const auto garbage = [&](const std::function<void(nlohmann::json&)>& spoil,
                           const std::string& words) {
    nlohmann::json obs = right;
    spoil(obs);
    try {
      p.check_observables(obs, scratch.dir);
      ADD_FAILURE() << "no ImplFailure for " << obs.dump();
    } catch (const ImplFailure& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  garbage([](nlohmann::json& o) { o = nlohmann::json::array(); }, "not an object");
  garbage([](nlohmann::json& o) { o.erase("outputs"); }, "no 'outputs' object");
  garbage([](nlohmann::json& o) { o["comms"].erase("2"); }, "no list of collectives for rank 2");
  garbage([](nlohmann::json& o) { o["comms"]["1"] = {1, 2}; }, "not a string");
  garbage([](nlohmann::json& o) { o["comms"]["7"] = nlohmann::json::array(); },
          "'7', which is no rank of the mesh");
  garbage([](nlohmann::json& o) { o["outputs"].erase("3"); }, "no output tensor for rank 3");
  garbage([](nlohmann::json& o) { o["outputs"]["0"]["path"] = "/etc/passwd"; }, "outputs.0");
  garbage([](nlohmann::json& o) { o["outputs"]["0"]["shape"] = {8, 5}; }, "outputs.0");
  garbage([](nlohmann::json& o) { o["warnings"]["1"] = -1; }, "no warning count >= 0 for rank 1");
}

TEST(RedistributeKindImpl, WrittenOutStepsAreNotHandedOver) {
  PlannedCase c = plan_one(
      "{name: a, kind: redistribute, mesh: {shape: [2], names: [A]}, tensor: {shape: [4]}, "
      "from: [S(0)], to: [R], steps: [\"all_gather(A, dim=0)\"]}");
  Scratch scratch;
  std::string why;
  EXPECT_FALSE(c.prepared->impl_request(scratch.dir, why));
  EXPECT_NE(why.find("`steps:` replays a plan written out step by step"), std::string::npos);
}

// kGatherCase with a `torch_cost:` block (the text inside its braces).
std::string gather_case_with_cost(const std::string& cost) {
  std::string text = kGatherCase;
  return text.substr(0, text.size() - 1) + ", torch_cost: {" + cost + "}}";
}

// What the torch adapter answers for a case with `torch_cost`, with via: costs by name, a number
// or "inf".
nlohmann::json with_costs(nlohmann::json obs, const nlohmann::json& costs) {
  nlohmann::json all = {{"direct", 12.5}, {"greedy", 12.5}, {"min_cost", 10.0},
                        {"plan", 12.5},   {"identity_from", 0.0}, {"identity_to", 0.0},
                        {"via_first", 4.0}, {"via_second", 6.0}};
  nlohmann::json infinite = nlohmann::json::object();
  for (const auto& [name, value] : costs.items()) {
    all[name] = value;
    if (value == "inf") infinite[name] = "its plan's step S(0) -> P(sum) on mesh dim B";
  }
  obs["torch_cost"] = {{"costs", all}, {"infinite", infinite},
                       {"errors", nlohmann::json::object()}};
  return obs;
}

TEST(RedistributeKindTorchCost, IsSkippedByMeshgateAndHandedOverWithItsViaInShortForms) {
  PlannedCase c = plan_one(gather_case_with_cost(
      "via: \"Shard(dim=0),Replicate()\", triangle: false, min_cost_le_greedy: true"));
  const CaseRun run = execute_case(c, std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::skip);
  EXPECT_NE(run.outcome.message.find("meshgate has no model of PyTorch's redistribute_cost"),
            std::string::npos)
      << run.outcome.message;
  EXPECT_NE(run.outcome.message.find("--impl torch"), std::string::npos);
  Scratch scratch;
  std::string why;
  const std::optional<nlohmann::json> request = c.prepared->impl_request(scratch.dir, why);
  ASSERT_TRUE(request) << why;
  EXPECT_EQ((*request)["torch_cost"], nlohmann::json::parse(R"j({"via": ["S(0)", "R"]})j"));
  EXPECT_EQ(c.prepared->params()["torch_cost"], (*request)["torch_cost"]);
  // Without the key nothing about costs is asked.
  PlannedCase plain = plan_one(kGatherCase);
  EXPECT_FALSE(plain.prepared->impl_request(scratch.dir, why)->contains("torch_cost"));
}

TEST(RedistributeKindTorchCost, MalformedKeysAreInputErrorsNamingTheKey) {
  for (const auto& [cost, error] : {
           std::pair{"via: [R, R]", "key 'torch_cost.via': needs `triangle: true` or "
                                    "`triangle: false`"},
           std::pair{"triangle: true", "key 'torch_cost.triangle': needs `via`"},
           std::pair{"infinite: [cheapest]", "key 'torch_cost.infinite': unknown cost 'cheapest'"},
           std::pair{"infinite: [identity_to]", "unknown cost 'identity_to'"},
           std::pair{"infinite: [via_first]", "'via_first' is a cost of the triangle through "
                                              "`via`, which the case does not give"},
           std::pair{"infinite: [plan, plan]", "lists 'plan' twice"},
           std::pair{"triangle: maybe", "key 'torch_cost.triangle'"},
           std::pair{"cheapest: true", "key 'torch_cost.cheapest': unknown key"},
           std::pair{"via: [R], triangle: true", "key 'torch_cost.via'"},
           std::pair{"via: [R, X], triangle: true", "key 'torch_cost.via'"},
       }) {
    const std::string got = input_error(gather_case_with_cost(cost));
    EXPECT_NE(got.find(error), std::string::npos) << cost << "\n" << got;
  }
  EXPECT_NE(input_error("{name: a, kind: redistribute, mesh: {shape: [2], names: [A]}, tensor: "
                        "{shape: [4]}, from: [S(0)], to: [R], steps: [\"all_gather(A, dim=0)\"], "
                        "torch_cost: {}}")
                .find("key 'torch_cost': prices a planned redistribution; a case with `steps` "
                      "has none"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: redistribute, mesh: {shape: [2], names: [A]}, tensor: "
                        "{shape: [4]}, from: [S(0)], to: [P(sum)], expect_error: true, "
                        "torch_cost: {}}")
                .find("key 'torch_cost': prices a redistribution that runs"),
            std::string::npos);
}

TEST(RedistributeKindTorchCost, TheCostsAreJudgedAgainstTheCase) {
  PlannedCase c = plan_one(gather_case_with_cost(
      "via: [S(0), R], triangle: true, min_cost_le_greedy: true, infinite: [via_second]"));
  Scratch scratch;
  std::string why;
  ASSERT_TRUE(c.prepared->impl_request(scratch.dir, why)) << why;
  PreparedCase& p = *c.prepared;
  const nlohmann::json right = gather_observables(scratch.dir, [](int) { return gather_global(); });

  Outcome o = p.check_observables(with_costs(right, {{"via_second", "inf"}}), scratch.dir);
  EXPECT_EQ(o.status, Status::pass) << o.message;
  EXPECT_EQ(o.metrics["torch_cost"]["min_cost_le_greedy"], true);
  EXPECT_EQ(o.metrics["torch_cost"]["triangle"]["holds"], true);
  EXPECT_EQ(o.metrics["torch_cost"]["triangle"]["through_via"], "inf");
  EXPECT_EQ(o.metrics["torch_cost"]["costs"]["plan"], 12.5);

  // A triangle that does not hold, where the case says it does; the via cost listed as
  // infinite is finite.
  o = p.check_observables(with_costs(right, {{"via_second", 6.0}}), scratch.dir);
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_EQ(o.message,
            "torch_cost.infinite lists via_second, which costs 6; torch_cost.triangle true but "
            "cost(from -> to) = 12.5 > cost(from -> via) + cost(via -> to) = 4 + 6 = 10 (via "
            "S(0), R)");
  EXPECT_EQ(o.metrics["torch_cost"]["triangle"]["holds"], false);

  // An infinite cost the case does not list, a min-cost plan dearer than greedy's, a negative
  // cost and an identity that costs something.
  o = p.check_observables(with_costs(right, {{"via_second", "inf"},
                                             {"min_cost", "inf"},
                                             {"direct", -1.0},
                                             {"identity_to", 0.5}}),
                          scratch.dir);
  EXPECT_EQ(o.status, Status::fail);
  for (const char* words :
       {"torch_cost.direct is negative: -1",
        "torch_cost.identity_to (the cost of a spec to itself) is 0.5, not 0",
        "torch_cost.min_cost is inf (its plan's step S(0) -> P(sum) on mesh dim B) but "
        "torch_cost.infinite does not list it",
        "torch_cost.min_cost_le_greedy true but the min-cost plan costs inf and the greedy plan "
        "12.5"}) {
    EXPECT_NE(o.message.find(words), std::string::npos) << words << "\n" << o.message;
  }

  // PyTorch raising while it prices is a failure of the case, naming the cost.
  nlohmann::json raised = with_costs(right, {{"via_second", "inf"}});
  raised["torch_cost"]["errors"]["min_cost"] = "AssertionError: No path found";
  raised["torch_cost"]["costs"].erase("min_cost");
  o = p.check_observables(raised, scratch.dir);
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(o.message.find("PyTorch failed to price min_cost (AssertionError: No path found)"),
            std::string::npos)
      << o.message;
}

TEST(RedistributeKindTorchCost, AMissingOrMalformedAnswerIsAnImplFailure) {
  PlannedCase c = plan_one(gather_case_with_cost("via: [S(0), R], triangle: true"));
  Scratch scratch;
  std::string why;
  ASSERT_TRUE(c.prepared->impl_request(scratch.dir, why)) << why;
  const nlohmann::json right = with_costs(
      gather_observables(scratch.dir, [](int) { return gather_global(); }), nlohmann::json::object());
  const auto garbage = [&](const std::function<void(nlohmann::json&)>& spoil,
                           const std::string& words) {
    nlohmann::json obs = right;
    spoil(obs);
    try {
      c.prepared->check_observables(obs, scratch.dir);
      ADD_FAILURE() << "no ImplFailure for " << obs["torch_cost"].dump();
    } catch (const ImplFailure& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  garbage([](nlohmann::json& o) { o.erase("torch_cost"); }, "answered no 'torch_cost' object");
  garbage([](nlohmann::json& o) { o["torch_cost"].erase("infinite"); },
          "torch_cost without a 'infinite' object");
  garbage([](nlohmann::json& o) { o["torch_cost"]["costs"].erase("via_first"); },
          "no torch_cost.costs.via_first");
  garbage([](nlohmann::json& o) { o["torch_cost"]["costs"]["greedy"] = "Infinity"; },
          "torch_cost.costs.greedy = \"Infinity\", neither a number nor \"inf\"");
}

// kGatherCase under `compile: true`, with `expect_extra` added to its expect.
std::string compiled_gather_case(const std::string& expect_extra) {
  std::string yaml = kGatherCase;
  yaml.insert(yaml.find("from:"), "compile: true, ");
  if (!expect_extra.empty()) yaml.insert(yaml.rfind("}}"), ", " + expect_extra);
  return yaml;
}

TEST(RedistributeKindCompile, IsSkippedByMeshgateAndHandedOverAsAFlag) {
  PlannedCase c = plan_one(compiled_gather_case(""));
  const CaseRun run = execute_case(c, std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::skip);
  EXPECT_NE(run.outcome.message.find("meshgate has no compiler"), std::string::npos)
      << run.outcome.message;
  Scratch scratch;
  std::string why;
  const std::optional<nlohmann::json> request = c.prepared->impl_request(scratch.dir, why);
  ASSERT_TRUE(request) << why;
  EXPECT_EQ((*request)["compile"], true);
  EXPECT_EQ(c.prepared->params()["compile"], true);
  PlannedCase plain = plan_one(kGatherCase);
  EXPECT_FALSE(plain.prepared->impl_request(scratch.dir, why)->contains("compile"));
  EXPECT_FALSE(plain.prepared->params().contains("compile"));
}

TEST(RedistributeKindCompile, MisplacedKeysAreInputErrorsNamingTheKey) {
  EXPECT_NE(input_error(compiled_gather_case("graph_breaks: -1"))
                .find("key 'expect.graph_breaks': must be a count >= 0, got -1"),
            std::string::npos);
  std::string eager = kGatherCase;
  eager.insert(eager.rfind("}}"), ", graph_breaks: 0");
  EXPECT_NE(input_error(eager).find("key 'expect.graph_breaks': counts torch.compile's graph "
                                    "breaks: it needs `compile: true`"),
            std::string::npos)
      << input_error(eager);
  EXPECT_NE(input_error("{name: a, kind: redistribute, mesh: {shape: [2], names: [A]}, tensor: "
                        "{shape: [4]}, from: [S(0)], to: [R], compile: true, "
                        "steps: [\"all_gather(A, dim=0)\"]}")
                .find("key 'compile': has no effect with `steps`"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: redistribute, mesh: {shape: [2], names: [A]}, tensor: "
                        "{shape: [4]}, from: [S(0)], to: [R], compile: maybe}")
                .find("key 'compile'"),
            std::string::npos);
}

TEST(RedistributeKindCompile, GraphBreaksAreMetricsAndJudgedWhenExpected) {
  PlannedCase c = plan_one(compiled_gather_case("graph_breaks: 0"));
  Scratch scratch;
  std::string why;
  ASSERT_TRUE(c.prepared->impl_request(scratch.dir, why)) << why;
  nlohmann::json obs = gather_observables(scratch.dir, [](int) { return gather_global(); });
  obs["compile"] = {{"graph_breaks", 0}, {"graphs", 1}};
  Outcome o = c.prepared->check_observables(obs, scratch.dir);
  EXPECT_EQ(o.status, Status::pass) << o.message;
  EXPECT_EQ(o.metrics["graph_breaks"], 0);
  EXPECT_EQ(o.metrics["graphs"], 1);
  obs["compile"] = {{"graph_breaks", 2}, {"graphs", 3}};
  o = c.prepared->check_observables(obs, scratch.dir);
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(o.message.find("graph breaks: expected 0, torch.compile made 2"), std::string::npos)
      << o.message;
  obs.erase("compile");
  EXPECT_THROW(c.prepared->check_observables(obs, scratch.dir), ImplFailure);
}

const char* kOrderedCase =
    "{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B]}, tensor: {shape: [6, 4]}, "
    "from: [S(0), S(0)], shard_order: [{dim: 0, mesh_dims: [B, A]}], to: [R, R]}";

TEST(RedistributeKindShardOrder, IsSkippedByMeshgateAndHandsOverTheGlobalTensor) {
  PlannedCase c = plan_one(kOrderedCase);
  const CaseRun run = execute_case(c, std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::skip);
  EXPECT_NE(run.outcome.message.find("not in a `shard_order`"), std::string::npos)
      << run.outcome.message;
  Scratch scratch;
  std::string why;
  const std::optional<nlohmann::json> request = c.prepared->impl_request(scratch.dir, why);
  ASSERT_TRUE(request) << why;
  EXPECT_EQ((*request)["shard_order"],
            nlohmann::json::parse(R"([{"dim": 0, "mesh_dims": [1, 0]}])"));
  EXPECT_EQ(c.prepared->params()["shard_order"], (*request)["shard_order"]);
  // Every rank gets the whole tensor: the implementation shards it in the order itself.
  for (const std::string rank : {"0", "3"}) {
    const TensorFile in = read_tensor_file((*request)["inputs"][rank], scratch.dir, "inputs");
    EXPECT_EQ(in.shape, (std::vector<std::int64_t>{6, 4}));
  }
}

TEST(RedistributeKindShardOrder, ResultsAreJudgedByTheTargetsShards) {
  PlannedCase c = plan_one(kOrderedCase);
  Scratch scratch;
  std::string why;
  ASSERT_TRUE(c.prepared->impl_request(scratch.dir, why)) << why;
  const HostTensor global = make_global_tensor({6, 4}, comm::DType::f32, 4);
  nlohmann::json comms = nlohmann::json::object(), outputs = nlohmann::json::object();
  for (int rank = 0; rank < 4; ++rank) {
    const std::string key = std::to_string(rank);
    comms[key] = {"all_gather(A, dim=0)", "all_gather(B, dim=0)"};
    HostTensor out = global;
    if (rank == 2) out.set(5, out.get(5) + 1);  // one wrong element
    outputs[key] = write_tensor_file(scratch.dir / ("out-" + key + ".bin"), "float32", out.shape,
                                     out.data.data(), out.bytes());
  }
  const Outcome o = c.prepared->check_observables({{"comms", comms}, {"outputs", outputs}},
                                                  scratch.dir);
  EXPECT_EQ(o.status, Status::fail);
  EXPECT_NE(o.message.find("1 wrong element(s)"), std::string::npos) << o.message;
  // meshgate's own plan would start from another source: it is not reported.
  EXPECT_FALSE(o.metrics.contains("meshgate_plan"));
}

TEST(RedistributeKindShardOrder, AnOrderThatIsNotFromsShardingIsAnInputError) {
  const std::string base =
      "{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B]}, tensor: "
      "{shape: [8, 4]}, from: [S(0), S(0)], to: [R, R], shard_order: ";
  for (const auto& [order, error] : {
           std::pair{"[{dim: 0, mesh_dims: [B]}]", "orders tensor dim 0 over mesh dims [1], but "
                                                  "`from` shards it (S(0)) on mesh dims [0,1]"},
           std::pair{"[{dim: 1, mesh_dims: [B, A]}]", "orders tensor dim 1"},
           std::pair{"[{dim: 0, mesh_dims: [B, Z]}]", "names mesh dim 'Z', which the mesh lacks"},
           std::pair{"[{dim: 0, mesh_dims: [1, 0]}, {dim: 0, mesh_dims: [0, 1]}]",
                     "orders tensor dim 0 twice"},
           std::pair{"[{dim: 0}]", "each entry is {dim: D, mesh_dims: [..]}"},
           std::pair{"[]", "must be a list of {dim: D, mesh_dims: [..]}"},
       }) {
    const std::string got = input_error(base + order + "}");
    EXPECT_NE(got.find("key 'shard_order'"), std::string::npos) << order << "\n" << got;
    EXPECT_NE(got.find(error), std::string::npos) << order << "\n" << got;
  }
  // Mesh dims by index are the same order.
  PlannedCase by_index = plan_one(base + "[{dim: 0, mesh_dims: [1, 0]}]}");
  EXPECT_EQ(by_index.prepared->params()["shard_order"],
            nlohmann::json::parse(R"([{"dim": 0, "mesh_dims": [1, 0]}])"));
}

TEST(RedistributeKindShardOrder, AStridedSourceIsRedistributedOnAnotherImplementation) {
  PlannedCase c = plan_one(
      "{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B]}, tensor: {shape: "
      "[8, 4]}, from: \"SS(0,2),S(0)\", to: [R, R]}");
  const CaseRun run = execute_case(c, std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::skip);
  EXPECT_NE(run.outcome.message.find("meshgate has no strided shard"), std::string::npos);
  Scratch scratch;
  std::string why;
  const std::optional<nlohmann::json> request = c.prepared->impl_request(scratch.dir, why);
  ASSERT_TRUE(request) << why;
  EXPECT_EQ((*request)["from"], nlohmann::json({"SS(0,2)", "S(0)"}));
  EXPECT_NE(input_error("{name: a, kind: redistribute, mesh: {shape: [2, 2], names: [A, B]}, "
                        "tensor: {shape: [8, 4]}, from: [R, R], to: \"SS(0,2),S(0)\"}")
                .find("a strided shard is a source only"),
            std::string::npos);
}

}  // namespace
}  // namespace meshgate::runner
