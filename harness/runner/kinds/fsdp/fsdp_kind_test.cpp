// The fsdp kind: its keys validated before anything runs (file, line, case, key), meshgate's own
// run a skip that says why, the request handed to another implementation, and the judging of its
// answer: parameters against the single-process reference, every rank's gather alike, the
// collectives of each step against what the case expects.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "external_impl.hpp"
#include "kinds/kind_test_support.hpp"
#include "runner.hpp"
#include "validate.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_fsdp_case(CaseNode& node, bool expect_error);

namespace {

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {{"fsdp", &parse_fsdp_case}};
  return k;
}

PlannedCase plan_one(const std::string& case_yaml) { return plan_one_case(case_yaml, kinds()); }

std::string input_error(const std::string& case_yaml) {
  return case_input_error(case_yaml, kinds());
}

// Two ranks, two Linear layers (4 -> 3 -> 2), per-layer units, two steps.
const char* const kCase =
    "{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4, 3, 2]}, steps: 2, "
    "expect: {comms_per_step: {all_gather: 4, reduce_scatter: 2, all_reduce: 0}, "
    "forward: {all_gather: 2}}}";

struct Scratch {
  std::filesystem::path dir;
  Scratch() {
    dir = std::filesystem::temp_directory_path() /
          ("meshgate-fsdp-kind-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
};

using Values = std::map<std::string, std::vector<float>>;

// The parameters of 4 -> 3 -> 2 with biases, each element `base + index / 8`.
Values parameters(float base) {
  Values v;
  const std::map<std::string, std::size_t> sizes = {
      {"0.weight", 12}, {"0.bias", 3}, {"2.weight", 6}, {"2.bias", 2}};
  for (const auto& [name, n] : sizes) {
    for (std::size_t i = 0; i < n; ++i) v[name].push_back(base + static_cast<float>(i) / 8);
  }
  return v;
}

nlohmann::json write_parameters(const std::filesystem::path& dir, const std::string& prefix,
                                const Values& values) {
  const std::map<std::string, std::vector<std::int64_t>> shapes = {
      {"0.weight", {3, 4}}, {"0.bias", {3}}, {"2.weight", {2, 3}}, {"2.bias", {2}}};
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, data] : values) {
    out[name] = write_tensor_file(dir / (prefix + "-" + name + ".bin"), "float32",
                                  shapes.at(name), data.data(), data.size() * sizeof(float));
  }
  return out;
}

// One step as PyTorch 2.15 issues it with per-layer units and reshard_after_forward: one
// all_gather per unit in forward, again in backward, one reduce_scatter per unit.
nlohmann::json step(int forward_gathers = 2) {
  return {{"forward", {{"all_gather", {{"count", forward_gathers}, {"bytes", 80}}}}},
          {"backward",
           {{"all_gather", {{"count", 2}, {"bytes", 80}}},
            {"reduce_scatter", {{"count", 2}, {"bytes", 80}}}}},
          {"optimizer", nlohmann::json::object()}};
}

nlohmann::json observables(const std::filesystem::path& dir, const Values& rank0,
                           const Values& rank1, const Values& reference,
                           const nlohmann::json& rank1_steps = {step(), step()}) {
  return {{"params",
           {{"0", write_parameters(dir, "r0", rank0)}, {"1", write_parameters(dir, "r1", rank1)}}},
          {"reference", write_parameters(dir, "ref", reference)},
          {"steps", {{"0", {step(), step()}}, {"1", rank1_steps}}}};
}

TEST(FsdpKind, KeysAreValidatedWithFileLineCaseAndKey) {
  EXPECT_EQ(input_error("{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4, 2]}, "
                        "shard: layers}"),
            "t.yaml:3:79: case 's/a': key 'shard': unknown value 'layers': expected per_layer "
            "(fully_shard on every Linear, then the root) or root (fully_shard on the root only)");
  EXPECT_NE(input_error("{name: a, kind: fsdp, mesh: {shape: [2, 2, 2]}, model: {layers: [4, 2]}}")
                .find("key 'mesh.shape': expected 1 dim (FSDP) or 2 dims (HSDP: replicate, "
                      "shard), got 3"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4]}}")
                .find("key 'model.layers': expected 2 to 65 sizes"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4, 2]}, "
                        "steps: 0}")
                .find("key 'steps': must be 1 to 1000, got 0"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4, 2]}, "
                        "expect: {comms_per_step: {all_gathers: 2}}}")
                .find("key 'expect.comms_per_step.all_gathers': unknown key (did you mean "
                      "'all_gather'?)"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: fsdp, mesh: {shape: [2], names: [a, b]}, model: "
                        "{layers: [4, 2]}}")
                .find("key 'mesh.names': names 2 dims, the shape has 1"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4, 2], "
                        "activation: gelu}}")
                .find("key 'model.activation': unknown activation 'gelu'"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4, 2]}, "
                        "expect: {backward: {reduce_scatter: -1}}}")
                .find("key 'expect.backward.reduce_scatter': must be >= 0, got -1"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4, 2]}, "
                        "dtype: bfloat16}")
                .find("key 'dtype': unknown dtype 'bfloat16' for fsdp"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: fsdp, model: {layers: [4, 2]}}").find("key 'mesh'"),
            std::string::npos);
}

TEST(FsdpKind, MeshgatesOwnRunIsASkipThatSaysWhy) {
  PlannedCase c = plan_one(kCase);
  EXPECT_EQ(c.prepared->ranks(), 2);
  const CaseRun run = execute_case(c, std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::skip);
  EXPECT_NE(run.outcome.message.find("meshgate has no FSDP"), std::string::npos);
  EXPECT_NE(run.outcome.message.find("--impl torch"), std::string::npos);
}

TEST(FsdpKind, TheRequestCarriesTheResolvedCase) {
  PlannedCase c = plan_one(
      "{name: a, kind: fsdp, mesh: {shape: [2, 2]}, model: {layers: [4, 2], bias: false}, "
      "shard: root, reshard_after_forward: false, steps: 3, batch: 2, lr: 0.05, seed: 7}");
  EXPECT_EQ(c.prepared->ranks(), 4);
  Scratch scratch;
  std::string why;
  const auto request = c.prepared->impl_request(scratch.dir, why);
  ASSERT_TRUE(request) << why;
  EXPECT_EQ((*request)["world"], 4);
  EXPECT_EQ((*request)["mesh"]["names"], nlohmann::json({"replicate", "shard"}));
  EXPECT_EQ((*request)["model"]["layers"], nlohmann::json({4, 2}));
  EXPECT_EQ((*request)["model"]["bias"], false);
  EXPECT_EQ((*request)["model"]["activation"], "relu");
  EXPECT_EQ((*request)["shard"], "root");
  EXPECT_EQ((*request)["reshard_after_forward"], false);
  EXPECT_EQ((*request)["steps"], 3);
  EXPECT_EQ((*request)["batch"], 2);
  EXPECT_EQ((*request)["lr"], 0.05);
  EXPECT_EQ((*request)["seed"], 7);
  EXPECT_EQ((*request)["dtype"], "float32");
}

TEST(FsdpKind, RightObservablesPassWithTheirCountsAsSignals) {
  PlannedCase c = plan_one(kCase);
  Scratch scratch;
  const Values p = parameters(0.5f);
  Values close = p;
  close["0.bias"][1] += 4e-6f;  // within the default float32 tolerance (1e-5 of max(1, |v|))
  const Outcome o =
      c.prepared->check_observables(observables(scratch.dir, close, close, p), scratch.dir);
  ASSERT_EQ(o.status, Status::pass) << o.message;
  EXPECT_EQ(o.metrics["comms_per_step"],
            nlohmann::json::parse(R"([{"all_gather": 4, "reduce_scatter": 2},
                                      {"all_gather": 4, "reduce_scatter": 2}])"));
  EXPECT_EQ(o.metrics["bytes_per_step"][0]["all_gather"], 160);
  EXPECT_EQ(o.metrics["collectives"], 12);
  EXPECT_EQ(o.metrics["bytes_per_rank"], 480);
  EXPECT_EQ(o.metrics["parameter_elements"], 23);
  EXPECT_EQ(o.metrics["wrong_elements"], 0);
  ASSERT_EQ(o.plan.size(), 2u);
  EXPECT_EQ(o.plan[0],
            "step 1: forward [all_gather x2] backward [all_gather x2, reduce_scatter x2] "
            "optimizer [none]");
}

TEST(FsdpKind, ParametersOffTheReferenceFail) {
  PlannedCase c = plan_one(kCase);
  Scratch scratch;
  const Values p = parameters(0.5f);
  Values off = p;
  off["2.weight"][3] += 1e-3f;
  const Outcome o =
      c.prepared->check_observables(observables(scratch.dir, off, off, p), scratch.dir);
  ASSERT_EQ(o.status, Status::fail);
  EXPECT_NE(o.message.find("1 of 23 parameter elements differ from the single-process reference "
                           "by more than 1e-05"),
            std::string::npos)
      << o.message;
  EXPECT_EQ(o.metrics["wrong_elements"], 1);

  // A tolerance of the case's own accepts it.
  PlannedCase loose = plan_one(
      "{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4, 3, 2]}, steps: 2, "
      "tolerance: 1e-2}");
  EXPECT_EQ(loose.prepared->check_observables(observables(scratch.dir, off, off, p), scratch.dir)
                .status,
            Status::pass);
}

TEST(FsdpKind, RanksThatGatherOtherParametersFail) {
  PlannedCase c = plan_one(kCase);
  Scratch scratch;
  const Values p = parameters(0.5f);
  Values other = p;
  other["0.weight"][0] += 1e-7f;  // within tolerance, yet not the same bits as rank 0's
  const Outcome o =
      c.prepared->check_observables(observables(scratch.dir, p, other, p), scratch.dir);
  ASSERT_EQ(o.status, Status::fail);
  EXPECT_NE(o.message.find("1 rank(s) gathered other parameters than rank 0"), std::string::npos)
      << o.message;
}

TEST(FsdpKind, CountsOtherThanExpectedFailNamingStepPhaseAndOp) {
  PlannedCase c = plan_one(kCase);
  Scratch scratch;
  const Values p = parameters(0.5f);
  nlohmann::json obs = observables(scratch.dir, p, p, p, {step(3), step()});
  obs["steps"]["0"] = {step(3), step()};
  const Outcome o = c.prepared->check_observables(obs, scratch.dir);
  ASSERT_EQ(o.status, Status::fail);
  EXPECT_EQ(o.message,
            "step 1: expect.comms_per_step.all_gather 4 but rank 0 issued 5; step 1: "
            "expect.forward.all_gather 2 but rank 0 issued 3 in the forward");

  // A rank that issues other collectives than rank 0 fails even where the case expects none.
  PlannedCase bare = plan_one(
      "{name: a, kind: fsdp, mesh: {shape: [2]}, model: {layers: [4, 3, 2]}, steps: 2}");
  const Outcome mixed = bare.prepared->check_observables(
      observables(scratch.dir, p, p, p, {step(3), step()}), scratch.dir);
  ASSERT_EQ(mixed.status, Status::fail);
  EXPECT_EQ(mixed.message, "1 rank(s) issued other collectives than rank 0");
}

TEST(FsdpKind, MalformedObservablesAreTheImplementationsError) {
  PlannedCase c = plan_one(kCase);
  Scratch scratch;
  const Values p = parameters(0.5f);
  nlohmann::json obs = observables(scratch.dir, p, p, p);
  nlohmann::json few = obs;
  few["steps"]["1"] = {step()};
  EXPECT_THROW(c.prepared->check_observables(few, scratch.dir), ImplFailure);
  nlohmann::json phase = obs;
  phase["steps"]["0"][0]["sideways"] = nlohmann::json::object();
  EXPECT_THROW(c.prepared->check_observables(phase, scratch.dir), ImplFailure);
  nlohmann::json missing = obs;
  missing["params"].erase("1");
  EXPECT_THROW(c.prepared->check_observables(missing, scratch.dir), ImplFailure);
  nlohmann::json count = obs;
  count["steps"]["0"][0]["forward"]["all_gather"] = 2;
  EXPECT_THROW(c.prepared->check_observables(count, scratch.dir), ImplFailure);
  EXPECT_THROW(c.prepared->check_observables(nlohmann::json::array(), scratch.dir), ImplFailure);
}

TEST(FsdpKind, AMissingParameterFails) {
  PlannedCase c = plan_one(kCase);
  Scratch scratch;
  const Values p = parameters(0.5f);
  Values fewer = p;
  fewer.erase("2.bias");
  const Outcome o =
      c.prepared->check_observables(observables(scratch.dir, fewer, p, p), scratch.dir);
  ASSERT_EQ(o.status, Status::fail);
  EXPECT_NE(o.message.find("rank 0 holds the parameters [0.bias, 0.weight, 2.weight], the "
                           "reference [0.bias, 0.weight, 2.bias, 2.weight]"),
            std::string::npos)
      << o.message;
}

}  // namespace
}  // namespace meshgate::runner
