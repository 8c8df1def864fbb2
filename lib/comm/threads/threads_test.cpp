#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "comm/comm_test_support.hpp"
#include "comm/threads_world.hpp"

namespace meshgate::comm {
namespace {

using testing::CheckSpec;
using testing::Collective;
using testing::describe;
using testing::run_and_count_wrong;

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                             DType::i32, DType::i64, DType::i8,  DType::u8};
constexpr ReduceOp kReduceOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min,
                                   ReduceOp::product};
constexpr Collective kCollectives[] = {Collective::all_reduce, Collective::all_gather,
                                       Collective::reduce_scatter, Collective::all_to_all,
                                       Collective::broadcast};

// Runs body(comm) on `ranks` threads of a fresh world and returns each rank's result; an
// exception on any rank is rethrown here after every thread has finished.
template <typename Result>
std::vector<Result> on_ranks(int ranks, const std::function<Result(Communicator&)>& body) {
  ThreadsWorld world(ranks);
  std::vector<Result> results(static_cast<std::size_t>(ranks));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r, comm = world.communicator(r)] {
      try {
        results[r] = body(*comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return results;
}

// Every valid (collective, dtype, reduce) at the given counts and both placements; returns
// the failing descriptions (empty when all pass).
std::vector<std::string> check_matrix(Communicator& comm, const std::vector<std::size_t>& counts,
                                      std::uint64_t seed) {
  std::vector<std::string> failures;
  for (Collective c : kCollectives) {
    for (DType d : kDTypes) {
      for (ReduceOp op : kReduceOps) {
        if (!testing::is_reduction(c) && op != ReduceOp::sum) continue;
        if (op == ReduceOp::avg && !is_floating(d)) continue;
        for (std::size_t count : counts) {
          for (bool in_place : {false, true}) {
            CheckSpec spec{c, d, op, count, in_place, seed++, 0};
            spec.root = static_cast<int>(seed % static_cast<std::uint64_t>(comm.size()));
            const std::size_t wrong = run_and_count_wrong(comm, spec);
            if (wrong) {
              failures.push_back(describe(spec) + ": " + std::to_string(wrong) + " wrong");
            }
          }
        }
      }
    }
  }
  return failures;
}

class ThreadsRanks : public ::testing::TestWithParam<int> {};

TEST_P(ThreadsRanks, EveryCollectiveDtypeAndReduceIsExact) {
  const int ranks = GetParam();
  const auto failures = on_ranks<std::vector<std::string>>(ranks, [](Communicator& comm) {
    EXPECT_EQ(comm.backend(), "threads");
    return check_matrix(comm, {0, 1, 2, 37}, 11);
  });
  for (int r = 0; r < ranks; ++r) {
    EXPECT_THAT(failures[r], ::testing::IsEmpty()) << "rank " << r << " of " << ranks;
  }
}

INSTANTIATE_TEST_SUITE_P(OneToEight, ThreadsRanks, ::testing::Range(1, 9));

TEST(Threads, OddCountsSpanningChunksAndReductionBlocksAreExact) {
  for (int ranks : {3, 5, 7}) {
    const auto failures = on_ranks<std::vector<std::string>>(ranks, [](Communicator& comm) {
      std::vector<std::string> failed;
      std::uint64_t seed = 40;
      for (Collective c : kCollectives) {
        for (DType d : {DType::f32, DType::f16, DType::i8}) {
          for (bool in_place : {false, true}) {
            const ReduceOp op = d == DType::i8 ? ReduceOp::max : ReduceOp::sum;
            const CheckSpec spec{c, d, op, 4099, in_place, ++seed, comm.size() - 1};
            if (run_and_count_wrong(comm, spec)) failed.push_back(describe(spec));
          }
        }
      }
      return failed;
    });
    for (int r = 0; r < ranks; ++r) {
      EXPECT_THAT(failures[r], ::testing::IsEmpty()) << "rank " << r << " of " << ranks;
    }
  }
}

TEST(Threads, LargeCountsAreExactInAndOutOfPlace) {
  // Each rank computes every expected value itself (ranks x count input values), so the large
  // counts run at one world size; every world size runs the matrix above.
  for (int ranks : {4}) {
    const auto wrong = on_ranks<std::size_t>(ranks, [](Communicator& comm) {
      std::size_t total = 0;
      const std::size_t million = std::size_t{1} << 20;
      const std::size_t per_rank = million / static_cast<std::size_t>(comm.size()) + 1;
      // Both placements for the main path; one placement each for the rest (the matrix
      // above covers both placements of everything at small counts).
      for (bool in_place : {false, true}) {
        total += run_and_count_wrong(
            comm, {Collective::all_reduce, DType::f32, ReduceOp::sum, million + 1, in_place, 3});
      }
      total += run_and_count_wrong(
          comm, {Collective::all_reduce, DType::bf16, ReduceOp::avg, million, true, 4});
      total += run_and_count_wrong(
          comm, {Collective::all_gather, DType::i32, ReduceOp::sum, per_rank, true, 5});
      total += run_and_count_wrong(
          comm, {Collective::reduce_scatter, DType::f16, ReduceOp::max, per_rank, false, 6});
      total += run_and_count_wrong(
          comm, {Collective::all_to_all, DType::i8, ReduceOp::sum, per_rank, false, 7});
      total += run_and_count_wrong(
          comm, {Collective::broadcast, DType::f64, ReduceOp::sum, per_rank, true, 8, 2});
      return total;
    });
    for (int r = 0; r < ranks; ++r) EXPECT_EQ(wrong[r], 0u) << "rank " << r << " of " << ranks;
  }
}

TEST(Threads, AllReduceSumsTheRanks) {
  // A direct check independent of the verification helper: rank r contributes r + i.
  const auto results = on_ranks<std::vector<float>>(5, [](Communicator& comm) {
    std::vector<float> data(9);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(comm.rank() + i);
    comm.all_reduce(data.data(), data.data(), data.size(), DType::f32, ReduceOp::sum);
    return data;
  });
  for (const auto& data : results) {
    for (std::size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i], 10.0f + 5.0f * i);
  }
}

// A direct check of NCCL's out-of-place broadcast: the root's send reaches every recv, the
// root's own included, and no send buffer changes. Before, broadcast had one buffer, so an
// out-of-place call could not be made at all.
TEST(Threads, OutOfPlaceBroadcastWritesEveryRecvAndNoSend) {
  struct Buffers {
    std::vector<std::int32_t> send, recv;
  };
  for (int root = 0; root < 4; ++root) {
    SCOPED_TRACE("root " + std::to_string(root));
    const auto buffers = on_ranks<Buffers>(4, [root](Communicator& comm) {
      Buffers b{std::vector<std::int32_t>(7), std::vector<std::int32_t>(7, -1)};
      for (std::size_t i = 0; i < b.send.size(); ++i) {
        b.send[i] = 100 * comm.rank() + static_cast<std::int32_t>(i);
      }
      comm.broadcast(b.send.data(), b.recv.data(), b.send.size(), DType::i32, root);
      return b;
    });
    for (int r = 0; r < 4; ++r) {
      for (std::size_t i = 0; i < 7; ++i) {
        EXPECT_EQ(buffers[r].recv[i], 100 * root + static_cast<std::int32_t>(i))
            << "recv of rank " << r << " at " << i;
        EXPECT_EQ(buffers[r].send[i], 100 * r + static_cast<std::int32_t>(i))
            << "send of rank " << r << " at " << i;
      }
    }
  }
  // Send is read on the root only, so the other ranks need not pass one.
  const auto recv = on_ranks<std::vector<double>>(3, [](Communicator& comm) {
    const std::vector<double> send = {1.5, -2.0};
    std::vector<double> out(2, 0.0);
    comm.broadcast(comm.rank() == 1 ? send.data() : nullptr, out.data(), 2, DType::f64, 1);
    return out;
  });
  for (const auto& out : recv) EXPECT_EQ(out, (std::vector<double>{1.5, -2.0}));
}

TEST(Threads, SplitIntoRowsAndColumnsOfATwoByFourWorld) {
  const std::vector<std::vector<int>> rows = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  const std::vector<std::vector<int>> cols = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  struct Seen {
    int row_rank = -1, row_size = -1, col_rank = -1, col_size = -1;
    double row_sum = 0, col_sum = 0;
    std::size_t wrong = 0;
  };
  const auto seen = on_ranks<Seen>(8, [&](Communicator& comm) {
    Seen s;
    auto row = comm.split(rows);
    auto col = comm.split(cols);
    s.row_rank = row->rank();
    s.row_size = row->size();
    s.col_rank = col->rank();
    s.col_size = col->size();
    double mine = comm.rank();
    row->all_reduce(&mine, &s.row_sum, 1, DType::f64, ReduceOp::sum);
    col->all_reduce(&mine, &s.col_sum, 1, DType::f64, ReduceOp::sum);
    // The groups run their collectives concurrently; then the full matrix on each group.
    s.wrong += check_matrix(*row, {0, 1, 33}, 21).size();
    s.wrong += check_matrix(*col, {0, 1, 33}, 31).size();
    return s;
  });
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(seen[r].row_rank, r % 4);
    EXPECT_EQ(seen[r].row_size, 4);
    EXPECT_EQ(seen[r].col_rank, r / 4);
    EXPECT_EQ(seen[r].col_size, 2);
    EXPECT_EQ(seen[r].row_sum, r < 4 ? 0 + 1 + 2 + 3 : 4 + 5 + 6 + 7);
    EXPECT_EQ(seen[r].col_sum, (r % 4) + (r % 4 + 4));
    EXPECT_EQ(seen[r].wrong, 0u);
  }
}

TEST(Threads, SplitGivesNullToRanksInNoGroupAndNests) {
  const auto sizes = on_ranks<std::vector<int>>(6, [](Communicator& comm) {
    std::vector<int> out;
    // Ranks 1 and 4 are in no group; the first group lists its ranks out of order.
    auto sub = comm.split({{5, 0, 2}, {3}});
    if (!sub) return std::vector<int>{-1};
    out = {sub->size(), sub->rank()};
    auto nested = sub->size() == 3 ? sub->split({{1, 2}, {0}}) : sub->split({{0}});
    float value = 1.0f;
    float total = 0;
    nested->all_reduce(&value, &total, 1, DType::f32, ReduceOp::sum);
    out.push_back(nested->size());
    out.push_back(static_cast<int>(total));
    return out;
  });
  EXPECT_EQ(sizes[0], (std::vector<int>{3, 1, 2, 2}));
  EXPECT_EQ(sizes[1], (std::vector<int>{-1}));
  EXPECT_EQ(sizes[2], (std::vector<int>{3, 2, 2, 2}));
  EXPECT_EQ(sizes[3], (std::vector<int>{1, 0, 1, 1}));
  EXPECT_EQ(sizes[4], (std::vector<int>{-1}));
  EXPECT_EQ(sizes[5], (std::vector<int>{3, 0, 1, 1}));
}

// What each rank of a collective that its ranks call differently throws (empty if nothing).
std::vector<std::string> faults_of(int ranks, const std::function<void(Communicator& comm)>& body) {
  return on_ranks<std::string>(ranks, [&](Communicator& comm) -> std::string {
    try {
      body(comm);
    } catch (const CollectiveFault& e) {
      return e.what();
    }
    return "";
  });
}

TEST(Threads, RanksThatPassDifferentCountsAllThrowInsteadOfReadingPastABuffer) {
  // Rank 0 holds 2 elements and rank 1 one (an uneven shard): before the check, rank 1's
  // buffer was read past its end.
  const auto uneven = faults_of(2, [](Communicator& comm) {
    std::vector<float> data(2 - static_cast<std::size_t>(comm.rank()), 1.0f);
    comm.all_reduce(data.data(), data.data(), data.size(), DType::f32, ReduceOp::sum);
  });
  EXPECT_EQ(uneven[0],
            "RuntimeError: the 2 ranks of a group called a collective differently: rank 0 "
            "all_reduce(2 x float32, sum); rank 1 all_reduce(1 x float32, sum); every rank of a "
            "group makes the same call: collective, count, dtype, op, root");
  EXPECT_EQ(uneven[1], uneven[0]);

  // A rank with nothing to send still meets its peers: before, it returned at once and left
  // the others waiting for ever.
  for (Collective c : kCollectives) {
    const auto empty = faults_of(3, [c](Communicator& comm) {
      const std::size_t count = comm.rank() == 2 ? 0 : 4;
      std::vector<std::int32_t> send(12, 1), recv(12, 0);
      switch (c) {
        case Collective::all_reduce:
          comm.all_reduce(send.data(), recv.data(), count, DType::i32, ReduceOp::max);
          break;
        case Collective::all_gather:
          comm.all_gather(send.data(), recv.data(), count, DType::i32);
          break;
        case Collective::reduce_scatter:
          comm.reduce_scatter(send.data(), recv.data(), count, DType::i32, ReduceOp::sum);
          break;
        case Collective::all_to_all:
          comm.all_to_all(send.data(), recv.data(), count, DType::i32);
          break;
        case Collective::broadcast:
          comm.broadcast(recv.data(), recv.data(), count, DType::i32, 1);
          break;
      }
    });
    for (const std::string& what : empty) {
      EXPECT_THAT(what, ::testing::HasSubstr("ranks 0-1 " + std::string(to_string(c)) + "(4 x "))
          << to_string(c);
      EXPECT_THAT(what, ::testing::HasSubstr("; rank 2 " + std::string(to_string(c)) + "(0 x "));
    }
  }
}

// "ok|" when `call` returns, else the CollectiveFault it threw and "|".
std::string fault_of(const std::function<void()>& call) {
  try {
    call();
    return "ok|";
  } catch (const CollectiveFault& e) {
    return std::string(e.what()) + "|";
  }
}

TEST(Threads, RanksThatDisagreeOnDtypeOpRootOrCollectiveAllThrowAndTheGroupGoesOn) {
  const auto results = on_ranks<std::string>(4, [](Communicator& comm) {
    std::string seen;
    std::vector<double> buffer(8, 1.0);
    const int r = comm.rank();
    const auto attempt = [&](const std::function<void()>& call) { seen += fault_of(call); };
    attempt([&] {
      comm.all_reduce(buffer.data(), buffer.data(), 2, r == 3 ? DType::f32 : DType::f64,
                      ReduceOp::sum);
    });
    attempt([&] {
      comm.reduce_scatter(buffer.data(), buffer.data(), 1, DType::f64,
                          r == 0 ? ReduceOp::max : ReduceOp::min);
    });
    attempt([&] { comm.broadcast(buffer.data(), buffer.data(), 2, DType::f64, r % 2); });
    attempt([&] {
      if (r == 1) {
        comm.all_gather(buffer.data(), buffer.data(), 2, DType::f64);
      } else {
        comm.all_to_all(buffer.data(), buffer.data(), 2, DType::f64);
      }
    });
    // Every rank threw at the same point, so the group is still in step.
    attempt([&] { comm.all_reduce(buffer.data(), buffer.data(), 8, DType::f64, ReduceOp::sum); });
    return seen;
  });
  for (int r = 1; r < 4; ++r) EXPECT_EQ(results[r], results[0]) << "rank " << r;
  EXPECT_EQ(results[0],
            "RuntimeError: the 4 ranks of a group called a collective differently: ranks 0-2 "
            "all_reduce(2 x float64, sum); rank 3 all_reduce(2 x float32, sum); every rank "
            "of a group makes the same call: collective, count, dtype, op, root|"
            "RuntimeError: the 4 ranks of a group called a collective differently: "
            "rank 0 reduce_scatter(1 x float64, max); ranks 1-3 reduce_scatter(1 x float64, "
            "min); every rank of a group makes the same call: collective, count, dtype, op, root|"
            "RuntimeError: the 4 ranks of a group called a collective differently: ranks 0, "
            "2 broadcast(2 x float64, root=0); ranks 1, 3 broadcast(2 x float64, root=1); every "
            "rank of a group makes the same call: collective, count, dtype, op, root|"
            "RuntimeError: the 4 ranks of a group called a collective differently: ranks "
            "0, 2-3 all_to_all(2 x float64); rank 1 all_gather(2 x float64); every rank of a "
            "group makes the same call: collective, count, dtype, op, root|ok|");
}

// Before, split and barrier were not compared: ranks that split by different lists joined
// groups their leaders never made (two ranks at one position of a group, or a null group),
// and a rank in a barrier passed through a peer's split with it.
TEST(Threads, RanksThatSplitDifferentlyOrNotAtAllAllThrowAndTheGroupGoesOn) {
  const auto results = on_ranks<std::string>(4, [](Communicator& comm) {
    std::string seen;
    const int r = comm.rank();
    const auto attempt = [&](const std::function<void()>& call) { seen += fault_of(call); };
    attempt([&] {
      const std::vector<std::vector<int>> rows = {{0, 1}, {2, 3}};
      const std::vector<std::vector<int>> columns = {{0, 2}, {1, 3}};
      comm.split(r < 2 ? rows : columns);
    });
    attempt([&] {
      if (r == 3) {
        comm.split({{0, 1, 2, 3}});
      } else {
        comm.barrier();
      }
    });
    // Every rank threw at the same point, so the group is still in step.
    attempt([&] {
      std::unique_ptr<Communicator> pair = comm.split({{0, 1}, {2, 3}});
      std::int64_t value = comm.rank();
      pair->all_reduce(&value, &value, 1, DType::i64, ReduceOp::sum);
      if (value != (r < 2 ? 1 : 5)) throw CollectiveFault("wrong sum " + std::to_string(value));
      comm.barrier();
    });
    return seen;
  });
  for (int r = 1; r < 4; ++r) EXPECT_EQ(results[r], results[0]) << "rank " << r;
  EXPECT_EQ(results[0],
            "RuntimeError: the 4 ranks of a group called a collective differently: ranks 0-1 "
            "split([0, 1], [2, 3]); ranks 2-3 split([0, 2], [1, 3]); every rank of a group makes "
            "the same call: collective, count, dtype, op, root|"
            "RuntimeError: the 4 ranks of a group called a collective differently: ranks 0-2 "
            "barrier(); rank 3 split([0, 1, 2, 3]); every rank of a group makes the same call: "
            "collective, count, dtype, op, root|ok|");
}

TEST(Threads, AbortWakesRanksWaitingInAnyGroupAndFailsEveryLaterCall) {
  ThreadsWorld world(4);
  std::vector<std::string> caught(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r, comm = world.communicator(r)] {
      try {
        auto sub = comm->split({{0, 1, 2}, {3}});
        if (r == 3) {
          // The failing rank: its peers wait for it in the world and in their own group.
          world.abort("rank 3 failed: out of luck");
          comm->barrier();
        } else if (r == 2) {
          comm->barrier();  // waits for rank 3
        } else {
          float x = 1;
          sub->all_reduce(&x, &x, 1, DType::f32, ReduceOp::sum);  // waits for rank 2
        }
      } catch (const CollectiveFault& e) {
        caught[static_cast<std::size_t>(r)] = e.what();
        // The world stays aborted, and so does a group split from it afterwards.
        try {
          comm->split({{0, 1, 2, 3}});
          caught[static_cast<std::size_t>(r)] += "|split went through";
        } catch (const CollectiveFault&) {
          caught[static_cast<std::size_t>(r)] += "|later calls fail";
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(world.aborted());
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(caught[static_cast<std::size_t>(r)],
              "RuntimeError: the threads world was aborted: rank 3 failed: out of luck|later "
              "calls fail")
        << "rank " << r;
  }
}

TEST(Threads, AvgOfIntegersIsRejectedNamingBackendOpAndDtype) {
  for (DType d : {DType::i32, DType::i64, DType::i8, DType::u8}) {
    const auto messages = on_ranks<std::string>(2, [d](Communicator& comm) {
      std::string text;
      std::int64_t buffer[4] = {};
      try {
        comm.all_reduce(buffer, buffer, 1, d, ReduceOp::avg);
      } catch (const Error& e) {
        text += e.what();
      }
      text += "|";
      try {
        comm.reduce_scatter(buffer, buffer, 1, d, ReduceOp::avg);
      } catch (const Error& e) {
        text += e.what();
      }
      return text;
    });
    const std::string dtype(to_string(d));
    EXPECT_EQ(messages[0],
              "RuntimeError: backend 'threads' does not support all_reduce(avg) for " + dtype +
                  ": avg is defined for floating-point dtypes only; use sum and divide|"
                  "RuntimeError: backend 'threads' does not support reduce_scatter(avg) for " +
                  dtype + ": avg is defined for floating-point dtypes only; use sum and divide");
    EXPECT_EQ(messages[1], messages[0]);
  }
}

TEST(Threads, InvalidArgumentsAreValueErrors) {
  EXPECT_THROW(ThreadsWorld(0), Error);
  ThreadsWorld world(2);
  EXPECT_THROW(world.communicator(2), Error);
  auto first = world.communicator(0);
  try {
    world.communicator(0);
    FAIL() << "taking rank 0 twice must fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::value);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("already has its communicator"));
  }
  float x = 0;
  EXPECT_THROW(first->broadcast(&x, &x, 1, DType::f32, 2), Error);
  EXPECT_THROW(first->split({{0, 0}}), Error);
  EXPECT_THROW(first->split({{0, 5}}), Error);
  EXPECT_THROW(first->split({{}}), Error);
  EXPECT_THROW(first->all_reduce(nullptr, &x, 1, DType::f32, ReduceOp::sum), Error);
}

TEST(Names, DtypesAndOpsRoundTripAndUnknownNamesListTheKnownOnes) {
  for (DType d : kDTypes) EXPECT_EQ(parse_dtype(to_string(d)), d);
  for (ReduceOp op : kReduceOps) EXPECT_EQ(parse_reduce_op(to_string(op)), op);
  EXPECT_EQ(element_size(DType::bf16), 2u);
  EXPECT_EQ(element_size(DType::i64), 8u);
  EXPECT_EQ(element_size(DType::u8), 1u);
  try {
    parse_dtype("fp32");
    FAIL() << "fp32 is not a dtype name";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::value);
    EXPECT_STREQ(e.what(),
                 "ValueError: unknown dtype 'fp32': expected one of float32, float64, float16, "
                 "bfloat16, int32, int64, int8, uint8");
  }
  EXPECT_THROW(parse_reduce_op("mean"), Error);
}

}  // namespace
}  // namespace meshgate::comm
