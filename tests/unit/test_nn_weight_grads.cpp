// Deferred weight gradients (zero-bubble pipelines' B and W): a transformer block's backward with
// a WeightGrads gives the same input gradient and touches no parameter gradient; running the
// WeightGrads afterwards gives the same parameter gradients as the plain backward; a second pass
// reuses the buffers. With fp32 and with bf16 GEMM inputs.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "gradcheck.h"
#include "kernels/ops.h"
#include "nn/transformer_block.h"
#include "nn/weight_grads.h"
#include "param_randomize.h"

namespace {
using namespace tessera;
namespace gc = tessera::testing;

float max_abs_diff(const Tensor& a, const Tensor& b) {
  float worst = 0.0f;
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  return worst;
}

void expect_backward_splits(ops::MatmulInputs inputs) {
  const int64_t batch = 2, seq = 5, channels = 8;
  nn::ParamStore s;
  s.set_matmul_inputs(inputs);  // the block's layers multiply in the store's precision
  nn::TransformerBlock blk(s, "blocks.0", nn::BlockConfig{channels, 2, 4 * channels, 0.3f, 0.3f});
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.3f);
  const Tensor x = gc::normal({batch * seq, channels}, "x", 1.0f), r = gc::normal({batch * seq, channels}, "R", 1.0f);
  Tensor y = Tensor::empty({batch * seq, channels});
  auto saved = blk.allocate(batch, seq, Device::cpu);
  auto scratch = blk.allocate_scratch(batch, seq, Device::cpu);
  blk.forward(y, x, saved, scratch);

  Tensor dres_plain = r.clone();
  blk.backward(dres_plain, x, saved, scratch);
  const Tensor grads_plain = s.flat_grads().clone();

  nn::WeightGrads deferred;
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass == 0 ? "first pass" : "second pass (buffers reused)");
    s.zero_grads();
    Tensor dres = r.clone();
    const int64_t bytes_before = memory_stats(Device::cpu).current_bytes;
    blk.backward(dres, x, saved, scratch, &deferred);
    EXPECT_EQ(max_abs_diff(dres, dres_plain), 0.0f) << "B's input gradient differs from the plain backward's";
    EXPECT_EQ(max_abs_diff(s.flat_grads(), Tensor::zeros(s.flat_grads().shape())), 0.0f)
        << "B touched a parameter gradient";
    if (pass == 1) {
      EXPECT_EQ(memory_stats(Device::cpu).current_bytes, bytes_before) << "the second B allocated";
    }
    EXPECT_FALSE(deferred.empty());
    deferred.run();
    EXPECT_TRUE(deferred.empty());
    EXPECT_EQ(max_abs_diff(s.flat_grads(), grads_plain), 0.0f) << "W's gradients differ from the plain backward's";
  }
}

TEST(WeightGrads, BlockBackwardSplitsIntoInputAndWeightGradients) { expect_backward_splits(ops::MatmulInputs::f32); }

// Under bf16 GEMM inputs the plain backward rounds each linear's output gradient once for its two
// products (ops::RoundedOperand), the split one for each product apart: the same numbers.
TEST(WeightGrads, BlockBackwardSplitsTheSameUnderBf16Inputs) { expect_backward_splits(ops::MatmulInputs::bf16); }

}  // namespace
