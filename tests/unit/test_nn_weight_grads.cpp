// Deferred weight gradients (zero-bubble pipelines' B and W): a transformer block's backward with
// a WeightGrads gives the same input gradient and touches no parameter gradient; running the
// WeightGrads afterwards gives the same parameter gradients as the plain backward; a second pass
// reuses the buffers. With fp32 and with bf16 GEMM inputs; dense blocks and mixture-of-experts
// blocks (gpt2 and llama, with shared experts and a capacity that drops).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

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

enum class Block { dense, gpt2_moe, llama_moe };

// A mixture-of-experts block (top-2 of 3 experts, with two shared experts) whose capacity binds
// (4 of each expert's assignments kept): the rows its experts take, and so what W keeps of them,
// differ between the two passes (the second's tokens are all alike: two experts take 4 each).
nn::MoeConfig moe_config(int64_t channels, bool llama) {
  nn::MoeConfig moe;
  moe.channels = channels;
  moe.hidden = 6;
  moe.experts = 3;
  moe.router = {2, 0.5f, 0.01f, 0.05f, 0.3f, llama ? nn::RouterNorm::softmax_topk : nn::RouterNorm::softmax};
  moe.init_std = moe.proj_init_std = 0.3f;
  moe.swiglu = llama;
  moe.shared_experts = 2;
  return moe;
}

void expect_backward_splits(ops::MatmulInputs inputs, Block kind = Block::dense) {
  const int64_t batch = 2, seq = 5, channels = 8;
  const nn::MoeConfig moe = moe_config(channels, kind == Block::llama_moe);
  nn::BlockConfig config{channels, 2, 4 * channels, 0.3f, 0.3f};
  if (kind != Block::dense) config.moe = &moe;
  if (kind == Block::llama_moe) {
    config.norm = nn::NormKind::rms;
    config.attention = {1, 10000.0f};
    config.swiglu = true;
  }
  const float aux_scale = kind == Block::dense ? 0.0f : 0.8f;  // the MoE blocks' auxiliary losses' weight
  nn::ParamStore s;
  s.set_matmul_inputs(inputs);  // the block's layers multiply in the store's precision
  nn::TransformerBlock blk(s, "blocks.0", config);
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.3f);
  const Tensor r = gc::normal({batch * seq, channels}, "R", 1.0f);
  Tensor y = Tensor::empty({batch * seq, channels});
  auto saved = blk.allocate(batch, seq, Device::cpu);
  auto scratch = blk.allocate_scratch(batch, seq, Device::cpu);

  nn::WeightGrads deferred;
  std::vector<int64_t> routed_rows;
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass == 0 ? "first pass" : "second pass (buffers reused; MoE: other rows routed)");
    Tensor x = gc::normal({batch * seq, channels}, "x", 1.0f);
    if (pass == 1)  // every row the first
      for (int64_t t = 1; t < batch * seq; ++t) x.rows(t, 1).copy_from(x.rows(0, 1));
    blk.forward(y, x, saved, scratch);
    if (kind != Block::dense) {
      const nn::MoeStats& st = saved.moe.stats;
      routed_rows.push_back(std::accumulate(st.kept.begin(), st.kept.end(), int64_t{0}));
      EXPECT_GT(st.dropped, 0) << "the capacity binds";
    }
    s.zero_grads();
    Tensor dres_plain = r.clone();
    blk.backward(dres_plain, x, saved, scratch, nullptr, aux_scale);
    const Tensor grads_plain = s.flat_grads().clone();

    s.zero_grads();
    Tensor dres = r.clone();
    const int64_t bytes_before = memory_stats(Device::cpu).current_bytes;
    blk.backward(dres, x, saved, scratch, &deferred, aux_scale);
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
  if (kind != Block::dense) EXPECT_NE(routed_rows[0], routed_rows[1]) << "both passes routed as many rows";
}

TEST(WeightGrads, BlockBackwardSplitsIntoInputAndWeightGradients) { expect_backward_splits(ops::MatmulInputs::f32); }

// Under bf16 GEMM inputs the plain backward rounds each linear's output gradient once for its two
// products (ops::RoundedOperand), the split one for each product apart: the same numbers.
TEST(WeightGrads, BlockBackwardSplitsTheSameUnderBf16Inputs) { expect_backward_splits(ops::MatmulInputs::bf16); }

// A mixture-of-experts block: B runs the input gradient through the experts and the router, W the
// experts' (and shared experts') and the router's weight gradients, aux loss included: bitwise the
// plain backward's.
TEST(WeightGrads, Gpt2MoeBlockSplits) { expect_backward_splits(ops::MatmulInputs::f32, Block::gpt2_moe); }
TEST(WeightGrads, LlamaMoeBlockSplits) { expect_backward_splits(ops::MatmulInputs::f32, Block::llama_moe); }
TEST(WeightGrads, MoeBlockSplitsTheSameUnderBf16Inputs) {
  expect_backward_splits(ops::MatmulInputs::bf16, Block::gpt2_moe);
  expect_backward_splits(ops::MatmulInputs::bf16, Block::llama_moe);
}
}  // namespace
