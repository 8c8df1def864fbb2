#include "gemm/reference.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "gemm/numeric.hpp"

namespace meshgate::gemm {
namespace {

HostTensor tensor(DType d, const std::vector<float>& values) {
  HostTensor t(d, static_cast<std::int64_t>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
  return t;
}

// op(X) = [[1,2],[3,4]], op(W) = [[1,0,1],[0,1,1]] (K x N), bias = [0.5,-1,2], stored as
// `layout` says.
GemmInputs small_inputs(const GemmProblem& p) {
  const float x[2][2] = {{1, 2}, {3, 4}};
  const float w[2][3] = {{1, 0, 1}, {0, 1, 1}};
  GemmInputs in{
      HostTensor(p.dtype, 4), HostTensor(p.dtype, 6),
      tensor(p.dtype, std::vector<float>(static_cast<std::size_t>(p.bias_offset), 99.0f))};
  std::vector<float> bias(static_cast<std::size_t>(p.bias_offset), 99.0f);
  bias.insert(bias.end(), {0.5f, -1.0f, 2.0f});
  in.bias = tensor(p.dtype, bias);
  for (int i = 0; i < 2; ++i)
    for (int kk = 0; kk < 2; ++kk) in.x.set(x_index(p, i, kk), x[i][kk]);
  for (int kk = 0; kk < 2; ++kk)
    for (int j = 0; j < 3; ++j) in.w.set(w_index(p, kk, j), w[kk][j]);
  return in;
}

TEST(GemmReference, HandComputedBiasAlphaEveryLayout) {
  for (GemmLayout l : {GemmLayout::nt, GemmLayout::nn, GemmLayout::tn, GemmLayout::tt}) {
    const GemmProblem p{
        .m = 2, .n = 3, .k = 2, .epilogue = Epilogue::bias, .layout = l, .alpha = 2.0f};
    // 2 * [[1,2,3],[3,4,7]] + [0.5,-1,2]
    EXPECT_EQ(reference(p, small_inputs(p)), (std::vector<double>{2.5, 3, 8, 6.5, 7, 16}))
        << to_string(l);
  }
}

TEST(GemmReference, BiasIsNotScaledByAlphaAndHonoursTheOffset) {
  const GemmProblem p{
      .m = 2, .n = 3, .k = 2, .epilogue = Epilogue::bias, .alpha = 0.5f, .bias_offset = 3};
  EXPECT_EQ(reference(p, small_inputs(p)), (std::vector<double>{1, 0, 3.5, 2, 1, 5.5}));
}

TEST(GemmReference, ReluGeluAndNoEpilogue) {
  GemmProblem p{.m = 2, .n = 3, .k = 2, .epilogue = Epilogue::relu_bias, .alpha = -1.0f};
  // -[[1,2,3],[3,4,7]] + bias = [[-0.5,-3,-1],[-2.5,-5,-5]]
  EXPECT_EQ(reference(p, small_inputs(p)), (std::vector<double>{0, 0, 0, 0, 0, 0}));
  p.alpha = 1.0f;
  EXPECT_EQ(reference(p, small_inputs(p)), (std::vector<double>{1.5, 1, 5, 3.5, 3, 9}));
  p.epilogue = Epilogue::none;
  EXPECT_EQ(reference(p, small_inputs(p)), (std::vector<double>{1, 2, 3, 3, 4, 7}));
  p.epilogue = Epilogue::gelu_bias;
  const std::vector<double> g = reference(p, small_inputs(p));
  EXPECT_DOUBLE_EQ(g[0], gelu_tanh(1.5));
  EXPECT_DOUBLE_EQ(g[1], gelu_tanh(1.0));
  EXPECT_NEAR(g[1], 0.8411919906082768, 1e-15);
}

TEST(GemmReference, UsesTheStoredRoundedValues) {
  GemmProblem p{.m = 1, .n = 1, .k = 1, .dtype = DType::bf16, .epilogue = Epilogue::none};
  GemmInputs in{tensor(DType::bf16, {1.0f / 3.0f}), tensor(DType::bf16, {3.0f}),
                tensor(DType::bf16, {0.0f})};
  // bf16(1/3) = 0.333984375, times 3 exactly in double.
  EXPECT_EQ(reference(p, in), std::vector<double>{1.001953125});
}

TEST(GemmReference, EmptyDimensions) {
  const GemmProblem k0{.m = 3, .n = 2, .k = 0, .epilogue = Epilogue::relu_bias};
  GemmInputs in = make_inputs(k0);
  const std::vector<double> r = reference(k0, in);
  ASSERT_EQ(r.size(), 6u);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      EXPECT_EQ(r[i * 2 + j], std::max(0.0, static_cast<double>(in.bias.get(j))));
  EXPECT_TRUE(reference(GemmProblem{.m = 0, .n = 17, .k = 17},
                        make_inputs(GemmProblem{.m = 0, .n = 17, .k = 17}))
                  .empty());
  EXPECT_TRUE(reference(GemmProblem{.m = 17, .n = 0, .k = 5},
                        make_inputs(GemmProblem{.m = 17, .n = 0, .k = 5}))
                  .empty());
}

TEST(GemmReference, RowsToCheckSamplesLargeProblems) {
  EXPECT_EQ(rows_to_check(GemmProblem{.m = 5, .n = 4, .k = 4}).size(), 5u);
  const std::vector<std::int64_t> rows =
      rows_to_check(GemmProblem{.m = 100000, .n = 1000, .k = 1000}, 1e8);
  ASSERT_EQ(rows.size(), 100u);
  EXPECT_EQ(rows.front(), 0);
  EXPECT_EQ(rows.back(), 99999);
  const GemmProblem p{.m = 4, .n = 3, .k = 5};
  const GemmInputs in = make_inputs(p);
  const std::vector<std::int64_t> some{1, 3};
  const std::vector<double> all = reference(p, in), part = reference_rows(p, in, some);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(part[j], all[3 + j]);
    EXPECT_EQ(part[3 + j], all[9 + j]);
  }
  const std::vector<std::int64_t> outside{4};
  EXPECT_THROW(reference_rows(p, in, outside), Error);
}

// Spreading the budget over more rows than int64 can multiply by it once gave negative rows;
// rows of N = 0 elements are never listed, however many there are.
TEST(GemmReference, RowsToCheckOfHugeAndEmptyOutputs) {
  const GemmProblem tall{.m = std::int64_t{1} << 60, .n = 1, .k = 0};
  const std::vector<std::int64_t> rows = rows_to_check(tall, 1000);
  ASSERT_EQ(rows.size(), 1000u);
  EXPECT_EQ(rows.front(), 0);
  EXPECT_EQ(rows.back(), tall.m - 1);
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  EXPECT_TRUE(std::adjacent_find(rows.begin(), rows.end()) == rows.end());
  EXPECT_TRUE(rows_to_check(GemmProblem{.m = std::int64_t{1} << 40, .n = 0, .k = 1}).empty());
  EXPECT_TRUE(
      rows_to_check(GemmProblem{.m = 1, .n = 0, .k = 0, .batch = std::int64_t{1} << 40}).empty());
}

TEST(GemmCompare, FlagsNanOffByToleranceAndDirection) {
  const GemmProblem p{.m = 2, .n = 3, .k = 2, .epilogue = Epilogue::bias};
  const GemmInputs in = small_inputs(p);
  const std::vector<std::int64_t> rows{0, 1};
  const std::vector<double> ref = reference(p, in);
  const Tolerance tol = tolerance_for(DType::f32, 2);
  HostTensor y(DType::f32, 6);
  run_reference(p, in, y);
  Comparison c = compare_to_reference(p, rows, ref, y, tol);
  EXPECT_TRUE(c.ok) << c.describe();
  EXPECT_EQ(c.max_abs_err, 0.0);
  EXPECT_DOUBLE_EQ(c.min_row_cosine, 1.0);

  HostTensor off = y;
  off.set(4, off.get(4) + 1e-3f);
  c = compare_to_reference(p, rows, ref, off, tol);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.bad_row, 1);
  EXPECT_EQ(c.bad_col, 1);
  EXPECT_NEAR(c.max_abs_err, 1e-3, 1e-6);
  EXPECT_NE(c.describe().find("first Y[1,1] = 3.001"), std::string::npos) << c.describe();

  HostTensor hole = y;
  hole.fill_nan();
  c = compare_to_reference(p, rows, ref, hole, tol);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.mismatches, 6);

  // Within a loose elementwise bound but pointing elsewhere: the row cosine catches it.
  Tolerance loose = tol;
  loose.rtol = 10, loose.max_mean_rel = 10;
  HostTensor flipped = y;
  for (int j = 0; j < 3; ++j) flipped.set(j, -flipped.get(j));
  c = compare_to_reference(p, rows, ref, flipped, loose);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.low_cosine_rows, 1);
  EXPECT_LT(c.min_row_cosine, 0.0);

  c = compare_outputs(p, y, off, tol);
  EXPECT_FALSE(c.ok);
  EXPECT_TRUE(compare_outputs(p, y, y, tol).ok);
}

// An output that overflows the dtype is right when the reference overflows the same way: even
// cpu_reference once failed against itself ("Y[0,1] = inf, expected inf"). NaN never matches,
// as torch.testing's default equal_nan=False has it.
TEST(GemmCompare, EqualInfinitiesMatchNanNeverDoes) {
  const GemmProblem p{.m = 1, .n = 6, .k = 1, .dtype = DType::f16, .epilogue = Epilogue::none};
  const std::vector<std::int64_t> rows{0};
  const double inf = HUGE_VAL;
  const std::vector<double> ref{inf, -inf, 1e6, 0.5, inf, NAN};
  // 1e6 rounds to +inf in float16, like a cast.
  HostTensor same = tensor(DType::f16, {INFINITY, -INFINITY, INFINITY, 0.5f, INFINITY, 0.0f});
  const Tolerance tol = tolerance_for(DType::f16, 1);
  same.set(5, NAN);
  Comparison c = compare_to_reference(p, rows, ref, same, tol);
  EXPECT_EQ(c.equal_infinities, 4);
  EXPECT_EQ(c.mismatches, 1);  // NaN against NaN
  EXPECT_EQ(c.nonfinite_mismatches, 1);
  EXPECT_EQ(c.bad_col, 5);
  EXPECT_TRUE(std::isfinite(c.max_abs_err));
  EXPECT_FALSE(c.ok);

  same.set(5, 0.0f);
  const std::vector<double> finite_last{inf, -inf, 1e6, 0.5, inf, 0.0};
  c = compare_to_reference(p, rows, finite_last, same, tol);
  EXPECT_TRUE(c.ok) << c.describe();
  EXPECT_EQ(c.max_abs_err, 0.0);
  EXPECT_NE(c.describe().find("4 equal infinities"), std::string::npos) << c.describe();

  HostTensor flipped = same;
  flipped.set(0, -INFINITY);  // the wrong infinity
  flipped.set(3, INFINITY);   // an infinity for a finite value
  c = compare_to_reference(p, rows, finite_last, flipped, tol);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.mismatches, 2);
  EXPECT_EQ(c.nonfinite_mismatches, 2);
  EXPECT_EQ(c.bad_col, 0);
  EXPECT_NE(c.describe().find("2 elements out of tolerance (2 not finite)"), std::string::npos)
      << c.describe();
  EXPECT_TRUE(compare_outputs(p, same, same, tol).ok);
}

TEST(GemmReference, ThreadedRowsEqualRowByRow) {
  // Large enough to spread over several threads; every row must equal its single-row answer.
  const GemmProblem p{.m = 96,
                      .n = 64,
                      .k = 700,
                      .dtype = DType::bf16,
                      .epilogue = Epilogue::gelu_bias,
                      .batch = 2};
  const GemmInputs in = make_inputs(p, 5);
  const std::vector<double> all = reference(p, in);
  ASSERT_EQ(all.size(), static_cast<std::size_t>(2 * 96 * 64));
  for (std::int64_t row : {0LL, 1LL, 95LL, 96LL, 150LL, 191LL}) {
    const std::int64_t one[] = {row};
    const std::vector<double> single = reference_rows(p, in, one);
    for (std::int64_t j = 0; j < p.n; ++j) ASSERT_EQ(all[row * p.n + j], single[j]) << row;
  }
}

}  // namespace
}  // namespace meshgate::gemm
