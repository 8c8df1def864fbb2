#include "gemm/lt_plan.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "core/error.hpp"

namespace meshgate::gemm {
namespace {

TEST(LtPlan, EpilogueDecisionTable) {
  struct Row {
    Impl impl;
    Epilogue epilogue;
    LtEpilogue lt;
    bool bias_through_c;
    bool bias_act_kernel;
  };
  const Row table[] = {
      {Impl::lt_epilogue, Epilogue::none, LtEpilogue::default_, false, false},
      {Impl::lt_epilogue, Epilogue::bias, LtEpilogue::bias, false, false},
      {Impl::lt_epilogue, Epilogue::relu_bias, LtEpilogue::relu_bias, false, false},
      {Impl::lt_epilogue, Epilogue::gelu_bias, LtEpilogue::gelu_bias, false, false},
      {Impl::lt_beta_bias, Epilogue::none, LtEpilogue::default_, false, false},
      {Impl::lt_beta_bias, Epilogue::bias, LtEpilogue::default_, true, false},
      {Impl::lt_beta_bias, Epilogue::relu_bias, LtEpilogue::relu, true, false},
      {Impl::lt_beta_bias, Epilogue::gelu_bias, LtEpilogue::gelu, true, false},
      {Impl::unfused, Epilogue::none, LtEpilogue::default_, false, false},
      {Impl::unfused, Epilogue::bias, LtEpilogue::default_, false, true},
      {Impl::unfused, Epilogue::relu_bias, LtEpilogue::default_, false, true},
      {Impl::unfused, Epilogue::gelu_bias, LtEpilogue::default_, false, true},
      {Impl::cublas, Epilogue::none, LtEpilogue::default_, false, false},
      {Impl::cublas, Epilogue::bias, LtEpilogue::default_, false, true},
      {Impl::cublas, Epilogue::gelu_bias, LtEpilogue::default_, false, true},
  };
  for (const Row& r : table) {
    const LtPlan plan = plan_lt(r.impl, r.epilogue, 0x7f0000000100);
    SCOPED_TRACE(std::string(to_string(r.impl)) + " " + std::string(to_string(r.epilogue)));
    EXPECT_EQ(plan.executed, r.impl);
    EXPECT_EQ(plan.epilogue, r.lt);
    EXPECT_EQ(plan.bias_through_c, r.bias_through_c);
    EXPECT_EQ(plan.bias_act_kernel, r.bias_act_kernel);
    EXPECT_TRUE(plan.fallback_reason.empty());
  }
}

TEST(LtPlan, MisalignedBiasFallsBackToUnfused) {
  const LtPlan plan = plan_lt(Impl::lt_epilogue, Epilogue::gelu_bias, 0x7f0000000102);  // +1 fp16
  EXPECT_EQ(plan.executed, Impl::unfused);
  EXPECT_EQ(plan.epilogue, LtEpilogue::default_);
  EXPECT_TRUE(plan.bias_act_kernel);
  EXPECT_EQ(plan.fallback_reason,
            "bias pointer is 2-byte aligned; the bias epilogue needs 16 bytes");
  // 16-byte aligned offsets keep the epilogue; without a bias the pointer does not matter.
  EXPECT_EQ(plan_lt(Impl::lt_epilogue, Epilogue::bias, 0x7f0000000110).executed, Impl::lt_epilogue);
  EXPECT_EQ(plan_lt(Impl::lt_epilogue, Epilogue::none, 0x7f0000000102).executed, Impl::lt_epilogue);
  // Through C the bias has no alignment requirement of its own.
  EXPECT_EQ(plan_lt(Impl::lt_beta_bias, Epilogue::bias, 0x7f0000000102).executed,
            Impl::lt_beta_bias);
}

TEST(LtPlan, FallbackPlanAndCpuImpls) {
  const LtPlan plan = fallback_plan(Epilogue::relu_bias, "no algorithm");
  EXPECT_EQ(plan.executed, Impl::unfused);
  EXPECT_TRUE(plan.bias_act_kernel);
  EXPECT_EQ(plan.fallback_reason, "no algorithm");
  EXPECT_FALSE(fallback_plan(Epilogue::none, "x").bias_act_kernel);
  EXPECT_THROW(plan_lt(Impl::cpu_epilogue, Epilogue::bias, 0), Error);
}

// op_element after checking what cuBLAS itself requires of the description: ld >= rows and
// element (r, c) of op(mat) inside the op(mat) that the sizes describe.
std::int64_t checked_op_element(const LtMatrix& mat, bool transposed, std::int64_t r,
                                std::int64_t c, std::int64_t b) {
  EXPECT_GE(mat.ld, std::max<std::int64_t>(mat.rows, 1));
  const std::int64_t op_rows = transposed ? mat.cols : mat.rows;
  const std::int64_t op_cols = transposed ? mat.rows : mat.cols;
  EXPECT_TRUE(r >= 0 && r < op_rows && c >= 0 && c < op_cols) << r << "," << c;
  return op_element(mat, transposed, r, c, b);
}

// The descriptors that cuBLASLt and cublasGemmEx receive address exactly the elements the
// row-major problem means: D(j, i) is Y[i, j], op(A)(j, l) is op(W)(l, j), op(B)(l, i) is
// op(X)(i, l), for every layout, padded leading dimension, offset and batch. A swapped
// transpose, size or leading dimension fails here, without a GPU; so does a mistake in
// op_element, the index arithmetic of the CUDA fallback kernel.
TEST(LtOperands, AddressTheSameElementsAsTheRowMajorProblem) {
  int checked = 0;
  for (GemmLayout layout : {GemmLayout::nt, GemmLayout::nn, GemmLayout::tn, GemmLayout::tt})
    for (std::int64_t pad : {0, 3})
      for (std::int64_t batch : {1, 3}) {
        GemmProblem p{.m = 5, .n = 7, .k = 4, .layout = layout, .batch = batch};
        p.x_offset = pad, p.w_offset = 2 * pad;
        if (pad != 0) {
          p.ldx = (x_transposed(p) ? p.m : p.k) + pad;
          p.ldw = (w_transposed(p) ? p.k : p.n) + pad;
          p.ldy = p.n + pad;
        }
        validate(p);
        const LtOperands o = lt_operands(p);
        SCOPED_TRACE(std::string(to_string(layout)) + " pad " + std::to_string(pad) + " batch " +
                     std::to_string(batch));
        // D = op(A) op(B) is m x n with inner size k, and C = D.
        ASSERT_EQ(o.m, p.n);
        ASSERT_EQ(o.n, p.m);
        ASSERT_EQ(o.k, p.k);
        ASSERT_EQ(o.batch, p.batch);
        ASSERT_EQ(o.trans_a ? o.a.cols : o.a.rows, o.m);
        ASSERT_EQ(o.trans_a ? o.a.rows : o.a.cols, o.k);
        ASSERT_EQ(o.trans_b ? o.b.cols : o.b.rows, o.k);
        ASSERT_EQ(o.trans_b ? o.b.rows : o.b.cols, o.n);
        ASSERT_EQ(o.d.rows, o.m);
        ASSERT_EQ(o.d.cols, o.n);
        for (std::int64_t b = 0; b < batch; ++b)
          for (std::int64_t i = 0; i < p.m; ++i)
            for (std::int64_t j = 0; j < p.n; ++j) {
              ASSERT_EQ(checked_op_element(o.d, false, j, i, b), y_index(p, b * p.m + i, j));
              for (std::int64_t l = 0; l < p.k; ++l) {
                ASSERT_EQ(checked_op_element(o.a, o.trans_a, j, l, b), w_index(p, l, j, b));
                ASSERT_EQ(checked_op_element(o.b, o.trans_b, l, i, b), x_index(p, i, l, b));
                ++checked;
              }
            }
        // The last GEMM's last element lies inside the buffers the inputs allocate.
        EXPECT_LT(o.a.offset + (batch - 1) * o.a.batch_stride + (o.a.cols - 1) * o.a.ld +
                      o.a.rows - 1,
                  w_elements(p));
        EXPECT_LT(o.b.offset + (batch - 1) * o.b.batch_stride + (o.b.cols - 1) * o.b.ld +
                      o.b.rows - 1,
                  x_elements(p));
      }
  EXPECT_EQ(checked, 4 * 2 * (1 + 3) * 5 * 7 * 4);
}

TEST(LtOperands, SizesBeyondThirtyTwoBitsAreNamed) {
  constexpr std::int64_t big = std::int64_t{std::numeric_limits<std::int32_t>::max()} + 1;
  EXPECT_NO_THROW(check_fits_cublas(lt_operands(GemmProblem{.m = 4, .n = 4, .k = 4})));
  try {
    check_fits_cublas(lt_operands(GemmProblem{.m = 4, .n = 4, .k = big}));
    ADD_FAILURE() << "k beyond int32 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemm k = 2147483648"), std::string::npos) << e.what();
  }
  try {
    check_fits_cublas(lt_operands(GemmProblem{.m = 2, .n = 4, .k = 4, .ldy = big}));
    ADD_FAILURE() << "ldy beyond int32 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ldy (cuBLAS ldc)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lt_operands(GemmProblem{.m = 1, .n = 1, .k = 1, .batch = big}), Error);
}

TEST(LtPlan, SplitKPartialsCuBlasLtCanKeep) {
  GemmProblem p{.m = 8, .n = 8, .k = 64, .dtype = DType::bf16, .split_k = 4};
  for (DType partials : {DType::f32, DType::bf16}) {
    p.split_k_partials = partials;
    EXPECT_NO_THROW(check_lt_split_k(p));
  }
  p.split_k_partials = DType::f16;
  EXPECT_THROW(check_lt_split_k(p), Error);
  p.split_k = 0;  // the library's choice: nothing is forced
  EXPECT_NO_THROW(check_lt_split_k(p));
}

TEST(LtPlan, PointerAlignment) {
  EXPECT_EQ(pointer_alignment(0x7f0000000000), 256u);
  EXPECT_EQ(pointer_alignment(0x7f0000000102), 2u);
  EXPECT_EQ(pointer_alignment(0x7f0000000108), 8u);
  EXPECT_EQ(pointer_alignment(0x7f0000000180), 128u);
  EXPECT_EQ(pointer_alignment(0x7f0000000001), 1u);
}

}  // namespace
}  // namespace meshgate::gemm
