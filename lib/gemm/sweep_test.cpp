// The sweep's library part: shapes drawn without alignment and the same for the same seed,
// exact inputs whose closed form is the fp64 reference, and each failure class recognised from
// an output made wrong in its way.
#include "gemm/sweep.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "gemm/cpu_gemm.hpp"
#include "gemm/numeric.hpp"
#include "gemm/reference.hpp"

namespace meshgate::gemm {
namespace {

TEST(SweepDraw, SameSeedSameShapesAndEveryResidueModulo8) {
  const ShapeSpace space{ShapeMode::uniform, {1, 300}, {1, 300}, {1, 5000}};
  std::set<std::int64_t> residues;
  for (std::int64_t i = 0; i < 200; ++i) {
    const SweepShape a = draw_shape(space, 7, i), b = draw_shape(space, 7, i);
    EXPECT_EQ(a.m, b.m);
    EXPECT_EQ(a.k, b.k);
    EXPECT_GE(a.m, 1);
    EXPECT_LE(a.k, 5000);
    residues.insert(a.k % 8);
  }
  EXPECT_EQ(residues.size(), 8u);  // no rounding to multiples of 8
  EXPECT_NE(draw_shape(space, 7, 0).k, draw_shape(space, 8, 0).k);
}

TEST(SweepDraw, ExtremeShapesAreSkinnyAndReachDeepK) {
  const ShapeSpace space{ShapeMode::extreme, {1, 64}, {1, 64}, {1024, 400000}};
  std::int64_t deep = 0, shallow = 0;
  for (std::int64_t i = 0; i < 500; ++i) {
    const SweepShape s = draw_shape(space, 3, i);
    EXPECT_LE(s.m, 64);
    EXPECT_GE(s.k, 1024);
    EXPECT_LE(s.k, 400000);
    deep += s.k > 100000;
    shallow += s.k < 4096;
  }
  EXPECT_GT(deep, 50);     // log-uniform: every decade gets its share
  EXPECT_GT(shallow, 50);
}

GemmProblem problem(std::int64_t m, std::int64_t n, std::int64_t k, DType d, Epilogue e,
                    GemmLayout l = GemmLayout::nt) {
  GemmProblem p;
  p.m = m, p.n = n, p.k = k, p.dtype = d, p.epilogue = e, p.layout = l;
  return p;
}

TEST(SweepExactInputs, ClosedFormIsTheReferenceAndEveryImplementationHitsItExactly) {
  for (const DType d : {DType::f32, DType::f16, DType::bf16})
    for (const GemmLayout l : {GemmLayout::nt, GemmLayout::nn, GemmLayout::tn, GemmLayout::tt})
      for (const std::int64_t k : {1, 2, 3, 700, 3001}) {
        GemmProblem p = problem(5, 7, k, d, Epilogue::gelu_bias, l);
        p.bias_offset = 3, p.x_offset = 1, p.w_offset = 2;
        // Padded leading dimensions and a batch of two: the fill honours every stride.
        p.batch = 2;
        p.ldx = x_ld(p) + 2, p.ldw = w_ld(p) + 1;
        const ExactPattern e = exact_pattern(p);
        const GemmInputs in = make_exact_inputs(p, e);
        const std::vector<double> ref = reference(p, in);
        const std::vector<double> exact = exact_output(p, e);
        ASSERT_EQ(ref.size(), 2 * exact.size());
        for (std::size_t i = 0; i < ref.size(); ++i)
          ASSERT_EQ(ref[i], exact[i % exact.size()]) << k;
        // Rows differ (by r_i), and the largest value of any class stays exact.
        EXPECT_NE(exact[0], exact[p.n]);
        EXPECT_LE(e.sum + (kRowOffsets - 1) + 16, exact_integer_limit(d));
        for (const Impl impl : {Impl::cpu_epilogue, Impl::cpu_unfused, Impl::cpu_beta_bias}) {
          HostTensor y(d, y_elements(p));
          run_cpu(impl, p, in, y);
          const OutputVerdict v = classify_output(p, e, y);
          EXPECT_TRUE(v.ok && v.bad == 0) << to_string(impl) << " k=" << k << " " << v.detail;
        }
      }
}

TEST(SweepExactInputs, AnyDroppedTailLowersTheSumInEveryDtype) {
  for (const DType d : {DType::f32, DType::f16, DType::bf16})
    for (const std::int64_t k : {2, 5, 300, 38424}) {
      const GemmProblem p = problem(1, 1, k, d, Epilogue::none);
      const ExactPattern e = exact_pattern(p);
      const GemmInputs in = make_exact_inputs(p, e);
      double prefix = 0;
      for (std::int64_t kk = 0; kk + 1 < k; ++kk) {
        prefix += in.x.get(x_index(p, 0, kk));
        ASSERT_NE(round_to(d, prefix), e.sum) << k << " " << kk;
        ASSERT_EQ(round_to(d, prefix), prefix);  // every partial sum is exact in the dtype
      }
    }
}

// An output of `p` equal to the exact one with `change(j, value)` applied to every element.
template <class Change>
HostTensor altered(const GemmProblem& p, const ExactPattern& e, Change change) {
  HostTensor y(p.dtype, y_elements(p));
  const std::vector<double> exact = exact_output(p, e);
  for (std::int64_t r = 0; r < p.m; ++r)
    for (std::int64_t j = 0; j < p.n; ++j)
      y.set(y_index(p, r, j),
            static_cast<float>(change(j, exact[static_cast<std::size_t>(r * p.n + j)])));
  return y;
}

// The exact output of `p` with row `from`'s values stored in row `to` as well.
HostTensor row_copied(const GemmProblem& p, const ExactPattern& e, std::int64_t from,
                      std::int64_t to) {
  HostTensor y = altered(p, e, [](auto, double x) { return x; });
  for (std::int64_t j = 0; j < p.n; ++j) y.set(y_index(p, to, j), y.get(y_index(p, from, j)));
  return y;
}

TEST(SweepClassify, EachWayOfBeingWrongHasItsClass) {
  const GemmProblem p = problem(6, 9, 500, DType::bf16, Epilogue::relu_bias);
  const ExactPattern e = exact_pattern(p);
  OutputVerdict v = classify_output(p, e, altered(p, e, [](auto, double x) { return x - 24; }));
  EXPECT_EQ(v.failure, FailureClass::k_tail);
  EXPECT_EQ(v.offset, 24);
  v = classify_output(p, e, altered(p, e, [&](auto j, double x) { return x - e.bias[j]; }));
  EXPECT_EQ(v.failure, FailureClass::bias_missing);
  v = classify_output(p, e, altered(p, e, [&](auto j, double x) { return x + e.bias[j]; }));
  EXPECT_EQ(v.failure, FailureClass::bias_doubled);
  HostTensor y = altered(p, e, [](auto, double x) { return x; });
  y.set(y_index(p, 4, 2), std::nanf(""));
  v = classify_output(p, e, y);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.failure, FailureClass::unwritten);
  v = classify_output(p, e, altered(p, e, [](auto j, double x) { return x * (j ? 1.1 : 1.0); }));
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.failure, FailureClass::drift);
  v = classify_output(p, e, row_copied(p, e, 1, 4));
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.failure, FailureClass::misplaced);
  EXPECT_EQ(v.bad, p.n);
  v = classify_output(p, e, altered(p, e, [](auto, double x) { return x; }));
  EXPECT_TRUE(v.ok);
  EXPECT_EQ(v.bad, 0);
}

TEST(SweepClassify, RowsOneTileApartAreTold) {
  // Tiles span powers of two rows; offsets repeat every 7 rows, so a tile stored one tile off
  // still lands on rows of other values, even where the error is inside the tolerance.
  for (const DType d : {DType::f32, DType::bf16})
    for (const std::int64_t tile : {16, 64, 128}) {
      const GemmProblem p = problem(2 * tile, 3, 300, d, Epilogue::gelu_bias);
      const ExactPattern e = exact_pattern(p);
      const OutputVerdict v = classify_output(p, e, row_copied(p, e, 0, tile));
      EXPECT_FALSE(v.ok) << tile;
      EXPECT_EQ(v.failure, FailureClass::misplaced) << tile;
    }
  // One row: nothing to mix up, and a uniform shift stays a tail.
  const GemmProblem p = problem(1, 4, 300, DType::f32, Epilogue::none);
  const ExactPattern e = exact_pattern(p);
  EXPECT_EQ(classify_output(p, e, altered(p, e, [](auto, double x) { return x - 1; })).failure,
            FailureClass::k_tail);
}

TEST(SweepClassify, AShortSumIsATailEvenWhereRandomInputsWouldPassTolerance) {
  // The cuBLASLt 13.1.1 shape: 24 of 38424 terms lost is 6e-4 off, inside fp32's bound for
  // random inputs' comparisons but a whole number here.
  const GemmProblem p = problem(56, 70, 38424, DType::f32, Epilogue::bias);
  const ExactPattern e = exact_pattern(p);
  const OutputVerdict v =
      classify_output(p, e, altered(p, e, [](auto, double x) { return x - 24; }));
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.failure, FailureClass::k_tail);
  EXPECT_EQ(v.offset, 24);
}

}  // namespace
}  // namespace meshgate::gemm
