// kind: ring_allreduce — this project's ring all-reduce (ring_allreduce.hpp) as a case kind of
// meshgate's runner: it reads its keys from the case, runs the kernel on the case's ranks,
// checks every element against the exact sum and, for a performance case, times calls of it.
//
//   - name: ring-4
//     kind: ring_allreduce
//     ranks: 4             # ranks of the ring (default 2)
//     elements: 100000     # floats per rank (required)
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ring_allreduce.hpp"
#include "runner/case_kind.hpp"
#include "runner/kind_registry.hpp"
#include "runner/timing.hpp"

namespace {

using meshgate::comm::Communicator;
using meshgate::comm::DType;
using meshgate::runner::CaseNode;
using meshgate::runner::MemoryEstimate;
using meshgate::runner::Outcome;
using meshgate::runner::PreparedCase;
using meshgate::runner::RunContext;
using meshgate::runner::Status;

constexpr int kMaxRanks = 64;

// Rank r's input at element i. Small integers, so that every sum is exact in float32 and a
// wrong element is wrong by at least 1.
float input(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * (i % 251 + 1));
}

float expected_sum(int ranks, std::size_t i) {
  return static_cast<float>((ranks * (ranks + 1) / 2) * (i % 251 + 1));
}

class RingAllReduceCase final : public PreparedCase {
 public:
  RingAllReduceCase(int ranks, std::int64_t elements) : ranks_(ranks), elements_(elements) {}

  int ranks() const override { return ranks_; }

  nlohmann::json params() const override {
    return {{"ranks", ranks_}, {"elements", elements_}, {"dtype", "float32"}};
  }

  // Every rank holds its data and the kernel's send and receive workspaces (a block per rank
  // each), all in this process on the threads backend.
  MemoryEstimate memory_estimate() const override {
    const double floats = static_cast<double>(elements_) + 2.0 * static_cast<double>(padded());
    return {floats * sizeof(float) * ranks_, "elements",
            std::to_string(ranks_) + " ranks x (data + send + receive workspaces) of float32"};
  }

  Outcome run(RunContext& ctx) override {
    Outcome outcome;
    if (ctx.backend() == "nccl") {
      outcome.status = Status::skip;
      outcome.message = "the ring all-reduce works on host memory: threads or mpi only";
      return outcome;
    }
    states_.clear();
    states_.resize(static_cast<std::size_t>(ranks_));
    // What each rank found, read from the lead rank (every rank of this process on threads).
    std::vector<std::int64_t> wrong(static_cast<std::size_t>(ranks_), 0);
    std::vector<std::string> first_wrong(static_cast<std::size_t>(ranks_));
    ctx.run_on_ranks(ranks_, [&](int rank, Communicator& comm) {
      RankState& state = states_[static_cast<std::size_t>(rank)];
      state.kernel = std::make_unique<ring::RingAllReduce>(count(), ranks_);
      state.data.resize(count());
      for (std::size_t i = 0; i < count(); ++i) state.data[i] = input(rank, i);
      state.kernel->run(comm, state.data.data());
      std::int64_t mine = 0;
      for (std::size_t i = 0; i < count(); ++i) {
        if (state.data[i] == expected_sum(ranks_, i)) continue;
        if (mine++ == 0) {
          first_wrong[static_cast<std::size_t>(rank)] =
              "rank " + std::to_string(rank) + ", element " + std::to_string(i) + ": " +
              std::to_string(state.data[i]) + ", expected " +
              std::to_string(expected_sum(ranks_, i));
        }
      }
      // Every rank learns the total, so that each holds the same verdict (mpi: one per process).
      comm.all_reduce(&mine, &wrong[static_cast<std::size_t>(rank)], 1, DType::i64,
                      meshgate::ReduceOp::sum);
    });
    const auto lead = static_cast<std::size_t>(ctx.lead_rank());
    outcome.metrics["wrong_elements"] = wrong[lead];
    outcome.metrics["bytes_per_rank"] = static_cast<std::int64_t>(count() * sizeof(float));
    outcome.plan = {"ring all-reduce: " + std::to_string(ranks_ - 1) + " reduce-scatter + " +
                    std::to_string(ranks_ - 1) + " all-gather steps"};
    if (wrong[lead] != 0) {
      outcome.status = Status::fail;
      const auto found = std::find_if(first_wrong.begin(), first_wrong.end(),
                                      [](const std::string& s) { return !s.empty(); });
      outcome.message = std::to_string(wrong[lead]) + " wrong element(s) over the ranks" +
                        (found != first_wrong.end() ? "; first: " + *found : std::string());
    }
    return outcome;
  }

  // `calls` all-reduces back to back on the data run() left (its values no longer matter),
  // timed on every rank; the slowest rank's seconds.
  double time_calls(RunContext& ctx, std::int64_t calls) override {
    std::vector<double> slowest(static_cast<std::size_t>(ranks_), 0.0);
    ctx.run_on_ranks(ranks_, [&](int rank, Communicator& comm) {
      RankState& state = states_.at(static_cast<std::size_t>(rank));
      comm.barrier();
      const double start = meshgate::runner::monotonic_seconds();
      for (std::int64_t i = 0; i < calls; ++i) state.kernel->run(comm, state.data.data());
      double seconds = meshgate::runner::monotonic_seconds() - start;
      comm.all_reduce(&seconds, &slowest[static_cast<std::size_t>(rank)], 1, DType::f64,
                      meshgate::ReduceOp::max);
    });
    return slowest[static_cast<std::size_t>(ctx.lead_rank())];
  }

  void release() override { states_.clear(); }

 private:
  struct RankState {
    std::unique_ptr<ring::RingAllReduce> kernel;
    std::vector<float> data;
  };

  std::size_t count() const { return static_cast<std::size_t>(elements_); }
  // A block per rank, each as large as the largest chunk.
  std::int64_t padded() const { return (elements_ + ranks_ - 1) / ranks_ * ranks_; }

  int ranks_;
  std::int64_t elements_;
  std::vector<RankState> states_;
};

// Reads the case's own keys; the runner has read the common ones (name, tags, perf, ...) and
// rejects keys nobody read. A value that cannot run is a ValueRejection (reject_value), which
// the runner judges against expect_error.
std::unique_ptr<PreparedCase> parse_ring_allreduce_case(CaseNode& node, bool /*expect_error*/) {
  const int ranks = node.optional<int>("ranks").value_or(2);
  if (ranks < 1 || ranks > kMaxRanks) {
    meshgate::runner::reject_value(node, "ranks", "must be 1 to " + std::to_string(kMaxRanks));
  }
  const auto elements = node.required<std::int64_t>("elements");
  if (elements < 1) meshgate::runner::reject_value(node, "elements", "must be at least 1");
  return std::make_unique<RingAllReduceCase>(ranks, elements);
}

}  // namespace

MESHGATE_REGISTER_KIND("ring_allreduce", &parse_ring_allreduce_case, {"ranks", "elements"});
