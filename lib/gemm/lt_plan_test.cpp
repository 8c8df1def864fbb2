#include "gemm/lt_plan.hpp"

#include <gtest/gtest.h>

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

TEST(LtPlan, PointerAlignment) {
  EXPECT_EQ(pointer_alignment(0x7f0000000000), 256u);
  EXPECT_EQ(pointer_alignment(0x7f0000000102), 2u);
  EXPECT_EQ(pointer_alignment(0x7f0000000108), 8u);
  EXPECT_EQ(pointer_alignment(0x7f0000000180), 128u);
  EXPECT_EQ(pointer_alignment(0x7f0000000001), 1u);
}

}  // namespace
}  // namespace meshgate::gemm
