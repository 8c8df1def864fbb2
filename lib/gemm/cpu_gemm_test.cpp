#include "gemm/cpu_gemm.hpp"

#include <cblas.h>  // blasint: the integer sgemm takes
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "gemm/numeric.hpp"
#include "gemm/reference.hpp"

namespace meshgate::gemm {
namespace {

// Runs `impl` into a NaN-filled Y and checks it against the reference and the tolerance.
Comparison check_impl(Impl impl, const GemmProblem& p, HostTensor* out = nullptr) {
  const GemmInputs in = make_inputs(p, 42);
  HostTensor y(p.dtype, y_elements(p));
  y.fill_nan();
  run_cpu(impl, p, in, y);
  const std::vector<std::int64_t> rows = rows_to_check(p);
  const Comparison c =
      compare_to_reference(p, rows, reference_rows(p, in, rows), y, tolerance_for(p));
  if (out != nullptr) *out = std::move(y);
  return c;
}

std::string label(Impl i, const GemmProblem& p) {
  return std::string(to_string(i)) + " " + std::string(to_string(p.dtype)) + " " +
         std::string(to_string(p.epilogue)) + " " + std::string(to_string(p.layout)) + " " +
         std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k);
}

using Combo = std::tuple<DType, Epilogue, GemmLayout>;
class CpuGemmEveryCombination : public ::testing::TestWithParam<Combo> {};

TEST_P(CpuGemmEveryCombination, EveryImplMatchesTheReferenceAndEachOther) {
  const auto [dtype, epilogue, layout] = GetParam();
  const GemmProblem p{.m = 37,
                      .n = 29,
                      .k = 45,
                      .dtype = dtype,
                      .epilogue = epilogue,
                      .layout = layout,
                      .alpha = 0.75f,
                      .bias_offset = 1};
  HostTensor fused;
  const Comparison fc = check_impl(Impl::cpu_epilogue, p, &fused);
  EXPECT_TRUE(fc.ok) << label(Impl::cpu_epilogue, p) << ": " << fc.describe();
  EXPECT_EQ(fc.rows_checked, 37);
  for (Impl impl : {Impl::cpu_reference, Impl::cpu_unfused, Impl::cpu_beta_bias}) {
    HostTensor y;
    const Comparison c = check_impl(impl, p, &y);
    EXPECT_TRUE(c.ok) << label(impl, p) << ": " << c.describe();
    EXPECT_GT(c.min_row_cosine, 0.9999) << label(impl, p);
    const Comparison pair = compare_outputs(p, fused, y, tolerance_for(dtype, p.k));
    EXPECT_TRUE(pair.ok) << label(impl, p) << " vs cpu_epilogue: " << pair.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypesEpiloguesLayouts, CpuGemmEveryCombination,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f16, DType::bf16),
                                            ::testing::Values(Epilogue::none, Epilogue::bias,
                                                              Epilogue::relu_bias,
                                                              Epilogue::gelu_bias),
                                            ::testing::Values(GemmLayout::nt, GemmLayout::nn,
                                                              GemmLayout::tn, GemmLayout::tt)),
                         [](const ::testing::TestParamInfo<Combo>& param) {
                           return std::string(to_string(std::get<0>(param.param))) + "_" +
                                  std::string(to_string(std::get<1>(param.param))) + "_" +
                                  std::string(to_string(std::get<2>(param.param)));
                         });

TEST(CpuGemmEdges, PathologicalShapes) {
  const GemmProblem shapes[] = {
      {.m = 1, .n = 4, .k = 768, .dtype = DType::f32},  // M = 1 (dfyz bug shape)
      {.m = 1, .n = 1, .k = 1, .dtype = DType::bf16, .epilogue = Epilogue::gelu_bias},
      {.m = 17, .n = 1, .k = 9, .dtype = DType::f16, .layout = GemmLayout::tt},
      {.m = 3, .n = 5, .k = 0, .dtype = DType::bf16, .epilogue = Epilogue::relu_bias},  // K = 0
      {.m = 300,
       .n = 1024,
       .k = 16,
       .dtype = DType::f16,
       .epilogue = Epilogue::relu_bias},  // several blocks
      {.m = 2, .n = 10, .k = 4099, .dtype = DType::f16, .layout = GemmLayout::tn},  // odd deep K
      {.m = 4, .n = 3, .k = 20000, .dtype = DType::f32, .alpha = -0.5f},            // deep K
      {.m = 50, .n = 7, .k = 13, .dtype = DType::bf16, .bias_offset = 3},  // misaligned bias
  };
  for (const GemmProblem& p : shapes)
    for (Impl impl : impls_for(Device::cpu)) {
      const Comparison c = check_impl(impl, p);
      EXPECT_TRUE(c.ok) << label(impl, p) << ": " << c.describe();
      EXPECT_EQ(c.rows_checked, p.m) << label(impl, p);
    }
}

TEST(CpuGemmEdges, EmptyOutputsAndKZeroBroadcastTheBias) {
  for (Impl impl : impls_for(Device::cpu)) {
    for (const GemmProblem& p :
         {GemmProblem{.m = 0, .n = 17, .k = 17}, GemmProblem{.m = 17, .n = 0, .k = 17},
          GemmProblem{.m = 0, .n = 0, .k = 0}}) {
      HostTensor y(p.dtype, 0);
      EXPECT_NO_THROW(run_cpu(impl, p, make_inputs(p), y)) << label(impl, p);
    }
    // No elements, however many rows or batches: nothing to do, done at once (the loops over
    // 2^40 empty batches once ran for hours).
    const GemmProblem empty_batches{.m = 1, .n = 0, .k = 0, .batch = std::int64_t{1} << 40};
    HostTensor none(DType::f32, 0);
    const GemmInputs no_inputs = make_inputs(empty_batches);
    run_cpu(impl, empty_batches, no_inputs, none);
    EXPECT_EQ(fingerprint(empty_batches, none), fingerprint(GemmProblem{.n = 0}, none));
    EXPECT_EQ(ulp_summary(empty_batches, none, none).compared, 0);
    EXPECT_EQ(compare_outputs(empty_batches, none, none, tolerance_for(empty_batches)).rows_checked,
              0);
    const GemmProblem p{.m = 17, .n = 3, .k = 0, .epilogue = Epilogue::bias};
    const GemmInputs in = make_inputs(p);
    HostTensor y(DType::f32, 51);
    y.fill_nan();
    run_cpu(impl, p, in, y);
    for (int i = 0; i < 17; ++i)
      for (int j = 0; j < 3; ++j) ASSERT_EQ(y.get(i * 3 + j), in.bias.get(j)) << label(impl, p);
  }
}

TEST(CpuGemmEdges, RoundingDiffersBetweenFusedAndUnfused) {
  // The unfused path rounds the product to bf16 before adding the bias, the fused one does not:
  // with these values the two differ in the last bit, which proves the passes are separate.
  const GemmProblem p{.m = 1, .n = 1, .k = 1, .dtype = DType::bf16, .epilogue = Epilogue::bias};
  GemmInputs in{HostTensor(DType::bf16, 1), HostTensor(DType::bf16, 1), HostTensor(DType::bf16, 1)};
  in.x.set(0, 1.0f + 1.0f / 128);  // 1 + 2^-7
  in.w.set(0, 1.0f + 1.0f / 128);  // product 1 + 2^-6 + 2^-14 rounds to 1 + 2^-6 in bf16
  in.bias.set(0, 1.0f / 256);      // bf16(product) + bias is a tie, the exact sum is not
  HostTensor fused(DType::bf16, 1), unfused(DType::bf16, 1);
  run_cpu(Impl::cpu_epilogue, p, in, fused);
  run_cpu(Impl::cpu_unfused, p, in, unfused);
  const double exact = reference(p, in)[0];
  EXPECT_EQ(fused.get(0), static_cast<float>(round_to(DType::bf16, exact)));
  EXPECT_NE(fused.get(0), unfused.get(0));
}

TEST(CpuGemmEdges, RejectsCudaImplsAndWrongOutputs) {
  const GemmProblem p{.m = 2, .n = 2, .k = 2};
  const GemmInputs in = make_inputs(p);
  HostTensor y(DType::f32, 4);
  try {
    run_cpu(Impl::lt_epilogue, p, in, y);
    FAIL() << "lt_epilogue ran on the CPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs on CUDA"), std::string::npos) << e.what();
  }
  HostTensor small(DType::f32, 3);
  EXPECT_THROW(run_cpu(Impl::cpu_epilogue, p, in, small), Error);
  HostTensor half(DType::f16, 4);
  EXPECT_THROW(run_cpu(Impl::cpu_unfused, p, in, half), Error);
}

// sgemm takes 32-bit ints: a leading dimension of 2^31 once reached it truncated, OpenBLAS
// refused the call ("parameter number 8 had an illegal value") and the untouched output was
// reported as a wrong answer of the implementation.
TEST(CpuGemmEdges, RefusesSizesThatSgemmCannotTake) {
  if (sizeof(blasint) > 4) GTEST_SKIP() << "OpenBLAS built with 64-bit ints";
  const GemmProblem p{.m = 1, .n = 1, .k = 4, .ldw = std::int64_t{1} << 31};
  const std::vector<BlasArgument> args = cpu_blas_arguments(p);
  ASSERT_EQ(args.size(), 5u);
  EXPECT_EQ(args[4].field, "ldw");
  EXPECT_EQ(args[4].value, std::int64_t{1} << 31);
  EXPECT_EQ(args[3].field, "ldx");
  EXPECT_EQ(args[3].value, 4);  // packed X [M,K]: its row length
  EXPECT_NO_THROW(check_fits_cpu_blas(args[3]));
  try {
    check_fits_cpu_blas(args[4]);
    FAIL() << "ldw 2^31 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemm ldw = 2147483648 does not fit the BLAS library's "
                                         "32-bit int (at most 2147483647)"),
              std::string::npos)
        << e.what();
  }
  // run_cpu refuses before it looks at the tensors, so no 8 GiB W is needed here.
  HostTensor y(DType::f32, 1);
  for (Impl impl : {Impl::cpu_epilogue, Impl::cpu_unfused, Impl::cpu_beta_bias}) {
    try {
      run_cpu(impl, p, GemmInputs{}, y);
      FAIL() << to_string(impl) << " accepted ldw 2^31";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("gemm ldw = 2147483648"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(uses_cpu_blas(Impl::cpu_reference));
  EXPECT_TRUE(uses_cpu_blas(Impl::cpu_epilogue));
  EXPECT_FALSE(uses_cpu_blas(Impl::lt_epilogue));
}

TEST(CpuGemmSchema, PaddedLeadingDimensionsOffsetsAndBatchesEveryLayout) {
  for (GemmLayout layout : {GemmLayout::nt, GemmLayout::nn, GemmLayout::tn, GemmLayout::tt})
    for (DType dtype : {DType::f32, DType::bf16}) {
      const bool xt = layout == GemmLayout::tn || layout == GemmLayout::tt;
      const bool wt = layout == GemmLayout::nt || layout == GemmLayout::tt;
      const GemmProblem p{.m = 13,
                          .n = 11,
                          .k = 9,
                          .dtype = dtype,
                          .epilogue = Epilogue::gelu_bias,
                          .layout = layout,
                          .ldx = (xt ? 13 : 9) + 5,
                          .ldw = (wt ? 9 : 11) + 3,
                          .ldy = 16,
                          .x_offset = 1,
                          .w_offset = 3,
                          .batch = 3};
      for (Impl impl : impls_for(Device::cpu)) {
        HostTensor y;
        const Comparison c = check_impl(impl, p, &y);
        EXPECT_TRUE(c.ok) << label(impl, p) << ": " << c.describe();
        EXPECT_EQ(c.rows_checked, 39) << label(impl, p);
        // The padding of Y is not part of the output: it keeps the NaN it was filled with.
        for (std::int64_t r = 0; r < total_rows(p); ++r)
          for (std::int64_t j = p.n; j < y_ld(p); ++j)
            ASSERT_TRUE(std::isnan(y.get(r * y_ld(p) + j))) << label(impl, p) << " row " << r;
      }
    }
}

TEST(CpuGemmSchema, BatchesAreIndependentProblems) {
  // GEMM b of a batch equals the single GEMM on batch b's slices of X and W.
  const GemmProblem p{.m = 5, .n = 7, .k = 6, .dtype = DType::f32, .batch = 4};
  const GemmInputs in = make_inputs(p, 9);
  HostTensor y(p.dtype, y_elements(p));
  run_cpu(Impl::cpu_epilogue, p, in, y);
  GemmProblem single = p;
  single.batch = 1;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    GemmInputs one = make_inputs(single, 9);
    for (std::int64_t i = 0; i < p.m; ++i)
      for (std::int64_t kk = 0; kk < p.k; ++kk)
        one.x.set(x_index(single, i, kk), in.x.get(x_index(p, i, kk, b)));
    for (std::int64_t kk = 0; kk < p.k; ++kk)
      for (std::int64_t j = 0; j < p.n; ++j)
        one.w.set(w_index(single, kk, j), in.w.get(w_index(p, kk, j, b)));
    HostTensor expected(p.dtype, p.m * p.n);
    run_cpu(Impl::cpu_epilogue, single, one, expected);
    for (std::int64_t i = 0; i < p.m; ++i)
      for (std::int64_t j = 0; j < p.n; ++j)
        ASSERT_EQ(y.get(y_index(p, b * p.m + i, j)), expected.get(i * p.n + j)) << "batch " << b;
  }
}

TEST(CpuGemmSchema, Tf32RoundsTheInputsWithinItsOwnTolerance) {
  GemmProblem p{.m = 32, .n = 32, .k = 512, .dtype = DType::f32, .epilogue = Epilogue::bias};
  HostTensor exact, tf32;
  EXPECT_TRUE(check_impl(Impl::cpu_epilogue, p, &exact).ok);
  p.tf32 = true;
  const Comparison c = check_impl(Impl::cpu_epilogue, p, &tf32);
  EXPECT_TRUE(c.ok) << c.describe();
  // TF32 is visibly coarser than fp32: outside fp32's bound, and every output changed.
  EXPECT_GT(c.max_abs_err, tolerance_for(DType::f32, p.k).atol) << c.describe();
  EXPECT_NE(fingerprint(p, exact), fingerprint(p, tf32));
  EXPECT_THROW(validate(GemmProblem{.m = 1, .n = 1, .k = 1, .dtype = DType::bf16, .tf32 = true}),
               Error);
}

// At small K a TF32 output is as far from the fp64 reference as at K = 1024 (each product is
// O(1/sqrt(K)) with TF32's relative error): a bound shrinking with sqrt(K) once failed every
// correct implementation at K <= 8 (K <= 16 on 512 x 512).
TEST(CpuGemmSchema, Tf32AtSmallKStaysWithinItsTolerance) {
  EXPECT_DOUBLE_EQ(tolerance_for(GemmProblem{.k = 1, .tf32 = true}).atol, 5e-3);
  EXPECT_DOUBLE_EQ(tolerance_for(GemmProblem{.k = 1024, .tf32 = true}).atol, 5e-3);
  EXPECT_DOUBLE_EQ(tolerance_for(GemmProblem{.k = 4096, .tf32 = true}).rtol, 1e-2);
  for (const std::int64_t k : {1, 2, 4, 8, 16}) {
    const std::int64_t size = k == 16 ? 512 : 64;
    const GemmProblem p{.m = size, .n = size, .k = k, .epilogue = Epilogue::bias, .tf32 = true};
    for (Impl impl : {Impl::cpu_epilogue, Impl::cpu_unfused, Impl::cpu_beta_bias}) {
      const Comparison c = check_impl(impl, p);
      EXPECT_TRUE(c.ok) << label(impl, p) << ": " << c.describe();
    }
  }
}

// PyTorch #180875 on the CPU: split-K whose partial sums are stored in bf16. Every implementation
// stays within the bf16 tolerance, so correctness alone cannot see it; the fingerprint and the ulp
// distance to the unsplit output do.
TEST(CpuGemmSplitK, Bf16PartialSumsPassTheToleranceButChangeTheFingerprint) {
  GemmProblem p{.m = 64, .n = 96, .k = 2048, .dtype = DType::bf16, .epilogue = Epilogue::bias};
  for (Impl impl : {Impl::cpu_epilogue, Impl::cpu_unfused, Impl::cpu_beta_bias}) {
    p.split_k = 0;
    p.split_k_partials = DType::f32;
    HostTensor pinned, again, drifted;
    ASSERT_TRUE(check_impl(impl, p, &pinned).ok) << label(impl, p);
    check_impl(impl, p, &again);
    EXPECT_EQ(fingerprint(p, pinned), fingerprint(p, again)) << "the CPU GEMM is deterministic";
    p.split_k = 8;
    p.split_k_partials = DType::bf16;
    const Comparison c = check_impl(impl, p, &drifted);
    EXPECT_TRUE(c.ok) << label(impl, p) << ": " << c.describe();
    EXPECT_NE(fingerprint(p, pinned), fingerprint(p, drifted)) << label(impl, p);
    const UlpSummary ulp = ulp_summary(p, pinned, drifted);
    EXPECT_GT(ulp.differing, ulp.compared / 10) << label(impl, p);
    EXPECT_GE(ulp.max, 1u);
  }
}

TEST(CpuGemmSplitK, Fp32PartialSumsStayWithinTheFp32Bound) {
  const GemmProblem p{.m = 16, .n = 16, .k = 1000, .dtype = DType::f32, .split_k = 7};
  for (Impl impl : {Impl::cpu_epilogue, Impl::cpu_unfused, Impl::cpu_beta_bias})
    EXPECT_TRUE(check_impl(impl, p).ok) << label(impl, p);
  // More slices than K: every slice still has at least one column or is empty, never negative.
  EXPECT_TRUE(check_impl(Impl::cpu_epilogue, GemmProblem{.m = 3, .n = 3, .k = 2, .split_k = 5}).ok);
}

}  // namespace
}  // namespace meshgate::gemm
