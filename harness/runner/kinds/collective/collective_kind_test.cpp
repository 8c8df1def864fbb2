// The collective kind on the threads backend: exact verification that passes, wrong elements
// that are counted on every rank and fail the case, and the size rules as input errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "case_file.hpp"
#include "comm/forwarding_communicator.hpp"
#include "comm/threads_world.hpp"
#include "external_impl.hpp"
#include "kinds/kind_test_support.hpp"
#include "runner.hpp"
#include "validate.hpp"
#include "world.hpp"

namespace meshgate::runner {

std::unique_ptr<PreparedCase> parse_collective_case(CaseNode& node, bool expect_error);

namespace {

const std::vector<KindEntry>& kinds() {
  static const std::vector<KindEntry> k = {{"collective", &parse_collective_case}};
  return k;
}

PlannedCases plan(const std::string& case_yaml) {
  return plan_case(case_yaml, kinds());
}

PlannedCase plan_one(const std::string& case_yaml) {
  return plan_one_case(case_yaml, kinds());
}

std::string input_error(const std::string& case_yaml) {
  return case_input_error(case_yaml, kinds());
}

// How CorruptingCommunicator breaks all_reduce, or split, on the group communicators it makes.
enum class Corruption {
  // The first output element becomes all-ones bits (NaN in float32) on the group's rank 1: a
  // collective that is wrong on one rank.
  first_element_of_rank_1,
  // The group's last rank contributes zeros instead of its input: a contribution lost.
  last_rank_input_lost,
  // split orders each group by rank instead of keeping the order given (an MPI_Comm_split
  // keyed by the parent rank rather than the position in the group).
  groups_in_rank_order,
  // broadcast works in place in every rank's send and never writes recv: a backend with an
  // in-place broadcast only, called for an out-of-place one.
  broadcast_into_send,
  // Out of place, the root's broadcast leaves its own recv unwritten (the peers' are right).
  broadcast_root_recv_unwritten,
  // Out of place, the root's broadcast overwrites its send after the call.
  broadcast_root_send_overwritten,
};

// A communicator that passes everything through, and breaks all_reduce, broadcast or split on
// the group communicators split from it as `corruption` says.
class CorruptingCommunicator final : public comm::ForwardingCommunicator {
 public:
  CorruptingCommunicator(std::unique_ptr<comm::Communicator> inner, bool corrupt,
                         Corruption corruption)
      : ForwardingCommunicator(std::move(inner)), corrupt_(corrupt), corruption_(corruption) {}
  void all_reduce(const void* send, void* recv, std::size_t count, comm::DType dtype,
                  comm::ReduceOp op) override {
    const bool lose_input = corrupt_ && corruption_ == Corruption::last_rank_input_lost &&
                            rank() == size() - 1 && count > 0;
    if (lose_input) std::memset(const_cast<void*>(send), 0, count * comm::element_size(dtype));
    inner().all_reduce(send, recv, count, dtype, op);
    if (corrupt_ && corruption_ == Corruption::first_element_of_rank_1 && rank() == 1) {
      std::memset(recv, 0xFF, comm::element_size(dtype));
    }
  }
  void broadcast(const void* send, void* recv, std::size_t count, comm::DType dtype,
                 int root) override {
    const bool out_of_place = corrupt_ && send != recv;
    void* own_send = const_cast<void*>(send);
    if (out_of_place &&
        (corruption_ == Corruption::broadcast_into_send ||
         (corruption_ == Corruption::broadcast_root_recv_unwritten && rank() == root))) {
      inner().broadcast(send, own_send, count, dtype, root);
      return;
    }
    inner().broadcast(send, recv, count, dtype, root);
    if (out_of_place && corruption_ == Corruption::broadcast_root_send_overwritten &&
        rank() == root) {
      std::memset(own_send, 0x7F, count * comm::element_size(dtype));
    }
  }
  // The groups are corrupting too: the case runs its collectives on them.
  std::unique_ptr<comm::Communicator> split(const std::vector<std::vector<int>>& groups) override {
    std::vector<std::vector<int>> sorted = groups;
    if (corruption_ == Corruption::groups_in_rank_order) {
      for (std::vector<int>& group : sorted) std::sort(group.begin(), group.end());
    }
    std::unique_ptr<comm::Communicator> child = inner().split(sorted);
    if (!child) return nullptr;
    return std::make_unique<CorruptingCommunicator>(std::move(child), true, corruption_);
  }

 private:
  bool corrupt_;
  Corruption corruption_;
};

// Rank threads over corrupting communicators; otherwise what the threads backend does.
class CorruptingContext final : public RunContext {
 public:
  explicit CorruptingContext(int ranks,
                             Corruption corruption = Corruption::first_element_of_rank_1) {
    comm::ThreadsWorld world(ranks);
    for (int r = 0; r < ranks; ++r) {
      comms_.push_back(
          std::make_unique<CorruptingCommunicator>(world.communicator(r), false, corruption));
    }
  }
  std::string_view backend() const override { return "threads"; }
  int world_size() const override { return static_cast<int>(comms_.size()); }
  void run_on_ranks(int ranks,
                    const std::function<void(int rank, comm::Communicator& comm)>& fn) override {
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] { fn(r, *comms_[static_cast<std::size_t>(r)]); });
    }
    for (std::thread& t : threads) t.join();
  }
  int lead_rank() const override { return 0; }
  std::optional<PerfSpec> perf() const override { return std::nullopt; }

 private:
  std::vector<std::unique_ptr<comm::Communicator>> comms_;
};

TEST(CollectiveKind, PassesWithEverySizeReported) {
  PlannedCase c = plan_one(
      "{name: a, kind: collective, op: all_gather, mesh: {shape: [2, 3], names: [dp, tp]}, "
      "group: tp, dtype: bfloat16, bytes: [6, 6KiB], inplace: [false, true]}");
  EXPECT_EQ(c.prepared->ranks(), 6);
  const CaseRun run = execute_case(c, std::nullopt);
  ASSERT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
  const nlohmann::json& sizes = run.outcome.metrics["sizes"];
  ASSERT_EQ(sizes.size(), 4u);
  EXPECT_EQ(sizes[0]["bytes"], 6);
  EXPECT_EQ(sizes[0]["count"], 1);
  EXPECT_EQ(sizes[0]["inplace"], false);
  EXPECT_EQ(sizes[3]["bytes"], 6144);
  EXPECT_EQ(sizes[3]["count"], 1024);
  EXPECT_EQ(sizes[3]["inplace"], true);
  for (const nlohmann::json& s : sizes) {
    EXPECT_EQ(s["wrong"], 0);
    EXPECT_GT(s["time_s"].get<double>(), 0.0);
    EXPECT_GT(s["modeled_time_s"].get<double>(), 0.0);
    // nccl-tests: all_gather's busbw is algbw * (n-1)/n.
    EXPECT_DOUBLE_EQ(s["busbw_GBps"].get<double>(), s["algbw_GBps"].get<double>() * 2.0 / 3.0);
  }
  EXPECT_EQ(run.outcome.metrics["group_size"], 3);
  EXPECT_EQ(run.outcome.metrics["groups"], 2);
  EXPECT_EQ(run.outcome.metrics["bytes"], 6144);
  EXPECT_NE(run.outcome.console_detail.find("bfloat16"), std::string::npos);
}

TEST(CollectiveKind, EveryOpAndReduceVerifiesExactlyOnOddGroups) {
  for (const char* body :
       {"op: all_reduce, dtype: float16, reduce: avg",
        "op: all_reduce, dtype: int8, reduce: product",
        "op: reduce_scatter, dtype: uint8, reduce: sum",
        "op: reduce_scatter, dtype: float64, reduce: min", "op: all_to_all, dtype: int64",
        "op: broadcast, dtype: float32, root: 4"}) {
    PlannedCase c = plan_one(std::string("{name: a, kind: collective, mesh: {shape: [5]}, ") +
                             body + ", bytes: [40, 40KiB], inplace: [false, true]}");
    const CaseRun run = execute_case(c, std::nullopt);
    EXPECT_EQ(run.outcome.status, Status::pass) << body << ": " << run.outcome.message;
    EXPECT_EQ(run.outcome.metrics["wrong"], 0) << body;
  }
}

TEST(CollectiveKind, AWrongElementOnOneRankFailsTheCaseWithTheSummedCount) {
  PlannedCase c = plan_one(
      "{name: a, kind: collective, op: all_reduce, mesh: {shape: [2, 2], names: [dp, tp]}, "
      "group: tp, dtype: float32, reduce: sum, bytes: [8, 64]}");
  CorruptingContext ctx(4);
  const Outcome outcome = c.prepared->run(ctx);
  EXPECT_EQ(outcome.status, Status::fail);
  // Two groups, rank 1 of each wrong in one element, at each of the two sizes.
  EXPECT_EQ(outcome.metrics["wrong"], 4);
  EXPECT_EQ(outcome.metrics["sizes"][0]["wrong"], 2);
  EXPECT_EQ(outcome.message,
            "4 wrong element(s) summed over the ranks (8 B out-of-place: 2, 64 B out-of-place: 2); "
            "expected exact results");
}

// Inputs were drawn from [-limit / n, limit / n] (limit / n^2 for avg), which is {0} once the
// group outgrows the dtype's exact range: a bfloat16 avg on 32 ranks or an int8 sum on 128
// passed with a rank's contribution lost.
TEST(CollectiveKind, ALostContributionFailsInGroupsLargerThanTheDtypesExactRange) {
  struct Large {
    const char* body;
    int ranks;
  };
  for (const Large& large : {Large{"dtype: bfloat16, reduce: avg, bytes: [64]", 32},
                             Large{"dtype: bfloat16, reduce: sum, bytes: [1024]", 300},
                             Large{"dtype: float16, reduce: avg, bytes: [256]", 64},
                             Large{"dtype: int8, reduce: sum, bytes: [128]", 128},
                             Large{"dtype: uint8, reduce: product, bytes: [16]", 8},
                             Large{"dtype: float32, reduce: sum, bytes: [8]", 4}}) {
    PlannedCase c = plan_one("{name: a, kind: collective, op: all_reduce, mesh: {shape: [" +
                             std::to_string(large.ranks) + "]}, " + large.body + "}");
    CorruptingContext ctx(large.ranks, Corruption::last_rank_input_lost);
    const Outcome outcome = c.prepared->run(ctx);
    EXPECT_EQ(outcome.status, Status::fail) << large.body << " on " << large.ranks;
    EXPECT_GT(outcome.metrics["wrong"].get<std::int64_t>(), 0) << large.body;
    // The same case without the corruption passes: the inputs stay exact.
    EXPECT_EQ(execute_case(c, std::nullopt).outcome.status, Status::pass) << large.body;
  }
  const std::string error = input_error(
      "{name: a, kind: collective, op: all_reduce, mesh: {shape: [257]}, dtype: bfloat16, "
      "reduce: avg, bytes: 514}");
  EXPECT_NE(error.find("key 'reduce': avg of bfloat16 on groups of 257 ranks cannot be checked "
                       "exactly"),
            std::string::npos)
      << error;
}

// Values follow the position in the group as the mesh gives it, so a backend whose group
// ranks come in another order (here: by parent rank) gathers the blocks out of order.
TEST(CollectiveKind, AGroupSplitOutOfOrderFails) {
  PlannedCase c = plan_one(
      "{name: a, kind: collective, op: all_gather, mesh: {shape: [2, 2], names: [dp, tp], "
      "ranks: [3, 1, 2, 0]}, group: [dp, tp], dtype: int32, bytes: [16]}");
  CorruptingContext ctx(4, Corruption::groups_in_rank_order);
  const Outcome outcome = c.prepared->run(ctx);
  EXPECT_EQ(outcome.status, Status::fail);
  EXPECT_GT(outcome.metrics["wrong"].get<std::int64_t>(), 0);
  EXPECT_EQ(execute_case(c, std::nullopt).outcome.status, Status::pass);
}

// Out of place, a broadcast has a send and a recv on every rank, as ncclBroadcast: every recv
// starts as the sentinel and must hold the root's values (the root's too), and the root's send
// must be unchanged. Before, out-of-place rows ran in place in one buffer, so a backend that
// never wrote recv passed them.
TEST(CollectiveKind, AnOutOfPlaceBroadcastIsCheckedInEveryRecvAndTheRootsSend) {
  PlannedCase c = plan_one(
      "{name: a, kind: collective, op: broadcast, mesh: {shape: [2, 3], names: [dp, tp]}, "
      "group: tp, dtype: int32, root: 1, bytes: [12, 48], inplace: [false, true]}");
  struct Broken {
    Corruption corruption;
    std::int64_t wrong_12, wrong_48;  // out of place, summed over the 2 groups of 3
    const char* what;
  };
  for (const Broken& broken :
       {Broken{Corruption::broadcast_into_send, 3 * 3 * 2, 12 * 3 * 2, "no recv written"},
        Broken{Corruption::broadcast_root_recv_unwritten, 3 * 2, 12 * 2, "root's recv unwritten"},
        Broken{Corruption::broadcast_root_send_overwritten, 3 * 2, 12 * 2,
               "root's send overwritten"}}) {
    CorruptingContext ctx(6, broken.corruption);
    const Outcome outcome = c.prepared->run(ctx);
    EXPECT_EQ(outcome.status, Status::fail) << broken.what;
    const nlohmann::json& sizes = outcome.metrics["sizes"];
    ASSERT_EQ(sizes.size(), 4u) << broken.what;
    EXPECT_EQ(sizes[0]["inplace"], false);
    EXPECT_EQ(sizes[0]["wrong"], broken.wrong_12) << broken.what;
    EXPECT_EQ(sizes[1]["wrong"], broken.wrong_48) << broken.what;
    // In place there is one buffer, which each corruption handles correctly.
    EXPECT_EQ(sizes[2]["inplace"], true);
    EXPECT_EQ(sizes[2]["wrong"], 0) << broken.what;
    EXPECT_EQ(sizes[3]["wrong"], 0) << broken.what;
  }
  const CaseRun run = execute_case(c, std::nullopt);
  EXPECT_EQ(run.outcome.status, Status::pass) << run.outcome.message;
}

TEST(CollectiveKind, SizesThatDoNotDivideAreInputErrors) {
  EXPECT_EQ(input_error("{name: a, kind: collective, op: all_reduce, mesh: {shape: [4]}, dtype: "
                        "float32, reduce: sum, bytes: [8, 6]}"),
            "t.yaml:3:109: case 's/a': key 'bytes': 6 B does not divide into whole float32 "
            "elements (4 B) for all_reduce on groups of 4");
  EXPECT_EQ(input_error("{name: a, kind: collective, op: all_gather, mesh: {shape: [3]}, dtype: "
                        "float32, bytes: 16}"),
            "t.yaml:3:92: case 's/a': key 'bytes': 16 B does not divide into 3 equal chunks of "
            "whole float32 elements (12 B) for all_gather on groups of 3");
  EXPECT_NE(input_error("{name: a, kind: collective, op: all_gather, mesh: {shape: [3]}, dtype: "
                        "float32, reduce: sum, bytes: 12}")
                .find("key 'reduce': only all_reduce and reduce_scatter reduce"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: collective, op: broadcast, mesh: {shape: [3]}, dtype: "
                        "int8, root: 3, bytes: 12}")
                .find("key 'root': must be a rank of the group, 0 to 2, got 3"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: collective, op: all_to_all, mesh: {shape: [2, 2], names: "
                        "[a, b]}, group: [c], dtype: int8, bytes: 12}")
                .find("key 'group': KeyError"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: collective, op: all_reduce, mesh: {shape: [2]}, dtype: "
                        "float32, reduce: sum, bytes: 8 MB}")
                .find("key 'bytes': expected a size in bytes"),
            std::string::npos);
}

// An integer average ran and was reported as a failed kernel, without file or line.
TEST(CollectiveKind, AvgOfAnIntegerDtypeIsAnInputErrorAtReduce) {
  for (const std::string dtype : {"int32", "int64", "int8", "uint8"}) {
    for (const std::string op : {"all_reduce", "reduce_scatter"}) {
      const std::string error =
          input_error("{name: a, kind: collective, op: " + op +
                      ", mesh: {shape: [2]}, dtype: " + dtype + ", reduce: avg, bytes: 8}");
      EXPECT_EQ(error.rfind("t.yaml:3:", 0), 0u) << error;
      EXPECT_NE(error.find("case 's/a': key 'reduce': avg of " + dtype +
                           " is supported by no backend (it would round): use a floating-point "
                           "dtype, or sum"),
                std::string::npos)
          << error;
    }
  }
}

// Sizes above 1 GiB were refused whatever the memory limit; now the memory limit alone bounds
// them, as nccl-tests' sweeps to 8 GiB need.
TEST(CollectiveKind, SizesAboveOneGiBAreBoundedByTheMemoryLimitOnly) {
  const PlannedCases sweep = plan(
      "{name: a, kind: collective, op: all_reduce, mesh: {shape: [2]}, dtype: float32, reduce: "
      "sum, bytes: {from: 1GiB, to: 8GiB, factor: 2}, memory_limit: 64GiB}");
  ASSERT_TRUE(sweep.errors.empty()) << sweep.errors.front();
  EXPECT_EQ(sweep.cases.at(0).prepared->params()["bytes"],
            (nlohmann::json{1ll << 30, 2ll << 30, 4ll << 30, 8ll << 30}));
  // Over the default 16 GiB the case is refused by its memory estimate, at bytes, not by a cap.
  const std::string over = input_error(
      "{name: a, kind: collective, op: all_reduce, mesh: {shape: [2]}, dtype: float32, reduce: "
      "sum, bytes: 8GiB}");
  EXPECT_NE(over.find("key 'bytes': needs an estimated 48 GiB of host memory"), std::string::npos)
      << over;
  EXPECT_NE(input_error("{name: a, kind: collective, op: all_reduce, mesh: {shape: [2]}, dtype: "
                        "float32, reduce: sum, bytes: 0}")
                .find("key 'bytes': sizes must be at least 1 B"),
            std::string::npos);
  // A factor that would step past 2^63 ends the sweep instead of wrapping around.
  const PlannedCases huge = plan(
      "{name: a, kind: collective, op: all_reduce, mesh: {shape: [1]}, dtype: int8, reduce: sum, "
      "bytes: {from: 1TiB, to: 4000000TiB, factor: 2000000000}, memory_limit: 1000000TiB}");
  ASSERT_TRUE(huge.errors.empty()) << huge.errors.front();
  EXPECT_EQ(huge.cases.at(0).prepared->params()["bytes"], (nlohmann::json{1ll << 40}));
}

// Before, a rank list reaching rank 5000000 made a world of 5000001 rank threads.
TEST(CollectiveKind, AMeshWhoseHighestRankNeedsTooManyRanksIsRejected) {
  EXPECT_NE(input_error("{name: a, kind: collective, op: all_reduce, mesh: {shape: [2], ranks: [0, "
                        "5000000]}, dtype: float32, reduce: sum, bytes: 8}")
                .find("key 'mesh': its highest rank is 5000000, so the case needs 5000001 ranks"),
            std::string::npos);
}

TEST(CollectiveKind, ASweepEndingBeforeItStartsOrASizeListedTwiceIsAnInputError) {
  EXPECT_NE(input_error("{name: a, kind: collective, op: all_reduce, mesh: {shape: [2]}, dtype: "
                        "float32, reduce: sum, bytes: {from: 1KiB, to: 512}}")
                .find("key 'bytes.to': must be at least from (1024 B), got 512 B"),
            std::string::npos);
  EXPECT_NE(input_error("{name: a, kind: collective, op: all_reduce, mesh: {shape: [2]}, dtype: "
                        "float32, reduce: sum, bytes: [8, 1KiB, 8]}")
                .find("key 'bytes': lists 8 B twice"),
            std::string::npos);
}

TEST(CollectiveKind, SweepSizesRoundDownToWholeChunks) {
  PlannedCase c = plan_one(
      "{name: a, kind: collective, op: all_gather, mesh: {shape: [3]}, dtype: float32, bytes: "
      "{from: 10, to: 100, factor: 2}}");
  // 10 -> 0 (dropped), 20 -> 12, 40 -> 36, 80 -> 72: multiples of 3 chunks of 4 bytes.
  EXPECT_EQ(c.prepared->params()["bytes"], (nlohmann::json{12, 36, 72}));
}

// ---- another implementation's answers (external_impl.hpp) -------------------------------------

// A case's request written into a scratch folder, and answers built from its input files.
struct ImplExchange {
  ScratchDir dir;
  PlannedCase planned;
  nlohmann::json request;

  explicit ImplExchange(const std::string& case_yaml)
      : dir(std::filesystem::temp_directory_path(), unique_leaf()), planned(plan_one(case_yaml)) {
    std::string why;
    const std::optional<nlohmann::json> made = planned.prepared->impl_request(dir.path(), why);
    EXPECT_TRUE(made.has_value()) << why;
    if (made) request = *made;
  }

  static std::string unique_leaf() {
    static int serial = 0;
    return "meshgate-collective-kind-test-" + std::to_string(::getpid()) + "-" +
           std::to_string(++serial);
  }

  std::vector<float> input(const nlohmann::json& row, int rank) const {
    const TensorFile t = read_tensor_file(row["inputs"][std::to_string(rank)], dir.path(), "input");
    std::vector<float> values(t.bytes.size() / sizeof(float));
    std::memcpy(values.data(), t.bytes.data(), t.bytes.size());
    return values;
  }

  nlohmann::json output(const std::string& name, const std::vector<float>& values) const {
    return write_tensor_file(dir.path() / name, "float32",
                             {static_cast<std::int64_t>(values.size())}, values.data(),
                             values.size() * sizeof(float));
  }

  // The right answer of a float32 all_gather: every rank gets its group's inputs in group order.
  // `corrupt(row, rank, output)` may change one rank's output.
  nlohmann::json all_gather_answer(
      const std::function<void(std::size_t, int, std::vector<float>&)>& corrupt = {}) const {
    nlohmann::json sizes = nlohmann::json::array();
    for (std::size_t i = 0; i < request["sizes"].size(); ++i) {
      const nlohmann::json& row = request["sizes"][i];
      nlohmann::json entry = {{"outputs", nlohmann::json::object()},
                              {"time_s", {2e-6, 1e-6, 3e-6}}};
      for (const nlohmann::json& group : request["groups"]) {
        std::vector<float> gathered;
        for (const nlohmann::json& member : group) {
          const std::vector<float> in = input(row, member.get<int>());
          gathered.insert(gathered.end(), in.begin(), in.end());
        }
        for (const nlohmann::json& member : group) {
          std::vector<float> out = gathered;
          if (corrupt) corrupt(i, member.get<int>(), out);
          entry["outputs"][std::to_string(member.get<int>())] =
              output("out-" + std::to_string(i) + "-" + std::to_string(member.get<int>()), out);
        }
      }
      sizes.push_back(entry);
    }
    return {{"sizes", sizes}};
  }

  Outcome check(const nlohmann::json& observables) {
    return planned.prepared->check_observables(observables, dir.path());
  }
};

constexpr const char* kGatherCase =
    "{name: a, kind: collective, op: all_gather, mesh: {shape: [2, 2], names: [dp, tp], ranks: "
    "[3, 1, 2, 0]}, group: tp, dtype: float32, bytes: [8, 1KiB], inplace: [false, true]}";

// The request holds a row per (in-place setting, size), in the order meshgate runs them, with
// the inputs of meshgate's own run: group ranks in mesh order, the size's files shared by the
// in-place and out-of-place rows.
TEST(CollectiveKindImpl, TheRequestCarriesTheGroupsAndEveryRowsInputs) {
  ImplExchange x(kGatherCase);
  const nlohmann::json& r = x.request;
  EXPECT_EQ(r["op"], "all_gather");
  EXPECT_EQ(r["dtype"], "float32");
  EXPECT_TRUE(r["reduce"].is_null());
  EXPECT_TRUE(r["root"].is_null());
  EXPECT_EQ(r["groups"], (nlohmann::json{{3, 1}, {2, 0}}));
  EXPECT_EQ(r["world"], 4);
  ASSERT_EQ(r["sizes"].size(), 4u);
  EXPECT_EQ(r["sizes"][0]["bytes"], 8);
  EXPECT_EQ(r["sizes"][0]["count"], 1);
  EXPECT_EQ(r["sizes"][0]["inplace"], false);
  EXPECT_EQ(r["sizes"][3]["bytes"], 1024);
  EXPECT_EQ(r["sizes"][3]["count"], 128);
  EXPECT_EQ(r["sizes"][3]["inplace"], true);
  EXPECT_EQ(r["sizes"][1]["inputs"], r["sizes"][3]["inputs"]);
  EXPECT_EQ(r["sizes"][3]["inputs"]["0"]["shape"], (nlohmann::json{128}));
  // Every group has its own values.
  EXPECT_NE(x.input(r["sizes"][1], 3), x.input(r["sizes"][1], 2));

  const nlohmann::json broadcast =
      ImplExchange(
          "{name: b, kind: collective, op: broadcast, mesh: {shape: [3]}, dtype: int8, root: 2, "
          "bytes: 4}")
          .request;
  EXPECT_EQ(broadcast["root"], 2);
  const nlohmann::json reduce = ImplExchange(
                                    "{name: c, kind: collective, op: reduce_scatter, mesh: "
                                    "{shape: [2]}, dtype: float64, reduce: avg, bytes: 16}")
                                    .request;
  EXPECT_EQ(reduce["reduce"], "avg");
  EXPECT_EQ(reduce["sizes"][0]["count"], 1);
}

TEST(CollectiveKindImpl, RightOutputsPassWithTheTableOfMeshgatesOwnRun) {
  ImplExchange x(kGatherCase);
  const Outcome outcome = x.check(x.all_gather_answer());
  ASSERT_EQ(outcome.status, Status::pass) << outcome.message;
  const nlohmann::json& sizes = outcome.metrics["sizes"];
  ASSERT_EQ(sizes.size(), 4u);
  EXPECT_EQ(sizes[3]["bytes"], 1024);
  EXPECT_EQ(sizes[3]["inplace"], true);
  EXPECT_EQ(sizes[3]["wrong"], 0);
  // The median of the answered iterations, and nccl-tests' bandwidths from it.
  EXPECT_DOUBLE_EQ(sizes[3]["time_s"].get<double>(), 2e-6);
  EXPECT_DOUBLE_EQ(sizes[3]["algbw_GBps"].get<double>(), 1024 / 2e-6 / 1e9);
  EXPECT_DOUBLE_EQ(sizes[3]["busbw_GBps"].get<double>(), 1024 / 2e-6 / 1e9 / 2);
  EXPECT_EQ(outcome.metrics["wrong"], 0);
  EXPECT_EQ(outcome.metrics["groups"], 2);
  EXPECT_EQ(outcome.metrics["bytes"], 1024);
  EXPECT_EQ(outcome.plan, (std::vector<std::string>{"all_gather(float32) on 2 group(s) of 2"}));
  EXPECT_NE(outcome.console_detail.find("float32"), std::string::npos);
}

TEST(CollectiveKindImpl, WrongOutputsFailWithTheSummedCount) {
  ImplExchange x(kGatherCase);
  // Rank 1 loses one element at the second size in place; rank 2 has its blocks swapped at the
  // first size out of place (what a group in rank order rather than mesh order gathers).
  const Outcome outcome =
      x.check(x.all_gather_answer([](std::size_t row, int rank, std::vector<float>& out) {
        if (row == 3 && rank == 1) out[5] += 1;
        if (row == 0 && rank == 2) std::swap(out[0], out[1]);
      }));
  EXPECT_EQ(outcome.status, Status::fail);
  EXPECT_EQ(outcome.metrics["wrong"], 3);
  EXPECT_EQ(outcome.message,
            "3 wrong element(s) summed over the ranks (8 B out-of-place: 2, 1 KiB in-place: 1); "
            "expected exact results");
}

// Out of place, a broadcast root's send must be unchanged: the answer carries it.
TEST(CollectiveKindImpl, AnOutOfPlaceBroadcastIsCheckedInTheRootsSendToo) {
  ImplExchange x(
      "{name: a, kind: collective, op: broadcast, mesh: {shape: [3]}, dtype: float32, root: 1, "
      "bytes: 8, inplace: [false, true]}");
  const nlohmann::json& rows = x.request["sizes"];
  const std::vector<float> sent = x.input(rows[0], 1);
  // The other ranks' send holds the sentinel: only the root's values are sent.
  EXPECT_TRUE(std::isnan(x.input(rows[0], 0)[0]));
  const auto answer = [&](const std::vector<float>& root_send) {
    nlohmann::json sizes = nlohmann::json::array();
    for (int row = 0; row < 2; ++row) {
      nlohmann::json entry = {{"outputs", nlohmann::json::object()}};
      for (int rank = 0; rank < 3; ++rank) {
        entry["outputs"][std::to_string(rank)] =
            x.output("out-" + std::to_string(row) + "-" + std::to_string(rank), sent);
      }
      if (row == 0) entry["sends"] = {{"1", x.output("send-1", root_send)}};
      sizes.push_back(entry);
    }
    return nlohmann::json{{"sizes", sizes}};
  };
  EXPECT_EQ(x.check(answer(sent)).status, Status::pass);
  std::vector<float> changed = sent;
  changed[1] = 0.5F;
  const Outcome outcome = x.check(answer(changed));
  EXPECT_EQ(outcome.status, Status::fail);
  EXPECT_EQ(outcome.metrics["sizes"][0]["wrong"], 1);
  // Without perf the answer may leave out time_s; the time is then 0.
  EXPECT_EQ(outcome.metrics["sizes"][0]["time_s"], 0.0);
  nlohmann::json without_sends = answer(sent);
  without_sends["sizes"][0].erase("sends");
  EXPECT_THROW(x.check(without_sends), ImplFailure);
}

// An answer that is not of the protocol's form is the implementation's failure, not a verdict.
TEST(CollectiveKindImpl, GarbageIsAnImplFailure) {
  ImplExchange x(kGatherCase);
  const nlohmann::json right = x.all_gather_answer();
  ASSERT_EQ(x.check(right).status, Status::pass);
  const auto fails = [&](const std::function<void(nlohmann::json&)>& spoil,
                         const std::string& words) {
    nlohmann::json answer = right;
    spoil(answer);
    try {
      x.check(answer);
      ADD_FAILURE() << "no ImplFailure for " << answer.dump().substr(0, 300);
    } catch (const ImplFailure& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  fails([](nlohmann::json& a) { a = nlohmann::json::array(); }, "without a list 'sizes'");
  fails([](nlohmann::json& a) { a["sizes"] = "all"; }, "without a list 'sizes'");
  fails([](nlohmann::json& a) { a["sizes"].erase(3); },
        "3 collective size(s) where the request has 4");
  fails([](nlohmann::json& a) { a["sizes"][1] = 7; }, "without an object 'outputs'");
  fails([](nlohmann::json& a) { a["sizes"][1]["outputs"].erase("2"); },
        "no output of rank 2 at 1 KiB out of place");
  fails([](nlohmann::json& a) { a["sizes"][2]["outputs"]["0"]["dtype"] = "float64"; },
        "the output of rank 0 at 8 B in place with a tensor file of 8 bytes where its shape and "
        "dtype make 16");
  fails([](nlohmann::json& a) { a["sizes"][2]["outputs"]["0"]["dtype"] = "int32"; },
        "the output of rank 0 at 8 B in place as int32 where the case's dtype is float32");
  fails(
      [&](nlohmann::json& a) {
        a["sizes"][0]["outputs"]["3"] = x.output("short", std::vector<float>(1, 0.0F));
      },
      "the output of rank 3 at 8 B out of place with 1 element(s) where the op's buffer has 2");
  fails([](nlohmann::json& a) { a["sizes"][0]["outputs"]["3"]["path"] = "/etc/passwd"; },
        "outside the case's dir");
  fails([](nlohmann::json& a) { a["sizes"][0]["time_s"] = 3; }, "not a non-empty list");
  fails([](nlohmann::json& a) { a["sizes"][0]["time_s"] = nlohmann::json::array(); },
        "not a non-empty list");
  fails([](nlohmann::json& a) { a["sizes"][0]["time_s"] = {1e-6, "fast"}; }, "not a number >= 0");
  fails([](nlohmann::json& a) { a["sizes"][0]["time_s"] = {-1e-6}; }, "not a number >= 0");
}

// An implementation may decline single rows ({"unsupported": REASON} in place of a row's
// observables, docs/impl-protocol.md): those rows are skips in the table with the reason and
// the row's identity, and the case is judged on the rows that ran.
TEST(CollectiveKindImpl, DeclinedRowsAreSkipsAndTheRowsThatRanAreJudged) {
  ImplExchange x(kGatherCase);
  const std::string reason = "in place: no in-place all_gather here";
  nlohmann::json answer = x.all_gather_answer();
  answer["sizes"][2] = {{"unsupported", reason}};
  answer["sizes"][3] = {{"unsupported", reason}};
  const Outcome outcome = x.check(answer);
  ASSERT_EQ(outcome.status, Status::pass) << outcome.message;
  EXPECT_EQ(outcome.message,
            "2 of 4 rows not run by the implementation; 8 B in-place, 1 KiB in-place: " + reason);
  const nlohmann::json& sizes = outcome.metrics["sizes"];
  ASSERT_EQ(sizes.size(), 4u);
  EXPECT_EQ(sizes[1]["wrong"], 0);
  EXPECT_FALSE(sizes[1].contains("status"));
  for (const int row : {2, 3}) {
    EXPECT_EQ(sizes[row]["status"], "skip");
    EXPECT_EQ(sizes[row]["reason"], reason);
    EXPECT_EQ(sizes[row]["inplace"], true);
    // Nothing measured: no time, bandwidth or count of wrong elements that would read as 0.
    for (const char* key : {"time_s", "algbw_GBps", "busbw_GBps", "wrong"}) {
      EXPECT_FALSE(sizes[row].contains(key)) << key;
    }
  }
  // The same identity as meshgate's own rows, so the signals made from the table agree.
  EXPECT_EQ(sizes[3]["bytes"], 1024);
  EXPECT_EQ(sizes[3]["count"], 128);
  EXPECT_EQ(sizes[3]["modeled_time_s"], sizes[1]["modeled_time_s"]);
  EXPECT_EQ(outcome.metrics["bytes"], 1024);
  EXPECT_EQ(outcome.metrics["wrong"], 0);
  EXPECT_NE(outcome.console_detail.find("skip"), std::string::npos);

  // A wrong element in a row that ran still fails the case; the message says both.
  nlohmann::json wrong = x.all_gather_answer([](std::size_t row, int rank, std::vector<float>& out) {
    if (row == 0 && rank == 2) std::swap(out[0], out[1]);
  });
  wrong["sizes"][2] = {{"unsupported", reason}};
  const Outcome failed = x.check(wrong);
  EXPECT_EQ(failed.status, Status::fail);
  EXPECT_EQ(failed.message,
            "2 wrong element(s) summed over the ranks (8 B out-of-place: 2); expected exact "
            "results; 1 of 4 rows not run by the implementation; 8 B in-place: " + reason);

  // Rows declined for different reasons are listed by reason.
  nlohmann::json two = x.all_gather_answer();
  two["sizes"][0] = {{"unsupported", "small"}};
  two["sizes"][2] = {{"unsupported", reason}};
  two["sizes"][3] = {{"unsupported", reason}};
  EXPECT_EQ(x.check(two).message,
            "3 of 4 rows not run by the implementation; 8 B out-of-place: small; 8 B in-place, "
            "1 KiB in-place: " + reason);
}

TEST(CollectiveKindImpl, ACaseWhoseEveryRowIsDeclinedIsASkip) {
  ImplExchange x(kGatherCase);
  nlohmann::json answer = {{"sizes", nlohmann::json::array()}};
  for (int row = 0; row < 4; ++row) answer["sizes"].push_back({{"unsupported", "not here"}});
  const Outcome outcome = x.check(answer);
  EXPECT_EQ(outcome.status, Status::skip);
  EXPECT_EQ(outcome.message,
            "4 of 4 rows not run by the implementation; 8 B out-of-place, 1 KiB out-of-place, "
            "8 B in-place, 1 KiB in-place: not here");
  EXPECT_FALSE(outcome.metrics.contains("bytes"));
  EXPECT_FALSE(outcome.metrics.contains("wrong"));
  EXPECT_EQ(outcome.metrics["sizes"].size(), 4u);
}

// A row is either run or declined, with a reason: anything else is the implementation's failure.
TEST(CollectiveKindImpl, ADeclinedRowWithoutAReasonOrWithOutputsIsAnImplFailure) {
  ImplExchange x(kGatherCase);
  const nlohmann::json right = x.all_gather_answer();
  const auto fails = [&](const nlohmann::json& entry, const std::string& words) {
    nlohmann::json answer = right;
    answer["sizes"][3] = entry;
    try {
      x.check(answer);
      ADD_FAILURE() << "no ImplFailure for " << entry.dump();
    } catch (const ImplFailure& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  fails({{"unsupported", ""}},
        "answered the collective size 1 KiB in place unsupported without a reason");
  fails({{"unsupported", 3}}, "unsupported without a reason (a non-empty string)");
  fails({{"unsupported", nullptr}}, "unsupported without a reason");
  nlohmann::json both = right["sizes"][3];
  both["unsupported"] = "in place";
  fails(both, "answered the collective size 1 KiB in place both unsupported and with observables");
}

// The runner end to end with a fake implementation: a shell program speaking meshgate.impl/1
// on its channel that gathers the two ranks' input files (an all_gather of 2 ranks is the
// concatenation of their inputs) for the out-of-place rows and declines the in-place ones.
class FakeImplementation : public ::testing::Test {
 protected:
  static constexpr const char* kScript = R"sh(
mode=$1
entry() {  # the outputs of both ranks at size index $1, from the file $2 of $3 elements
  printf '{"outputs":{"0":{"path":"%s","dtype":"float32","shape":[%s]},' "$2" "$3"
  printf '"1":{"path":"%s","dtype":"float32","shape":[%s]}}}' "$2" "$3"
}
while IFS= read -r line <&3; do
  case "$line" in
    *'"type":"hello"'*)
      printf '%s\n' '{"type":"hello","protocol":"meshgate.impl/1","name":"fake","version":"0.1","kinds":["collective"]}' >&4
      continue ;;
    *'"type":"bye"'*) exit 0 ;;
  esac
  dir=$(printf '%s\n' "$line" | sed 's/^{"dir":"\([^"]*\)".*/\1/')
  for s in 0 1; do
    cat "$dir/input-$s-rank-0.bin" "$dir/input-$s-rank-1.bin" > "$dir/out-$s.bin"
  done
  if [ "$mode" = wrong ]; then
    cat "$dir/input-0-rank-1.bin" "$dir/input-0-rank-0.bin" > "$dir/out-0.bin"
  fi
  declined='{"unsupported":"in place: the fake has no in-place all_gather"}'
  case "$mode" in
    every-row) rows="$declined,$declined,$declined,$declined" ;;
    no-reason) rows="$(entry 0 "$dir/out-0.bin" 2),$(entry 1 "$dir/out-1.bin" 4),{\"unsupported\":\"\"},$declined" ;;
    *) rows="$(entry 0 "$dir/out-0.bin" 2),$(entry 1 "$dir/out-1.bin" 4),$declined,$declined" ;;
  esac
  printf '{"type":"case","status":"ok","observables":{"sizes":[%s]}}\n' "$rows" >&4
done
)sh";

  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ImplExchange::unique_leaf();
    std::filesystem::create_directories(root_ / "scratch");
    std::ofstream(root_ / "fake.sh") << kScript;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  CaseRun run(const std::string& mode) {
    PlannedCase planned = plan_one(
        "{name: a, kind: collective, op: all_gather, mesh: {shape: [2]}, dtype: float32, "
        "bytes: [8, 16], inplace: [false, true]}");
    ExternalImpl impl("fake", {"sh", (root_ / "fake.sh").string(), mode}, root_ / "fake.log", 60);
    CaseRun result = execute_external(planned, impl, root_ / "scratch");
    impl.stop();
    return result;
  }

  std::filesystem::path root_;
};

TEST_F(FakeImplementation, ItsOutOfPlaceRowsAreJudgedAndItsDeclinedRowsSkipped) {
  const CaseRun result = run("in-place-declined");
  ASSERT_EQ(result.outcome.status, Status::pass) << result.outcome.message;
  EXPECT_EQ(result.outcome.message,
            "2 of 4 rows not run by the implementation; 8 B in-place, 16 B in-place: in place: the "
            "fake has no in-place all_gather");
  const nlohmann::json& sizes = result.outcome.metrics["sizes"];
  ASSERT_EQ(sizes.size(), 4u);
  EXPECT_EQ(sizes[0]["wrong"], 0);
  EXPECT_EQ(sizes[1]["wrong"], 0);
  EXPECT_EQ(sizes[2]["status"], "skip");
  EXPECT_EQ(sizes[3]["reason"], "in place: the fake has no in-place all_gather");
}

TEST_F(FakeImplementation, AWrongRowThatRanStillFails) {
  const CaseRun result = run("wrong");
  EXPECT_EQ(result.outcome.status, Status::fail);
  EXPECT_EQ(result.outcome.metrics["sizes"][0]["wrong"], 4);  // both ranks, both elements
  EXPECT_EQ(result.outcome.metrics["sizes"][2]["status"], "skip");
}

TEST_F(FakeImplementation, EveryRowDeclinedIsASkipNamingTheImplementation) {
  const CaseRun result = run("every-row");
  EXPECT_EQ(result.outcome.status, Status::skip);
  EXPECT_EQ(result.outcome.message.rfind("fake: 4 of 4 rows not run by the implementation; ", 0),
            0u)
      << result.outcome.message;
}

TEST_F(FakeImplementation, ADeclinedRowWithoutAReasonIsAnErrorNamingIt) {
  const CaseRun result = run("no-reason");
  EXPECT_EQ(result.outcome.status, Status::error);
  EXPECT_NE(result.outcome.message.find("implementation 'fake' answered the collective size 8 B "
                                        "in place unsupported without a reason"),
            std::string::npos)
      << result.outcome.message;
}

// Inputs over the limit would cost more to write and read back than the collectives they
// check: the case is not handed over, and the skip says why.
TEST(CollectiveKindImpl, InputsOverTheLimitAreNotHandedOver) {
  PlannedCase c = plan_one(
      "{name: a, kind: collective, op: all_reduce, mesh: {shape: [8]}, dtype: float32, reduce: "
      "sum, bytes: 64MiB}");
  const ScratchDir dir(std::filesystem::temp_directory_path(), ImplExchange::unique_leaf());
  std::string why;
  EXPECT_FALSE(c.prepared->impl_request(dir.path(), why).has_value());
  EXPECT_EQ(why,
            "its inputs hold 512 MiB over every rank and size, more than the 256 MiB handed to "
            "another implementation as files per case");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace meshgate::runner
