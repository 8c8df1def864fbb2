// The executor on the threads backend: every rank plans for its own coordinate, runs the plan
// on its source shard, and the results are checked exactly against the global tensor (values,
// shapes, replicas bitwise equal) together with the collectives that were issued.
#include "redistribute/redistribute.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "comm/threads_world.hpp"
#include "core/error.hpp"
#include "core/half_float.hpp"
#include "redistribute/reference.hpp"

namespace meshgate {
namespace {

using comm::DType;

struct Outcome {
  std::vector<HostTensor> out;                  // per rank
  std::vector<std::vector<std::string>> comms;  // per rank, issued
  std::vector<std::vector<std::string>> planned;
  std::vector<std::int64_t> bytes;
};

DeviceMesh make_mesh(std::vector<std::int64_t> shape, std::vector<std::string> names,
                     const std::vector<std::vector<std::string>>& flatten = {}) {
  DeviceMesh m = DeviceMesh::create(shape, std::move(names));
  for (const auto& dims : flatten) m.slice(dims).flatten();
  return m;
}

// Runs src -> dst on every rank of a fresh threads world of the mesh's size. With
// `all_groups`, every rank first creates the groups of every coordinate's plan, which plans
// that differ between ranks need.
Outcome run(const DeviceMesh& mesh, const Shape& shape, DType dtype,
            const std::vector<Placement>& from, const std::vector<Placement>& to,
            PlanOptions options = {}, bool all_groups = false) {
  const auto n = static_cast<int>(mesh.size());
  const std::int64_t es = static_cast<std::int64_t>(comm::element_size(dtype));
  const DTensorSpec src = DTensorSpec::create(mesh, from, shape, es);
  const DTensorSpec dst = DTensorSpec::create(mesh, to, shape, es);
  const HostTensor global = make_global_tensor(shape, dtype, mesh.size());
  const std::vector<std::int64_t> mesh_shape = mesh.shape();
  comm::ThreadsWorld world(n);
  Outcome o;
  o.out.resize(static_cast<std::size_t>(n));
  o.comms.resize(static_cast<std::size_t>(n));
  o.planned.resize(static_cast<std::size_t>(n));
  o.bytes.resize(static_cast<std::size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(world.communicator(r));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      try {
        Redistributor ex(*comms[i], mesh);
        if (all_groups) ex.create_groups(groups_of_all_coordinates(src, dst, {&options, 1}));
        const Plan plan = plan_redistribute(src, dst, ex.coordinate(), options);
        HostTensor local =
            source_local_tensor(global, mesh_shape, from, ex.coordinate(), mesh.size());
        CommLog log;
        o.out[i] = ex.run(plan.steps, std::move(local), &log);
        o.comms[i] = log.strings();
        o.planned[i] = comm_strings(plan.steps, mesh);
        o.bytes[i] = log.bytes();
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return o;
}

// Every rank's result against the global tensor: Shard/Replicate dims exactly the target
// shard; Partial dims reduced over their group give the target shard; replicas bitwise equal.
void check(const DeviceMesh& mesh, const Shape& shape, DType dtype,
           const std::vector<Placement>& to, const Outcome& o) {
  const HostTensor global = make_global_tensor(shape, dtype, mesh.size());
  const std::vector<std::int64_t> ms = mesh.shape();
  const auto n = static_cast<int>(mesh.size());
  std::map<std::vector<std::int64_t>, std::vector<int>> partial_groups, replica_groups;
  for (int r = 0; r < n; ++r) {
    const std::vector<std::int64_t> c = *mesh.coordinate(r);
    const HostTensor want = target_shard(global, ms, to, c);
    const HostTensor& got = o.out[static_cast<std::size_t>(r)];
    ASSERT_EQ(got.shape, want.shape) << "rank " << r;
    std::vector<std::int64_t> outside_partial, outside_replicate;
    for (std::size_t m = 0; m < ms.size(); ++m) {
      outside_partial.push_back(to[m].is_partial() ? -1 : c[m]);
      outside_replicate.push_back(to[m].is_replicate() ? -1 : c[m]);
    }
    partial_groups[outside_partial].push_back(r);
    replica_groups[outside_replicate].push_back(r);
  }
  ReduceOp op = ReduceOp::sum;
  std::int64_t avg_size = 1;
  for (std::size_t m = 0; m < ms.size(); ++m) {
    if (!to[m].is_partial()) continue;
    if (to[m].reduce_op() != ReduceOp::avg) {
      op = to[m].reduce_op();
    } else {
      avg_size *= ms[m];
    }
  }
  for (const auto& [key, ranks] : partial_groups) {
    const HostTensor want = target_shard(global, ms, to, *mesh.coordinate(ranks.front()));
    for (std::int64_t i = 0; i < want.numel(); ++i) {
      double acc = o.out[static_cast<std::size_t>(ranks.front())].get(i);
      for (std::size_t k = 1; k < ranks.size(); ++k) {
        const double v = o.out[static_cast<std::size_t>(ranks[k])].get(i);
        switch (op) {
          case ReduceOp::max:
            acc = std::max(acc, v);
            break;
          case ReduceOp::min:
            acc = std::min(acc, v);
            break;
          case ReduceOp::product:
            acc *= v;
            break;
          default:
            acc += v;
            break;
        }
      }
      if (op == ReduceOp::sum && avg_size > 1) acc /= static_cast<double>(avg_size);
      ASSERT_EQ(acc, want.get(i)) << "group of rank " << ranks.front() << " element " << i;
    }
  }
  for (const auto& [key, ranks] : replica_groups) {
    for (int r : ranks) {
      EXPECT_EQ(o.out[static_cast<std::size_t>(r)], o.out[static_cast<std::size_t>(ranks[0])])
          << "replicas " << ranks[0] << " and " << r << " differ";
    }
  }
}

// Issued collectives equal the plan's comm strings on every rank, and `want` on rank 0.
void check_comms(const Outcome& o, const std::vector<std::string>& want) {
  EXPECT_EQ(o.comms[0], want);
  for (std::size_t r = 0; r < o.comms.size(); ++r) EXPECT_EQ(o.comms[r], o.planned[r]) << r;
}

Outcome run_checked(const DeviceMesh& mesh, const Shape& shape, DType dtype,
                    const std::vector<Placement>& from, const std::vector<Placement>& to,
                    PlanOptions options = {}, bool all_groups = false) {
  Outcome o = run(mesh, shape, dtype, from, to, options, all_groups);
  check(mesh, shape, dtype, to, o);
  for (std::size_t r = 0; r < o.comms.size(); ++r) EXPECT_EQ(o.comms[r], o.planned[r]) << r;
  return o;
}

const Placement S0 = Placement::shard(0);
const Placement S1 = Placement::shard(1);
const Placement R = Placement::replicate();
const Placement Psum = Placement::partial(ReduceOp::sum);
const Placement Pavg = Placement::partial(ReduceOp::avg);
const Placement Pmax = Placement::partial(ReduceOp::max);
const Placement Pmin = Placement::partial(ReduceOp::min);

TEST(HostTensor, CopyBoxAndNarrow) {
  HostTensor t = HostTensor::zeros({3, 4}, DType::i32);
  for (int i = 0; i < 12; ++i) t.set(i, i);
  const HostTensor col = narrow(t, 1, 1, 2);
  ASSERT_EQ(col.shape, (Shape{3, 2}));
  std::vector<double> got;
  for (int i = 0; i < 6; ++i) got.push_back(col.get(i));
  EXPECT_EQ(got, (std::vector<double>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(narrow(t, 0, 3, 0).numel(), 0);
  HostTensor dst = HostTensor::zeros({2, 2}, DType::i32);
  EXPECT_THROW(copy_box(t, Shape{2, 0}, dst, Shape{0, 0}, Shape{2, 2}), Error);
}

TEST(HostTensor, DivideRoundsOnceToTheDtype) {
  HostTensor f = HostTensor::zeros({2}, DType::bf16);
  f.set(0, 96);
  f.set(1, -1);
  divide(f, 3);
  EXPECT_EQ(f.get(0), 32);
  EXPECT_EQ(f.get(1), static_cast<double>(bf16_to_float(float_to_bf16(-1.0f / 3))));
  HostTensor i = HostTensor::zeros({1}, DType::i64);
  i.set(0, -7);
  divide(i, 2);
  EXPECT_EQ(i.get(0), -3);
  HostTensor big = HostTensor::zeros({1}, DType::i64);
  const std::int64_t large = (std::int64_t{1} << 60) + 6;
  std::memcpy(big.data.data(), &large, 8);
  divide(big, 3);
  std::int64_t got = 0;
  std::memcpy(&got, big.data.data(), 8);
  EXPECT_EQ(got, large / 3);
}

// Partial contributions differ along every Partial dim, avg dims included, and reduce exactly
// to the global tensor: an avg that kept the local value (or reduced by max) would be caught.
TEST(Reference, PartialContributionsDifferAndReduceExactly) {
  const std::vector<std::int64_t> ms = {2, 4};
  const HostTensor g = make_global_tensor({3, 5}, DType::f32, 8);
  const Placement Ps = Placement::partial(ReduceOp::sum);
  const Placement Pa = Placement::partial(ReduceOp::avg);
  const Placement Pmx = Placement::partial(ReduceOp::max);
  const Placement Pmn = Placement::partial(ReduceOp::min);
  for (const std::vector<Placement>& ps : std::vector<std::vector<Placement>>{
           {Pa, Pa}, {Ps, Pa}, {Pa, Ps}, {Ps, Ps}, {Pmx, Pmx}, {Pmn, Pmn}}) {
    SCOPED_TRACE(to_string(ps));
    std::vector<HostTensor> locals;
    for (std::int64_t a = 0; a < 2; ++a) {
      for (std::int64_t b = 0; b < 4; ++b) {
        const std::vector<std::int64_t> coord = {a, b};
        locals.push_back(source_local_tensor(g, ms, ps, coord, 8));
      }
    }
    std::set<std::vector<double>> distinct;
    for (const HostTensor& t : locals) {
      std::vector<double> v;
      for (std::int64_t i = 0; i < t.numel(); ++i) v.push_back(t.get(i));
      distinct.insert(v);
    }
    EXPECT_GT(distinct.size(), 1u);
    for (std::int64_t i = 0; i < g.numel(); ++i) {
      // Reduce dim B (inner) first, then dim A, each by its own op.
      double outer = 0;
      for (std::int64_t a = 0; a < 2; ++a) {
        double inner = ps[1].reduce_op() == ReduceOp::max   ? -1e30
                       : ps[1].reduce_op() == ReduceOp::min ? 1e30
                                                            : 0;
        for (std::int64_t b = 0; b < 4; ++b) {
          const double x = locals[static_cast<std::size_t>(a * 4 + b)].get(i);
          if (ps[1].reduce_op() == ReduceOp::max) inner = std::max(inner, x);
          else if (ps[1].reduce_op() == ReduceOp::min) inner = std::min(inner, x);
          else inner += x;
        }
        if (ps[1].reduce_op() == ReduceOp::avg) inner /= 4;
        if (ps[0].reduce_op() == ReduceOp::max) outer = a == 0 ? inner : std::max(outer, inner);
        else if (ps[0].reduce_op() == ReduceOp::min) outer = a == 0 ? inner : std::min(outer, inner);
        else outer += inner;
      }
      if (ps[0].reduce_op() == ReduceOp::avg) outer /= 2;
      EXPECT_EQ(outer, g.get(i)) << "element " << i;
    }
  }
}

// No rank's local extremes are the global ones by construction: an op that reads a Partial
// tensor's local values where it must reduce first (the row indices of torch.max over a
// Partial(max) tensor combined as values, pytorch/pytorch#175776) gives wrong answers. With one
// rank holding the value and the others the value shifted by a constant, every rank's row
// argmax was the global one, and such a bug passed.
TEST(Reference, PartialLocalExtremesLieElsewhereThanTheGlobalOnes) {
  const std::vector<std::int64_t> ms = {4};
  const HostTensor g = make_global_tensor({6, 8}, DType::f32, 4);
  const auto row_argmax = [](const HostTensor& t, std::int64_t row, bool smallest) {
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < 8; ++c) {
      const double x = t.get(row * 8 + c), b = t.get(row * 8 + best);
      if (smallest ? x < b : x > b) best = c;
    }
    return best;
  };
  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    SCOPED_TRACE(static_cast<int>(op));
    const std::vector<Placement> ps = {Placement::partial(op)};
    const bool smallest = op == ReduceOp::min;
    int rows_that_differ = 0;  // of 4 ranks x 6 rows
    for (std::int64_t r = 0; r < 4; ++r) {
      const std::vector<std::int64_t> coord = {r};
      const HostTensor local = source_local_tensor(g, ms, ps, coord, 4);
      for (std::int64_t row = 0; row < 6; ++row) {
        rows_that_differ += row_argmax(local, row, smallest) != row_argmax(g, row, smallest);
      }
    }
    EXPECT_GE(rows_that_differ, 6) << "of 24";
  }
}

TEST(CommLog, ContractStrings) {
  EXPECT_EQ((IssuedComm{StepKind::all_reduce, "A+C", ReduceOp::sum}.to_string()),
            "all_reduce(A+C, sum)");
  EXPECT_EQ((IssuedComm{StepKind::reduce_scatter, "B", ReduceOp::avg, -1, 0}.to_string()),
            "reduce_scatter(B, avg, dim=0)");
  EXPECT_EQ((IssuedComm{StepKind::all_gather, "B+C", ReduceOp::sum, 1, -1}.to_string()),
            "all_gather(B+C, dim=1)");
  EXPECT_EQ((IssuedComm{StepKind::all_to_all, "B", ReduceOp::sum, 0, 1}.to_string()),
            "all_to_all(B, dim=0->1)");
}

TEST(MeshGroups, RowMajorOverTheDimsOrderedByOutsideCoordinates) {
  const DeviceMesh m = make_mesh({2, 2, 2}, {"A", "B", "C"});
  EXPECT_EQ(mesh_groups(m, std::vector<std::int64_t>{0, 2}, 8),
            (std::vector<std::vector<int>>{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(mesh_groups(m, std::vector<std::int64_t>{1}, 8),
            (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(group_name(m, std::vector<std::int64_t>{2, 0}), "A+C");
}

// A layout that leaves half its rank map to a second row: each row is a mesh of its own, as
// DeviceMesh.mesh shows each rank its row, so a group never mixes the rows.
TEST(MeshGroups, GroupsStayInsideTheRowOfAMeshWithSeveralRows) {
  const DeviceMesh m = DeviceMesh::from_layout(parse_layout("(2,2):(4,1)"), {"A", "B"});
  EXPECT_EQ(mesh_groups(m, std::vector<std::int64_t>{1}, 8),
            (std::vector<std::vector<int>>{{0, 1}, {4, 5}, {2, 3}, {6, 7}}));
  EXPECT_EQ(mesh_groups(m, std::vector<std::int64_t>{0, 1}, 8),
            (std::vector<std::vector<int>>{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  // Before, the rows' equal coordinates were keyed together: one group of 4 for dim B.
  EXPECT_EQ(mesh_groups(m, std::vector<std::int64_t>{1}, 4),
            (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
}

// Every pair of placements on one mesh dim, even and uneven (13 over 4) and with empty shards
// (2 over 4, 3 over 6).
TEST(Redistribute, EverySingleDimPairOn1DMeshes) {
  const std::vector<Placement> all = {S0, S1, R, Psum, Pavg, Pmax, Pmin};
  for (std::int64_t size : {4, 6}) {
    for (const Shape& shape : {Shape{8, 12}, Shape{13, 5}, Shape{2, 3}}) {
      const DeviceMesh mesh = make_mesh({size}, {"A"});
      for (const Placement& a : all) {
        for (const Placement& b : all) {
          SCOPED_TRACE(to_string(a) + " -> " + to_string(b) + " on " + std::to_string(size) +
                       " ranks, shape " + std::to_string(shape[0]) + "x" +
                       std::to_string(shape[1]));
          const bool rejected =
              (a.is_shard() && b.is_partial()) || (a.is_partial() && b.is_partial() && a != b);
          if (rejected) {
            EXPECT_THROW(run(mesh, shape, DType::f32, {a}, {b}), Error);
            continue;
          }
          const Outcome o = run_checked(mesh, shape, DType::f32, {a}, {b});
          const bool collective =
              (a.is_partial() && !b.is_partial()) || (a.is_shard() && !b.is_partial() && a != b);
          EXPECT_EQ(o.comms[0].size(), collective ? 1u : 0u);
        }
      }
    }
  }
}

TEST(Redistribute, SingleDimCommStrings) {
  const DeviceMesh mesh = make_mesh({4}, {"tp"});
  check_comms(run_checked(mesh, {8, 6}, DType::f32, {Pavg}, {S1}),
              {"reduce_scatter(tp, avg, dim=1)"});
  check_comms(run_checked(mesh, {7, 6}, DType::f32, {S0}, {S1}), {"all_to_all(tp, dim=0->1)"});
  check_comms(run_checked(mesh, {7, 6}, DType::f32, {S1}, {R}), {"all_gather(tp, dim=1)"});
  check_comms(run_checked(mesh, {7, 6}, DType::f32, {Pmax}, {R}), {"all_reduce(tp, max)"});
  check_comms(run_checked(mesh, {7, 6}, DType::f32, {R}, {S0}), {});
  // R -> P(sum) divides locally by the group size; P(avg) keeps the value.
  const Outcome o = run_checked(mesh, {4, 4}, DType::f32, {R}, {Psum});
  const HostTensor global = make_global_tensor({4, 4}, DType::f32, 4);
  EXPECT_EQ(o.out[1].get(5), global.get(5) / 4);
  EXPECT_EQ(run_checked(mesh, {4, 4}, DType::f32, {R}, {Pavg}).out[2], global);
}

TEST(Redistribute, PublicApiRejectsReplicateToPartial) {
  const DeviceMesh mesh = make_mesh({2}, {"A"});
  PlanOptions opt;
  opt.api = Api::public_;
  EXPECT_THROW(run(mesh, {4}, DType::f32, {R}, {Psum}, opt), Error);
}

TEST(Redistribute, EveryDtype) {
  const DeviceMesh mesh = make_mesh({2, 3}, {"A", "B"});
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    SCOPED_TRACE(std::string(comm::to_string(dt)));
    run_checked(mesh, {7, 5}, dt, {Psum, Psum}, {S0, S1});
    run_checked(mesh, {7, 5}, dt, {S1, S0}, {R, S1});
    run_checked(mesh, {7, 5}, dt, {Pmax, Pmax}, {R, R});
  }
}

TEST(Redistribute, EmptyShards) {
  const DeviceMesh mesh = make_mesh({4}, {"A"});
  const Outcome o = run_checked(mesh, {2, 3}, DType::f32, {S0}, {R});
  EXPECT_EQ(o.out[3].shape, (Shape{2, 3}));
  const Outcome p = run_checked(mesh, {2, 3}, DType::f32, {Psum}, {S0});
  EXPECT_EQ(p.out[3].shape, (Shape{0, 3}));
  const DeviceMesh m2 = make_mesh({2, 3}, {"A", "B"});
  run_checked(m2, {1, 4}, DType::f32, {S0, S0}, {S1, R});
  run_checked(m2, {0, 4}, DType::f32, {S0, S1}, {R, R});
}

// Random pairs over 2-D and 3-D meshes with uneven shapes, merged and unmerged.
TEST(Redistribute, RandomPairsOnMultiDimMeshes) {
  const std::vector<Placement> all = {S0, S1, R, Psum, Pavg};
  std::mt19937 rng(7);
  struct Setup {
    std::vector<std::int64_t> shape;
    std::vector<std::string> names;
    std::vector<std::vector<std::string>> flatten;
  };
  const std::vector<Setup> setups = {
      {{2, 3}, {"A", "B"}, {{"A", "B"}}},
      {{2, 2, 2}, {"A", "B", "C"}, {{"A", "C"}, {"B", "C"}}},
      {{3, 1, 2}, {"A", "B", "C"}, {{"A", "B", "C"}}},
  };
  int ran = 0;
  for (const Setup& setup : setups) {
    const DeviceMesh mesh = make_mesh(setup.shape, setup.names, setup.flatten);
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<Placement> from, to;
      for (std::size_t m = 0; m < setup.shape.size(); ++m) {
        from.push_back(all[rng() % all.size()]);
        to.push_back(all[rng() % all.size()]);
      }
      const Shape shape = {static_cast<std::int64_t>(rng() % 7),
                           static_cast<std::int64_t>(1 + rng() % 6)};
      PlanOptions opt;
      opt.optimize = trial % 2 == 0;
      if (trial % 3 == 0) opt.planner = Planner::min_cost;
      SCOPED_TRACE(to_string(from) + " -> " + to_string(to));
      try {
        DTensorSpec a = DTensorSpec::create(mesh, from, shape);
        DTensorSpec b = DTensorSpec::create(mesh, to, shape);
        (void)plan_redistribute(a, b, {}, opt);
      } catch (const Error&) {
        continue;  // S -> P and P(x) -> P(y): rejected by the planner
      }
      run_checked(mesh, shape, DType::f32, from, to, opt);
      ++ran;
    }
  }
  EXPECT_GT(ran, 60);
}

// Merged and unmerged plans hold identical bits on every rank, over generated problems whose
// shards are mostly uneven: the evenness guards merge only runs whose flat collective places
// every element as the per-dim ones do, whatever the rank's coordinate (all_gathers exactly
// those; reduce_scatters only those whose outermost logical size also divides by the group).
TEST(Redistribute, MergedAndUnmergedPlansGiveIdenticalDataOnGeneratedProblems) {
  const std::vector<Placement> choices = {S0, S0, S0, S1, R, Psum, Pavg};
  std::mt19937 rng(20260303);
  const std::vector<std::vector<std::int64_t>> shapes = {{2, 2}, {2, 3}, {2, 1},   {4, 2},
                                                         {2, 2, 2}, {3, 1, 2}, {1, 2, 3}};
  const std::vector<std::string> names = {"A", "B", "C"};
  int ran = 0;
  int uneven_merges = 0;  // merged all_gather / reduce_scatter runs whose split is uneven
  int indivisible_reduce_scatters = 0;  // merged against the reference's divisibility rule
  for (int trial = 0; trial < 800; ++trial) {
    const std::vector<std::int64_t>& ms = shapes[rng() % shapes.size()];
    const std::vector<std::string> dims(names.begin(), names.begin() + ms.size());
    std::vector<std::vector<std::string>> flatten;
    for (std::uint32_t mask = 1; mask < (1u << ms.size()); ++mask) {
      std::vector<std::string> f;
      for (std::size_t m = 0; m < ms.size(); ++m) {
        if (mask >> m & 1) f.push_back(dims[m]);
      }
      if (f.size() >= 2 && rng() % 4 != 0) flatten.push_back(f);
    }
    DeviceMesh mesh = DeviceMesh::create(ms, dims);
    for (const auto& f : flatten) {
      try {
        mesh.slice(f).flatten();
      } catch (const Error&) {
        // the same layout as one registered already (size-1 dims coalesce away)
      }
    }
    std::vector<Placement> from, to;
    for (std::size_t m = 0; m < ms.size(); ++m) {
      from.push_back(choices[rng() % choices.size()]);
      to.push_back(choices[rng() % choices.size()]);
    }
    const Shape shape = {static_cast<std::int64_t>(rng() % 10),
                         static_cast<std::int64_t>(1 + rng() % 5)};
    SCOPED_TRACE(to_string(from) + " -> " + to_string(to) + " shape " +
                 std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + " on " +
                 to_string(mesh.layout()));
    std::vector<Plan> plans;
    try {
      const DTensorSpec a = DTensorSpec::create(mesh, from, shape);
      const DTensorSpec b = DTensorSpec::create(mesh, to, shape);
      for (std::int64_t r = 0; r < mesh.size(); ++r) {
        plans.push_back(plan_redistribute(a, b, *mesh.coordinate(r)));
      }
    } catch (const Error&) {
      continue;  // S -> P and P(x) -> P(y): rejected by the planner
    }
    for (const Plan& p : plans) {
      for (const TransformStep& s : p.steps) {
        if (!s.merged() || s.kind == StepKind::all_reduce) continue;
        // The size split over the group: what an all_gather rebuilds, what a reduce_scatter cuts.
        const std::int64_t extent =
            s.kind == StepKind::all_gather
                ? s.logical_shape[static_cast<std::size_t>(s.src_tensor_dim)]
                : s.input_shape[static_cast<std::size_t>(s.dst_tensor_dim)];
        if (extent % s.group_size != 0) ++uneven_merges;
        if (s.kind == StepKind::reduce_scatter &&
            s.logical_shape[static_cast<std::size_t>(s.dst_tensor_dim)] % s.group_size != 0) {
          ++indivisible_reduce_scatters;
        }
      }
    }
    PlanOptions off;
    off.optimize = false;
    const Outcome merged = run_checked(mesh, shape, DType::f32, from, to, {}, true);
    const Outcome unmerged = run_checked(mesh, shape, DType::f32, from, to, off, true);
    EXPECT_EQ(merged.out, unmerged.out);
    ++ran;
  }
  std::cout << "[ population ] " << ran << " problems, " << uneven_merges
            << " uneven all_gather / reduce_scatter merges\n";
  EXPECT_GT(ran, 400);
  EXPECT_GT(uneven_merges, 20);  // all_gathers whose uneven splits coincide
  EXPECT_EQ(indivisible_reduce_scatters, 0);
}

TEST(Redistribute, MergedAllReduceOnFlattenedGroupEqualsUnmerged) {
  const DeviceMesh mesh = make_mesh({2, 2, 2}, {"A", "B", "C"}, {{"A", "C"}});
  const Outcome merged = run_checked(mesh, {4, 6}, DType::f32, {Psum, R, Psum}, {R, R, R});
  check_comms(merged, {"all_reduce(A+C, sum)"});
  PlanOptions off;
  off.optimize = false;
  const Outcome plain = run_checked(mesh, {4, 6}, DType::f32, {Psum, R, Psum}, {R, R, R}, off);
  check_comms(plain, {"all_reduce(A, sum)", "all_reduce(C, sum)"});  // forward pass order
  EXPECT_EQ(merged.out, plain.out);  // integer data: both orders are exact
  EXPECT_LT(merged.bytes[0], plain.bytes[0]);
}

// min_cost may merge a sub-run that greedy leaves alone; the result must not change.
TEST(Redistribute, MinCostPlansGiveTheSameResult) {
  const DeviceMesh mesh = make_mesh({2, 2, 2}, {"A", "B", "C"}, {{"A", "B"}});
  PlanOptions opt;
  opt.planner = Planner::min_cost;
  const Outcome best = run_checked(mesh, {8, 4}, DType::f32, {Psum, Psum, Psum}, {R, R, R}, opt);
  const Outcome greedy = run_checked(mesh, {8, 4}, DType::f32, {Psum, Psum, Psum}, {R, R, R});
  EXPECT_LE(best.comms[0].size(), greedy.comms[0].size());
  EXPECT_EQ(best.out, greedy.out);
  run_checked(mesh, {9, 4}, DType::f32, {S0, S0, Psum}, {R, R, S1}, opt);
}

TEST(Redistribute, SumAvgMixIsOneSumThenDivision) {
  const DeviceMesh mesh = make_mesh({2, 4}, {"A", "B"}, {{"A", "B"}});
  const Outcome o = run_checked(mesh, {8, 4}, DType::f32, {Psum, Pavg}, {R, R});
  check_comms(o, {"all_reduce(A+B, sum)"});
  const Outcome rs = run_checked(mesh, {16, 4}, DType::bf16, {Pavg, Pavg}, {S0, S0});
  check_comms(rs, {"reduce_scatter(A+B, sum, dim=0)"});
  PlanOptions off;
  off.optimize = false;
  const Outcome plain = run_checked(mesh, {16, 4}, DType::bf16, {Pavg, Pavg}, {S0, S0}, off);
  check_comms(plain, {"reduce_scatter(A, avg, dim=0)", "reduce_scatter(B, avg, dim=0)"});
  EXPECT_EQ(rs.out, plain.out);
}

TEST(Redistribute, MergedAllGatherDescendingAndUnevenRefusal) {
  const DeviceMesh mesh = make_mesh({2, 2}, {"A", "B"}, {{"A", "B"}});
  check_comms(run_checked(mesh, {8, 3}, DType::f32, {S0, S0}, {R, R}), {"all_gather(A+B, dim=0)"});
  // #194457: (5,3) on 2x2 must not merge (the flat gather would move row 4).
  check_comms(run_checked(mesh, {5, 3}, DType::f32, {S0, S0}, {R, R}),
              {"all_gather(B, dim=0)", "all_gather(A, dim=0)"});
}

TEST(Redistribute, FsdpHsdpTpPatterns) {
  // FSDP: parameter all_gather and gradient reduce_scatter(avg) on dp_shard.
  const DeviceMesh fsdp = make_mesh({8}, {"dp_shard"});
  check_comms(run_checked(fsdp, {10, 4}, DType::bf16, {S0}, {R}), {"all_gather(dp_shard, dim=0)"});
  check_comms(run_checked(fsdp, {10, 4}, DType::f32, {Pavg}, {S0}),
              {"reduce_scatter(dp_shard, avg, dim=0)"});
  // HSDP: gradients reduce_scatter over dp_shard and all_reduce over dp_replicate.
  const DeviceMesh hsdp = make_mesh({2, 4}, {"dp_replicate", "dp_shard"});
  const Outcome h = run_checked(hsdp, {12, 4}, DType::f32, {Pavg, Pavg}, {R, S0});
  EXPECT_EQ(h.comms[0].size(), 2u);
  check_comms(run_checked(hsdp, {12, 4}, DType::f32, {R, S0}, {R, R}),
              {"all_gather(dp_shard, dim=0)"});
  // TP: column-parallel weight S(0) on tp under FSDP S(0) on dp, gathered for the optimizer;
  // row-parallel output Partial(sum) on tp reduced to Replicate.
  const DeviceMesh tp = make_mesh({2, 4}, {"dp", "tp"});
  run_checked(tp, {16, 6}, DType::f32, {S0, S0}, {R, R});
  check_comms(run_checked(tp, {3, 5}, DType::f32, {R, Psum}, {R, R}), {"all_reduce(tp, sum)"});
  check_comms(run_checked(tp, {8, 5}, DType::f32, {S0, Psum}, {S0, S1}),
              {"reduce_scatter(tp, sum, dim=1)"});
}

TEST(Redistribute, GroupsAreSplitOncePerSetOfDims) {
  const DeviceMesh mesh = make_mesh({2, 2}, {"A", "B"}, {{"A", "B"}});
  const DTensorSpec src = DTensorSpec::create(mesh, {Psum, Psum}, {4, 4});
  const DTensorSpec mid = DTensorSpec::create(mesh, {R, R}, {4, 4});
  const DTensorSpec sharded = DTensorSpec::create(mesh, {S0, R}, {4, 4});
  comm::ThreadsWorld world(4);
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  for (int r = 0; r < 4; ++r) comms.push_back(world.communicator(r));
  std::vector<std::size_t> created(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      Redistributor ex(*comms[static_cast<std::size_t>(r)], mesh);
      const HostTensor g = make_global_tensor({4, 4}, DType::f32, 4);
      for (int k = 0; k < 3; ++k) {
        HostTensor x = source_local_tensor(g, mesh.shape(), src.placements, ex.coordinate(), 4);
        x = ex.run(plan_redistribute(src, mid, ex.coordinate()).steps, std::move(x));
        x = ex.run(plan_redistribute(mid, sharded, ex.coordinate()).steps, std::move(x));
        x = ex.run(plan_redistribute(sharded, mid, ex.coordinate()).steps, std::move(x));
      }
      created[static_cast<std::size_t>(r)] = ex.groups_created();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(created, (std::vector<std::size_t>{2, 2, 2, 2}));  // {A,B} merged and {A}
}

// (S0,S0,S0) -> (S0,R,R) on 2x2x2 with B,C flattened: the B,C gathers see the rows A left on
// this rank, so with 9 rows the A=0 ranks (5 rows: 3,2,2,2 nested, 3,3,3,0 flat) gather twice
// and the A=1 ranks (4 rows) once on B+C; with 5 rows the other way round (3 rows: 1,1,1,0 both
// ways; 2 rows: 1,0,1,0 nested, 1,1,0,0 flat). Each B x C group shares its A, so the
// collectives pair up once every rank has split the groups of all coordinates.
TEST(Redistribute, PlansThatDifferBetweenRanksRunWithTheGroupsOfAllCoordinates) {
  const DeviceMesh mesh = make_mesh({2, 2, 2}, {"A", "B", "C"}, {{"B", "C"}});
  const std::vector<std::string> two = {"all_gather(C, dim=0)", "all_gather(B, dim=0)"};
  const std::vector<std::string> merged = {"all_gather(B+C, dim=0)"};
  for (const auto& [rows, a0, a1] : {std::tuple{9, two, merged}, std::tuple{5, merged, two}}) {
    SCOPED_TRACE(std::to_string(rows) + " rows");
    const Shape shape = {rows, 2};
    const DTensorSpec src = DTensorSpec::create(mesh, {S0, S0, S0}, shape);
    const DTensorSpec dst = DTensorSpec::create(mesh, {S0, R, R}, shape);
    const PlanOptions opt;
    EXPECT_EQ(groups_of_all_coordinates(src, dst, {&opt, 1}),
              (std::vector<std::vector<std::int64_t>>{{1}, {1, 2}, {2}}));
    const Outcome o = run_checked(mesh, shape, DType::f32, {S0, S0, S0}, {S0, R, R}, {}, true);
    for (int r = 0; r < 8; ++r) {
      EXPECT_EQ(o.comms[static_cast<std::size_t>(r)], r < 4 ? a0 : a1) << "rank " << r;
    }
    EXPECT_EQ(o.out[0].shape, (Shape{(rows + 1) / 2, 2}));
    EXPECT_EQ(o.out[7].shape, (Shape{rows / 2, 2}));
    // Rank 0 holds rows [0, ceil(rows/2)) of the global tensor.
    const HostTensor global = make_global_tensor(shape, DType::f32, 8);
    EXPECT_EQ(o.out[0], narrow(global, 0, 0, (rows + 1) / 2));
  }
}

// redistribute() plans, creates every coordinate's groups and runs, on a rank-dependent plan.
TEST(Redistribute, RedistributeCreatesTheGroupsOfEveryRank) {
  const DeviceMesh mesh = make_mesh({2, 2, 2}, {"A", "B", "C"}, {{"B", "C"}});
  const Shape shape = {9, 3};
  const DTensorSpec src = DTensorSpec::create(mesh, {S0, S0, S0}, shape);
  const DTensorSpec dst = DTensorSpec::create(mesh, {S0, R, R}, shape);
  const HostTensor global = make_global_tensor(shape, DType::f32, 8);
  comm::ThreadsWorld world(8);
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  for (int r = 0; r < 8; ++r) comms.push_back(world.communicator(r));
  std::vector<HostTensor> out(8), want(8);
  std::vector<std::size_t> created(8);
  std::vector<std::thread> threads;
  for (int r = 0; r < 8; ++r) {
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      Redistributor ex(*comms[i], mesh);
      HostTensor local =
          source_local_tensor(global, mesh.shape(), src.placements, ex.coordinate(), 8);
      out[i] = ex.redistribute(src, dst, std::move(local));
      want[i] = target_shard(global, mesh.shape(), dst.placements, ex.coordinate());
      created[i] = ex.groups_created();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(out, want);
  EXPECT_EQ(out[0].shape, (Shape{5, 3}));
  EXPECT_EQ(out[4].shape, (Shape{4, 3}));
  // B and C of the A=0 ranks and the merged B+C of the A=1 ranks, on every rank.
  EXPECT_EQ(created, std::vector<std::size_t>(8, 3));
}

// Once the groups were created up front, a step on another group is an error on that rank
// rather than a world-wide split that no other rank joins.
TEST(Redistribute, StepOnAGroupNotCreatedUpFrontIsAnError) {
  const DeviceMesh mesh = make_mesh({1}, {"A"});
  comm::ThreadsWorld world(1);
  auto c = world.communicator(0);
  Redistributor ex(*c, mesh);
  ex.create_groups({});
  TransformStep s;
  s.kind = StepKind::all_reduce;
  s.mesh_dims = {0};
  s.group_size = 2;
  s.input_shape = {4};
  try {
    ex.run(std::vector<TransformStep>{s}, HostTensor::zeros({4}, DType::f32));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not created up front"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ex.create_groups(std::vector<std::vector<std::int64_t>>{{1}}), Error);
}

// The mesh holds ranks 1..4 of a world of 5 (and, on the second mesh, the rows of a layout
// that does not cover its rank map, in a world of 8 with rank 8 left out): the ranks outside
// join the world-wide splits and nothing else, and every row redistributes on its own.
TEST(Redistribute, RanksOutsideTheMeshJoinOnlyTheSplits) {
  const DeviceMesh shifted =
      DeviceMesh::create(std::vector<std::int64_t>{2, 2}, {"A", "B"}, {1, 2, 3, 4});
  const DeviceMesh rows =
      DeviceMesh::from_layout(parse_layout("(2,2):(4,1)"), {"A", "B"}, {0, 1, 2, 3, 4, 5, 6, 7});
  for (const auto& [mesh, world_size] : {std::pair{shifted, 5}, std::pair{rows, 9}}) {
    SCOPED_TRACE(to_string(mesh.layout()) + " over " + std::to_string(world_size) + " ranks");
    const Shape shape = {5, 3};
    const DTensorSpec src = DTensorSpec::create(mesh, {S0, S0}, shape);
    const DTensorSpec dst = DTensorSpec::create(mesh, {R, R}, shape);
    const HostTensor global = make_global_tensor(shape, DType::f32, 4);
    comm::ThreadsWorld world(world_size);
    std::vector<std::unique_ptr<comm::Communicator>> comms;
    for (int r = 0; r < world_size; ++r) comms.push_back(world.communicator(r));
    std::vector<HostTensor> out(static_cast<std::size_t>(world_size));
    std::vector<std::string> errors(static_cast<std::size_t>(world_size));
    std::vector<std::thread> threads;
    const PlanOptions options;
    const auto groups = groups_of_all_coordinates(src, dst, {&options, 1});
    for (int r = 0; r < world_size; ++r) {
      threads.emplace_back([&, r] {
        const auto i = static_cast<std::size_t>(r);
        try {
          if (!mesh.coordinate(r)) {
            join_group_splits(*comms[i], mesh, groups);
            return;
          }
          Redistributor ex(*comms[i], mesh);
          ex.create_groups(groups);
          HostTensor local =
              source_local_tensor(global, mesh.shape(), src.placements, ex.coordinate(), 4);
          out[i] = ex.run(plan_redistribute(src, dst, ex.coordinate()).steps, std::move(local));
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world_size; ++r) {
      const auto i = static_cast<std::size_t>(r);
      EXPECT_EQ(errors[i], "") << "rank " << r;
      EXPECT_EQ(out[i], mesh.coordinate(r) ? global : HostTensor{}) << "rank " << r;
    }
  }
}

TEST(Redistribute, ARankInTheMeshCannotJoinAsAnOutsider) {
  const DeviceMesh mesh = make_mesh({1}, {"A"});
  comm::ThreadsWorld world(1);
  auto c = world.communicator(0);
  EXPECT_THROW(join_group_splits(*c, mesh, {}), Error);
}

TEST(Redistribute, ShapeMismatchIsAnError) {
  const DeviceMesh mesh = make_mesh({1}, {"A"});
  comm::ThreadsWorld world(1);
  auto c = world.communicator(0);
  Redistributor ex(*c, mesh);
  TransformStep s;
  s.kind = StepKind::all_reduce;
  s.mesh_dims = {0};
  s.group_size = 2;
  s.input_shape = {4};
  EXPECT_THROW(ex.run(std::vector<TransformStep>{s}, HostTensor::zeros({3}, DType::f32)), Error);
}

}  // namespace
}  // namespace meshgate
