// The collective kind on meshgate's communicators: every group calls the collective on every
// size, each rank counts its wrong elements, every size is timed.

#include "kinds/collective/collective_case.hpp"
#include "timing.hpp"

namespace meshgate::runner::collective_kind {

Outcome CollectiveCase::run(RunContext& ctx) {
  const std::optional<PerfSpec> perf = ctx.perf();
  states_.clear();
  states_.resize(static_cast<std::size_t>(case_ranks));
  std::vector<std::vector<SizeResult>> per_rank(static_cast<std::size_t>(case_ranks));
  try {
    ctx.run_on_ranks(case_ranks, [&](int rank, comm::Communicator& case_comm) {
      per_rank[static_cast<std::size_t>(rank)] = run_rank(rank, case_comm, perf);
    });
  } catch (...) {
    release_states();
    throw;
  }
  const std::vector<SizeResult>& results = per_rank[static_cast<std::size_t>(ctx.lead_rank())];
  Outcome outcome = judge(results);
  if (outcome.status != Status::pass || !perf || expect_error) release_states();
  return outcome;
}

double CollectiveCase::time_calls(RunContext& ctx, std::int64_t calls) {
  std::vector<double> times(static_cast<std::size_t>(case_ranks), 0.0);
  run_guarded(ctx, [&](int rank, comm::Communicator& case_comm) {
    RankState& state = states_.at(static_cast<std::size_t>(rank));
    const std::int64_t bytes = *std::max_element(sizes.begin(), sizes.end());
    times[static_cast<std::size_t>(rank)] =
        timed_calls(case_comm, state, bytes, inplace.front(), group_rank_of(rank), calls);
  });
  return times[static_cast<std::size_t>(ctx.lead_rank())];
}

Values CollectiveCase::values_of(int group_index) const {
  return Values(seed ^ mix(static_cast<std::uint64_t>(group_index) + 1), dtype, reduce,
                group_size);
}

double CollectiveCase::modeled(std::int64_t bytes) const {
  return modeled_time(*mesh, dims, parse_collective_op(op->name), bytes);
}

CollectiveBuffers CollectiveCase::buffers(std::int64_t bytes) const {
  return op->buffers(bytes, element_size(), group_size);
}

std::pair<int, int> CollectiveCase::place_of(int rank) const {
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto it = std::find(groups[g].begin(), groups[g].end(), rank);
    if (it != groups[g].end())
      return {static_cast<int>(g), static_cast<int>(it - groups[g].begin())};
  }
  return {-1, -1};
}

std::string CollectiveCase::plan_line() const {
  std::string line = std::string(op->name) + "(" + std::string(comm::to_string(dtype));
  if (reduce) line += ", " + std::string(to_string(*reduce));
  if (op->has_root) line += ", root=" + std::to_string(root);
  return line + ") on " + std::to_string(groups.size()) + " group(s) of " +
         std::to_string(group_size);
}

CollectiveCase::Call CollectiveCase::call_buffers(const RankState& state, std::int64_t bytes, bool in_place, int g) const {
  auto* send = static_cast<std::byte*>(state.send);
  auto* recv = static_cast<std::byte*>(state.recv);
  if (!in_place) return {send, recv};
  return op->in_place(send, recv, count_of(bytes) * element_size(), g);
}

void CollectiveCase::issue(comm::Communicator& group, const Call& call, std::int64_t bytes) const {
  op->call(group, call.send, call.recv, CallArgs{count_of(bytes), dtype, reduce, root});
}

double CollectiveCase::timed_calls(comm::Communicator& case_comm, RankState& state, std::int64_t bytes,
                   bool in_place, int g, std::int64_t calls) const {
  case_comm.barrier();
  double mine = 0;
  if (state.group) {
    const Call call = call_buffers(state, bytes, in_place, g);
    const double start = now_s();
    for (std::int64_t i = 0; i < calls; ++i) issue(*state.group, call, bytes);
    state.group->synchronize();
    mine = now_s() - start;
  }
  reduce_host(case_comm, &mine, 1, DType::f64, ReduceOp::max);
  return mine;
}

std::vector<SizeResult> CollectiveCase::run_rank(int rank, comm::Communicator& case_comm,
                                 const std::optional<PerfSpec>& perf) {
  RankState& state = states_[static_cast<std::size_t>(rank)];
  state.group = case_comm.split(groups);
  // Plain variables, not a structured binding: the lambdas below capture g, and clang 14 (the
  // fuzz preset) cannot capture a binding, which C++20 allows and gcc accepts.
  const std::pair<int, int> place = place_of(rank);
  const int group_index = place.first;
  const int g = place.second;
  const std::int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  const Codec codec{dtype, element_size()};
  const Values values = values_of(group_index);
  std::vector<std::byte> host;
  // Every rank of the case times batches of the same size.
  const AgreeOnCalls agree = [&](std::int64_t calls) {
    reduce_host(case_comm, &calls, 1, DType::i64, ReduceOp::max);
    return calls;
  };
  if (state.group) {
    // Separate send and receive buffers; in place, call_buffers points into one of them.
    state.send = state.group->allocate(std::max<std::size_t>(send_bytes(largest), 1));
    state.recv = state.group->allocate(std::max<std::size_t>(recv_bytes(largest), 1));
    host.resize(std::max(send_bytes(largest), recv_bytes(largest)));
  }

  std::vector<SizeResult> results;
  for (const bool in_place : inplace) {
    for (const std::int64_t bytes : sizes) {
      SizeResult r;
      r.bytes = bytes;
      r.inplace = in_place;
      if (state.group) prepare(state, host, codec, values, bytes, in_place, g);
      r.time_s = timed_calls(case_comm, state, bytes, in_place, g, 1);
      if (state.group) r.wrong = count_wrong(state, host, codec, values, bytes, in_place, g);
      if (perf) {
        const TimedSamples samples = measure_calls(
            [&](std::int64_t calls) {
              return timed_calls(case_comm, state, bytes, in_place, g, calls);
            },
            *perf, agree);
        r.time_s = median_of(samples.per_call_s);
        r.calls_per_sample = samples.calls_per_sample;
      }
      results.push_back(r);
    }
  }
  // Every rank counted its own output; the case's verdict is the sum over all of them.
  std::vector<std::int64_t> wrong;
  for (const SizeResult& r : results) wrong.push_back(r.wrong);
  reduce_host(case_comm, wrong.data(), wrong.size(), DType::i64, ReduceOp::sum);
  for (std::size_t i = 0; i < results.size(); ++i) results[i].wrong = wrong[i];
  return results;
}

void CollectiveCase::prepare(RankState& state, std::vector<std::byte>& host, const Codec& codec,
             const Values& values, std::int64_t bytes, bool in_place, int g) const {
  comm::Communicator& group = *state.group;
  const std::size_t es = element_size();
  const Call call = call_buffers(state, bytes, in_place, g);
  const std::size_t out_elements = recv_bytes(bytes) / es;
  for (std::size_t i = 0; i < out_elements; ++i) codec.put_sentinel(host.data(), i);
  group.copy_from_host(call.recv, host.data(), out_elements * es);
  const std::size_t in_elements = fill_send(host.data(), codec, values, bytes, g);
  group.copy_from_host(call.send, host.data(), in_elements * es);
}

std::size_t CollectiveCase::fill_send(std::byte* host, const Codec& codec, const Values& values,
                      std::int64_t bytes, int g) const {
  const std::size_t in_elements = send_bytes(bytes) / element_size();
  for (std::size_t i = 0; i < in_elements; ++i) {
    if (op->sends_input(g, root)) {
      codec.put(host, i, values.input(g, i));
    } else {
      codec.put_sentinel(host, i);
    }
  }
  return in_elements;
}

void CollectiveCase::release_states() {
  for (RankState& s : states_) s.release();
}

}  // namespace meshgate::runner::collective_kind
