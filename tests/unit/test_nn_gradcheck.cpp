// Gradient checks: every nn layer's backward (and the whole Gpt model's) against central finite differences of a scalar objective, with a norm-relative tolerance per tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "param_randomize.h"
#include "models/gpt/gpt.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/param_store.h"
#include "nn/transformer_block.h"

using tessera::Device;
using tessera::DType;
using tessera::Shape;
using tessera::Tensor;
namespace nn = tessera::nn;
namespace gc = tessera::testing;

namespace {

// Region edges' workspace: the one-rank layout of these tests uses none.
tessera::nn::RegionWorkspace region;
tessera::Tensor no_projections;  // the fused attention needs no projections workspace

// Objectives are L = sum(out * R) (modules) or the model's mean cross-entropy, evaluated in fp32
// and summed in double; derivatives by the five-point central stencil (gradcheck.h) with step h.
// Tolerances bound the norm-relative error per tensor, ||a - n|| / ||n||. Measured worst cases
// (OpenBLAS, 1 and 2 threads): modules 3.5e-5, Gpt 1.1e-4 (its embeddings, h^4 truncation through
// the first LayerNorm), tensors the output is linear in 3e-6. A gradient 1% off gives ~1e-2.
constexpr float kStep = 1.0f / 32;   // with the two-point formula the best h (1/128) left 2e-4 on the Gpt
constexpr double kTol = 2e-4;        // nonlinear modules
constexpr double kTolModel = 5e-4;   // the whole Gpt (errors of two blocks, the LM head and the loss)
constexpr double kTolLinear = 5e-5;  // outputs linear in the checked tensor: rounding only

// Checks the analytic gradient of f w.r.t. x[0, n) (sampled to at most max_checks elements)
// against central differences; returns the comparison (also printed).
template <typename F>
gc::Comparison check(const std::string& what, float* x, int64_t n, const Tensor& analytic, F&& f,
                     double tol = kTol, int64_t max_checks = 1 << 20) {
  const std::vector<int64_t> idx = gc::sample_indices(n, max_checks);
  const std::vector<double> num = gc::numeric_grad(x, idx, kStep, f);
  const gc::Comparison c = gc::compare(gc::gather(analytic, idx), num);
  gc::report(what, c);
  EXPECT_LT(c.rel_err, tol) << what << " (checked " << c.count << " elements)";
  EXPECT_GT(c.num_norm, 1e-6) << what << ": the objective barely depends on it; the check proves nothing";
  return c;
}

// Checks every parameter of the store (logical elements: padding rows are a trailing block of a
// row-sharded tensor); grads must hold dL/dparam already.
template <typename F>
void check_params(nn::ParamStore& s, const std::string& prefix, F&& f, double tol = kTol,
                  int64_t max_checks = 1 << 20) {
  const Tensor grads = s.flat_grads().clone();
  for (int id = 0; id < s.size(); ++id) {
    const nn::ParamSpec& spec = s.spec(id);
    ASSERT_TRUE(spec.shard.dim <= 0) << "check_params handles row shards only";
    const Tensor g = grads.slice(spec.offset, spec.local_shape);
    check(prefix + spec.name, s.value(id).data<float>(), s.logical_local_shape(id).numel(), g, f, tol, max_checks);
  }
}

// The same comparison for a deliberately wrong gradient: it must fail the tolerance.
template <typename F>
void expect_detected(const std::string& what, float* x, int64_t n, const Tensor& wrong, F&& f, double tol) {
  const std::vector<int64_t> idx = gc::sample_indices(n, 1 << 20);
  const gc::Comparison c = gc::compare(gc::gather(wrong, idx), gc::numeric_grad(x, idx, kStep, f));
  EXPECT_GT(c.rel_err, tol) << what << ": a wrong gradient passes the check (rel_err " << c.rel_err << ")";
}

Tensor scaled(const Tensor& t, float s) {
  Tensor o = t.clone();
  for (int64_t i = 0; i < o.numel(); ++i) o.data<float>()[i] *= s;
  return o;
}

Tensor filled(Shape shape, float v) {
  Tensor t = Tensor::empty(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v;
  return t;
}

// ---- Linear --------------------------------------------------------------------------------------

void linear_gradcheck(bool bias) {
  nn::ParamStore s;
  nn::Linear lin(s, "lin", 5, 7, {bias, 0.3f});
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.5f);
  EXPECT_EQ(s.find("lin.bias") >= 0, bias);
  Tensor x = gc::normal({2, 3, 5}, "x", 1.0f), y = Tensor::empty({2, 3, 7});
  const Tensor r = gc::normal({2, 3, 7}, "R", 1.0f);
  auto f = [&] {
    lin.forward(y, x);
    return gc::dot(y, r);
  };
  f();
  Tensor dx = filled(x.shape(), 1e3f);  // overwritten
  lin.backward(&dx, r, x);
  check("linear.dx", x.data<float>(), x.numel(), dx, f, kTolLinear);
  check_params(s, "linear:", f, kTolLinear);

  // Sensitivity: a gradient 1% off, or with one element dropped, fails the tolerance.
  expect_detected("linear.dx * 1.01", x.data<float>(), x.numel(), scaled(dx, 1.01f), f, kTolLinear);
  const Tensor dw = s.grad(0).clone();
  Tensor dw_drop = dw.clone();
  int64_t arg = 0;
  for (int64_t i = 0; i < dw.numel(); ++i)
    if (std::fabs(dw.data<float>()[i]) > std::fabs(dw.data<float>()[arg])) arg = i;
  dw_drop.data<float>()[arg] = 0.0f;
  expect_detected("linear.weight with its largest term dropped", s.value(0).data<float>(), dw.numel(), dw_drop, f,
                  kTolLinear);
}

TEST(GradCheck, LinearWithBias) { linear_gradcheck(true); }
TEST(GradCheck, LinearWithoutBias) { linear_gradcheck(false); }

// dW and db accumulate; dx is overwritten, or added to with accumulate_dx; dx may be omitted.
TEST(GradCheck, LinearBackwardSemantics) {
  nn::ParamStore s;
  nn::Linear lin(s, "lin", 4, 3, {true, 0.3f});
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.5f);
  const Tensor x = gc::normal({6, 4}, "x", 1.0f), dy = gc::normal({6, 3}, "R", 1.0f);
  Tensor dx1 = filled({6, 4}, 1e3f);
  lin.backward(&dx1, dy, x);
  const Tensor g1 = s.flat_grads().clone();
  Tensor dx2 = filled({6, 4}, 0.5f);
  lin.backward(&dx2, dy, x, /*accumulate_dx=*/true);
  lin.backward(nullptr, dy, x);
  for (int64_t i = 0; i < dx1.numel(); ++i) {
    EXPECT_NEAR(dx2.data<float>()[i], dx1.data<float>()[i] + 0.5f, 1e-5f) << i;
    EXPECT_LT(std::fabs(dx1.data<float>()[i]), 1e2f) << "dx was not overwritten";
  }
  for (int64_t i = 0; i < s.numel(); ++i)
    EXPECT_NEAR(s.flat_grads().data<float>()[i], 3.0f * g1.data<float>()[i], 1e-5f * (1 + std::fabs(g1.data<float>()[i])))
        << "parameter gradients accumulate over three backward calls, element " << i;
}

// ---- LayerNorm ----------------------------------------------------------------------------------

TEST(GradCheck, LayerNorm) {
  nn::ParamStore s;
  nn::LayerNorm ln(s, "ln", 8);
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.5f);
  Tensor x = gc::normal({6, 8}, "x", 1.5f, 0.7f), y = Tensor::empty({6, 8});
  Tensor mean = Tensor::empty({6}), rstd = Tensor::empty({6});
  const Tensor r = gc::normal({6, 8}, "R", 1.0f);
  auto f = [&] {
    ln.forward(y, mean, rstd, x);
    return gc::dot(y, r);
  };
  f();
  // Accumulate semantics: dx, dweight and dbias are added to what they hold.
  const Tensor dx0 = gc::normal({6, 8}, "dx0", 1.0f), g0 = gc::normal({16}, "g0", 1.0f);
  Tensor dx = dx0.clone();
  s.flat_grads().copy_from(g0);
  ln.backward(dx, r, x, mean, rstd);
  Tensor ddx = dx.clone();
  for (int64_t i = 0; i < dx.numel(); ++i) ddx.data<float>()[i] -= dx0.data<float>()[i];
  for (int64_t i = 0; i < s.numel(); ++i) s.flat_grads().data<float>()[i] -= g0.data<float>()[i];
  check("layernorm.dx (added to dx)", x.data<float>(), x.numel(), ddx, f);
  check_params(s, "layernorm:", f);

  // Mean and rstd as saved: biased variance, eps 1e-5.
  for (int64_t n = 0; n < 6; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < 8; ++c) m += x.data<float>()[n * 8 + c];
    m /= 8;
    for (int c = 0; c < 8; ++c) v += std::pow(x.data<float>()[n * 8 + c] - m, 2);
    v /= 8;
    EXPECT_NEAR(mean.data<float>()[n], m, 1e-6);
    EXPECT_NEAR(rstd.data<float>()[n], 1.0 / std::sqrt(v + 1e-5), 1e-5);
  }

  // Sensitivity on a nonlinear layer: 1% off, and dx without its mean-subtraction term
  // (dx_wrong = rstd * w * dy, i.e. the two mean terms dropped).
  expect_detected("layernorm.dx * 1.01", x.data<float>(), x.numel(), scaled(ddx, 1.01f), f, kTol);
  Tensor naive = Tensor::empty({6, 8});
  for (int64_t n = 0; n < 6; ++n)
    for (int c = 0; c < 8; ++c)
      naive.data<float>()[n * 8 + c] =
          rstd.data<float>()[n] * s.value(0).data<float>()[c] * r.data<float>()[n * 8 + c];
  expect_detected("layernorm.dx without the mean terms", x.data<float>(), x.numel(), naive, f, kTol);
}

// ---- Embedding -----------------------------------------------------------------------------------

TEST(GradCheck, EmbeddingTokensAndPositions) {
  const int64_t vocab = 11, max_seq = 7, channels = 4, pad_to = 8, batch = 2, seq = 5;
  nn::ParamStore s;
  nn::Embedding emb(s, "embed", vocab, max_seq, channels, pad_to, 0.5f);
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.5f);
  EXPECT_EQ(emb.padded_vocab(), 16);
  Tensor tokens = Tensor::empty({batch, seq}, DType::i32);
  const int32_t toks[] = {3, 3, 7, 0, 10, 10, 3, 1, 3, 3};  // repeats within and across rows; 2 unused
  for (int i = 0; i < 10; ++i) tokens.data<int32_t>()[i] = toks[i];
  Tensor out = Tensor::empty({batch, seq, channels});
  const Tensor r = gc::normal({batch, seq, channels}, "R", 1.0f);
  auto f = [&] {
    emb.forward(out, tokens, 0, region);
    return gc::dot(out, r);
  };
  f();
  emb.backward(r, tokens, 0, region);
  const int tid = s.find("embed.tokens.weight"), pid = s.find("embed.positions.weight");
  ASSERT_GE(tid, 0);
  ASSERT_GE(pid, 0);
  check_params(s, "embedding:", f, kTolLinear);

  // Exact structure: a token's row gathers R over its occurrences; padding and unused rows stay 0;
  // position rows past the sequence get nothing.
  const float* dt = s.grad(tid).data<float>();
  const float* dp = s.grad(pid).data<float>();
  for (int64_t v = 0; v < 16; ++v)
    for (int64_t c = 0; c < channels; ++c) {
      double want = 0;
      for (int i = 0; i < 10; ++i)
        if (toks[i] == v) want += r.data<float>()[i * channels + c];
      EXPECT_NEAR(dt[v * channels + c], want, 1e-5) << "token row " << v;
    }
  for (int64_t t = 0; t < max_seq; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      double want = 0;
      for (int64_t b = 0; b < batch && t < seq; ++b) want += r.data<float>()[(b * seq + t) * channels + c];
      EXPECT_NEAR(dp[t * channels + c], want, 1e-5) << "position row " << t;
    }
  // Backward accumulates.
  const Tensor g1 = s.flat_grads().clone();
  emb.backward(r, tokens, 0, region);
  for (int64_t i = 0; i < s.numel(); ++i)
    EXPECT_NEAR(s.flat_grads().data<float>()[i], 2.0f * g1.data<float>()[i], 1e-5f);
}

// ---- SelfAttention -------------------------------------------------------------------------

void attention_gradcheck(int64_t batch, int64_t seq, int64_t channels, int64_t heads, int64_t max_checks,
                         bool causal = true) {
  nn::ParamStore s;
  nn::SelfAttention attn(s, "attn", channels, heads, 0.3f, 0.3f, causal);
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.4f);
  Tensor x = gc::normal({batch, seq, channels}, "x", 1.0f), y = Tensor::empty({batch, seq, channels});
  nn::SelfAttention::Saved saved = attn.allocate(batch, seq, Device::cpu);
  const Tensor r = gc::normal({batch, seq, channels}, "R", 1.0f);
  auto f = [&] {
    attn.forward(y, x, saved, region, no_projections);
    return gc::dot(y, r);
  };
  f();
  Tensor dx = filled(x.shape(), 1e3f);  // overwritten
  Tensor dqkv = Tensor::empty({batch, seq, 3 * channels}), datt = Tensor::empty({batch, seq, channels});
  attn.backward(dx, r, x, saved, dqkv, datt, region, no_projections);
  const std::string tag = std::string(causal ? "" : "non-causal ") + "attention(T=" + std::to_string(seq) + ")";
  check(tag + ".dx", x.data<float>(), x.numel(), dx, f, kTol, max_checks);
  check_params(s, tag + ":", f, kTol, max_checks);
}

TEST(GradCheck, SelfAttention) { attention_gradcheck(2, 5, 8, 2, 1 << 20); }
// Longer than one 64-key tile of the CPU kernel: the online softmax across tiles.
TEST(GradCheck, SelfAttentionAcrossKeyTiles) { attention_gradcheck(1, 70, 4, 2, 160); }
// Every position attends to every other (ViT): the block kernels' non-causal path.
TEST(GradCheck, NonCausalSelfAttention) { attention_gradcheck(2, 5, 8, 2, 1 << 20, false); }
TEST(GradCheck, NonCausalSelfAttentionAcrossKeyTiles) { attention_gradcheck(1, 70, 4, 2, 160, false); }

// Causality: the future does not reach the past, forward or backward.
TEST(GradCheck, SelfAttentionIsCausal) {
  const int64_t batch = 2, seq = 5, channels = 8;
  nn::ParamStore s;
  nn::SelfAttention attn(s, "attn", channels, 2, 0.3f, 0.3f);
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.4f);
  Tensor x = gc::normal({batch, seq, channels}, "x", 1.0f), y = Tensor::empty({batch, seq, channels});
  Tensor y2 = Tensor::empty({batch, seq, channels});
  auto saved = attn.allocate(batch, seq, Device::cpu);
  attn.forward(y, x, saved, region, no_projections);
  for (int64_t c = 0; c < channels; ++c) x.data<float>()[(0 * seq + seq - 1) * channels + c] += 1.0f;  // last token
  attn.forward(y2, x, saved, region, no_projections);
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t i = (0 * seq + t) * channels + c;
      if (t < seq - 1)
        EXPECT_EQ(y.data<float>()[i], y2.data<float>()[i]) << "token " << t << " saw the last one";
      else
        EXPECT_NE(y.data<float>()[i], y2.data<float>()[i]);
    }
  // dy only at the first token: dx is zero at every later token.
  Tensor dy = Tensor::zeros({batch, seq, channels});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c) dy.data<float>()[(b * seq) * channels + c] = 1.0f;
  Tensor dx = Tensor::empty({batch, seq, channels}), dqkv = Tensor::empty({batch, seq, 3 * channels});
  Tensor datt = Tensor::empty({batch, seq, channels});
  attn.backward(dx, dy, x, saved, dqkv, datt, region, no_projections);
  double first = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t)
      for (int64_t c = 0; c < channels; ++c) {
        const float v = dx.data<float>()[(b * seq + t) * channels + c];
        if (t == 0) first += std::fabs(v);
        else EXPECT_EQ(v, 0.0f) << "b " << b << " t " << t;
      }
  EXPECT_GT(first, 0.0);
}

// ---- Mlp -------------------------------------------------------------------------------------------

TEST(GradCheck, Mlp) {
  const int64_t rows = 6, channels = 8, hidden = 32;
  nn::ParamStore s;
  nn::Mlp mlp(s, "mlp", channels, hidden, 0.3f, 0.3f);
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.4f);
  Tensor x = gc::normal({rows, channels}, "x", 1.0f), y = Tensor::empty({rows, channels});
  auto saved = mlp.allocate(rows, Device::cpu);
  const Tensor r = gc::normal({rows, channels}, "R", 1.0f);
  auto f = [&] {
    mlp.forward(y, x, saved, region);
    return gc::dot(y, r);
  };
  f();
  Tensor dx = filled(x.shape(), 1e3f), dh = Tensor::empty({rows, hidden});
  mlp.backward(dx, r, x, saved, dh, region);
  check("mlp.dx", x.data<float>(), x.numel(), dx, f);
  check_params(s, "mlp:", f);
}

// ---- TransformerBlock ------------------------------------------------------------------------------

TEST(GradCheck, TransformerBlockResidualStream) {
  const int64_t batch = 2, seq = 5, channels = 8;
  nn::ParamStore s;
  nn::TransformerBlock blk(s, "blocks.0", nn::BlockConfig{channels, 2, 4 * channels, 0.3f, 0.3f});
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.3f);
  Tensor x = gc::normal({batch, seq, channels}, "x", 1.0f), y = Tensor::empty({batch, seq, channels});
  auto saved = blk.allocate(batch, seq, Device::cpu);
  auto scratch = blk.allocate_scratch(batch, seq, Device::cpu);
  const Tensor r = gc::normal({batch, seq, channels}, "R", 1.0f);
  auto f = [&] {
    blk.forward(y, x, saved, scratch);
    return gc::dot(y, r);
  };
  f();
  Tensor dres = r.clone();  // dL/dy in ...
  blk.backward(dres, x, saved, scratch);
  // ... dL/dx out.
  check("block.dres (dL/dx on exit)", x.data<float>(), x.numel(), dres, f);
  check_params(s, "block:", f);
  // A backward that forgot the identity path (dres = only the branches) must be caught.
  Tensor no_identity = dres.clone();
  for (int64_t i = 0; i < no_identity.numel(); ++i) no_identity.data<float>()[i] -= r.data<float>()[i];
  expect_detected("block.dx without the residual identity path", x.data<float>(), x.numel(), no_identity, f, kTol);
  expect_detected("block.dx * 1.01", x.data<float>(), x.numel(), scaled(dres, 1.01f), f, kTol);
}

// ---- Llama's layers: RMSNorm, rotary grouped-query attention, SwiGLU, their block --------------------

TEST(GradCheck, RmsNorm) {
  nn::ParamStore s;
  nn::LayerNorm norm(s, "norm", 8, nn::TensorLayout::single(), 1e-5f, nn::NormKind::rms);
  ASSERT_EQ(s.size(), 1) << "RMSNorm has a weight and no bias";
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.5f);
  Tensor x = gc::normal({6, 8}, "x", 1.5f, 0.7f), y = Tensor::empty({6, 8});
  Tensor mean = Tensor::empty({6}), rstd = Tensor::empty({6});
  const Tensor r = gc::normal({6, 8}, "R", 1.0f);
  auto f = [&] {
    norm.forward(y, mean, rstd, x);
    return gc::dot(y, r);
  };
  f();
  const Tensor dx0 = gc::normal({6, 8}, "dx0", 1.0f), g0 = gc::normal({8}, "g0", 1.0f);
  Tensor dx = dx0.clone();
  s.flat_grads().copy_from(g0);
  norm.backward(dx, r, x, mean, rstd);
  for (int64_t i = 0; i < dx.numel(); ++i) dx.data<float>()[i] -= dx0.data<float>()[i];
  for (int64_t i = 0; i < s.numel(); ++i) s.flat_grads().data<float>()[i] -= g0.data<float>()[i];
  check("rmsnorm.dx (added to dx)", x.data<float>(), x.numel(), dx, f);
  check_params(s, "rmsnorm:", f);
  // y = x / rms(x) * weight.
  f();
  for (int64_t n = 0; n < 6; ++n) {
    double sq = 0;
    for (int64_t c = 0; c < 8; ++c) sq += double(x.data<float>()[n * 8 + c]) * x.data<float>()[n * 8 + c];
    const double rs = 1.0 / std::sqrt(sq / 8 + 1e-5);
    EXPECT_NEAR(rstd.data<float>()[n], rs, 1e-5 * rs);
    for (int64_t c = 0; c < 8; ++c)
      EXPECT_NEAR(y.data<float>()[n * 8 + c], x.data<float>()[n * 8 + c] * rs * s.value(0).data<float>()[c], 1e-5);
  }
}

// Llama's attention: q, k, v projections without bias, rotary positions, kv_heads of the heads.
void llama_attention_gradcheck(int64_t seq, int64_t heads, int64_t kv_heads, int64_t max_checks) {
  const int64_t batch = 2, channels = 4 * heads;
  nn::ParamStore s;
  nn::SelfAttention attn(s, "attn", channels, heads, 0.3f, 0.3f, true, nn::TensorLayout::single(),
                         nn::SequenceLayout::single(), nn::AttentionOptions{kv_heads, 10000.0f});
  ASSERT_EQ(s.size(), 4) << "q, k, v and the output projection, no biases";
  EXPECT_EQ(s.spec(1).global_shape, Shape({kv_heads * 4, channels}));
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.4f);
  Tensor x = gc::normal({batch, seq, channels}, "x", 1.0f), y = Tensor::empty({batch, seq, channels});
  nn::SelfAttention::Saved saved = attn.allocate(batch, seq, Device::cpu);
  Tensor projections = attn.allocate_projections(batch, seq, Device::cpu);
  const Tensor r = gc::normal({batch, seq, channels}, "R", 1.0f);
  auto f = [&] {
    attn.forward(y, x, saved, region, projections);
    return gc::dot(y, r);
  };
  f();
  Tensor dx = filled(x.shape(), 1e3f);  // overwritten
  Tensor dqkv = Tensor::empty({batch, seq, 3 * channels}), datt = Tensor::empty({batch, seq, channels});
  attn.backward(dx, r, x, saved, dqkv, datt, region, projections);
  const std::string tag = "llama attention(T=" + std::to_string(seq) + ", heads " + std::to_string(heads) +
                          ", kv " + std::to_string(kv_heads) + ")";
  check(tag + ".dx", x.data<float>(), x.numel(), dx, f, kTol, max_checks);
  check_params(s, tag + ":", f, kTol, max_checks);
}

TEST(GradCheck, LlamaAttentionGroupedQuery) { llama_attention_gradcheck(5, 4, 2, 1 << 20); }
TEST(GradCheck, LlamaAttentionMultiQuery) { llama_attention_gradcheck(5, 4, 1, 1 << 20); }
TEST(GradCheck, LlamaAttentionMultiHead) { llama_attention_gradcheck(5, 2, 2, 1 << 20); }
TEST(GradCheck, LlamaAttentionAcrossKeyTiles) { llama_attention_gradcheck(70, 2, 1, 160); }

// Rotary positions make attention depend on relative positions only: the same q, k, v content
// shifted by some positions gives the same scores (here: the output of a sequence whose rows all
// hold one token is the same at every position, as with no positions at all).
TEST(GradCheck, LlamaAttentionSeesRelativePositionsOnly) {
  const int64_t seq = 6, channels = 8;
  nn::ParamStore s;
  nn::SelfAttention attn(s, "attn", channels, 2, 0.3f, 0.3f, true, nn::TensorLayout::single(),
                         nn::SequenceLayout::single(), nn::AttentionOptions{1, 10000.0f});
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.4f);
  Tensor x = Tensor::empty({1, seq, channels}), y = Tensor::empty({1, seq, channels});
  const Tensor token = gc::normal({channels}, "token", 1.0f);
  for (int64_t t = 0; t < seq; ++t) x.rows(0, 1).reshape({seq, channels}).rows(t, 1).copy_from(token.reshape({1, channels}));
  auto saved = attn.allocate(1, seq, Device::cpu);
  Tensor projections = attn.allocate_projections(1, seq, Device::cpu);
  attn.forward(y, x, saved, region, projections);
  for (int64_t t = 1; t < seq; ++t)
    for (int64_t c = 0; c < channels; ++c)
      EXPECT_NEAR(y.data<float>()[t * channels + c], y.data<float>()[c], 1e-5) << "position " << t;
}

TEST(GradCheck, SwiGluMlp) {
  const int64_t rows = 6, channels = 8, hidden = 24;
  nn::ParamStore s;
  nn::SwiGluMlp mlp(s, "mlp", channels, hidden, 0.3f, 0.3f);
  ASSERT_EQ(s.size(), 3) << "gate, up and down, no biases";
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.4f);
  Tensor x = gc::normal({rows, channels}, "x", 1.0f), y = Tensor::empty({rows, channels});
  auto saved = mlp.allocate(rows, Device::cpu);
  const Tensor r = gc::normal({rows, channels}, "R", 1.0f);
  auto f = [&] {
    mlp.forward(y, x, saved, region);
    return gc::dot(y, r);
  };
  f();
  Tensor dx = filled(x.shape(), 1e3f), dgate = Tensor::empty({rows, hidden}), dup = Tensor::empty({rows, hidden});
  mlp.backward(dx, r, x, saved, dgate, dup, region);
  check("swiglu.dx", x.data<float>(), x.numel(), dx, f);
  check_params(s, "swiglu:", f);
}

TEST(GradCheck, LlamaBlockResidualStream) {
  const int64_t batch = 2, seq = 5, channels = 8;
  nn::BlockConfig config{channels, 2, 24, 0.3f, 0.3f};
  config.norm = nn::NormKind::rms;
  config.attention = {1, 10000.0f};
  config.swiglu = true;
  nn::ParamStore s;
  nn::TransformerBlock blk(s, "blocks.0", config);
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.3f);
  Tensor x = gc::normal({batch, seq, channels}, "x", 1.0f), y = Tensor::empty({batch, seq, channels});
  auto saved = blk.allocate(batch, seq, Device::cpu);
  auto scratch = blk.allocate_scratch(batch, seq, Device::cpu);
  const Tensor r = gc::normal({batch, seq, channels}, "R", 1.0f);
  auto f = [&] {
    blk.forward(y, x, saved, scratch);
    return gc::dot(y, r);
  };
  f();
  Tensor dres = r.clone();
  blk.backward(dres, x, saved, scratch);
  check("llama block.dres (dL/dx on exit)", x.data<float>(), x.numel(), dres, f);
  check_params(s, "llama block:", f);
}

// A mixture-of-experts block with shared experts (nn/transformer_block.h), Llama's (SwiGLU experts
// and shared MLP) and gpt2's (GELU): two experts, both chosen (top-2, softmax over the two logits)
// and no load-balancing term, so the block is smooth in every input; the z loss is in L. Every
// parameter, the shared experts' included, and dL/dx; a gradient without the shared experts'
// share of dx is caught.
void moe_block_gradcheck(bool llama) {
  const int64_t batch = 2, seq = 3, channels = 8;
  nn::MoeConfig moe;
  moe.channels = channels;
  moe.hidden = 6;
  moe.experts = 2;
  moe.router = {2, 0.0f, 0.0f, 0.05f, 0.3f, nn::RouterNorm::softmax_topk};
  moe.init_std = moe.proj_init_std = 0.3f;
  moe.swiglu = llama;
  moe.shared_experts = 2;
  nn::BlockConfig config{channels, 2, 24, 0.3f, 0.3f};
  if (llama) {
    config.norm = nn::NormKind::rms;
    config.attention = {1, 10000.0f};
    config.swiglu = true;
  }
  config.moe = &moe;
  nn::ParamStore s;
  nn::TransformerBlock blk(s, "blocks.0", config);
  const std::string shared_in = llama ? "blocks.0.moe.shared.gate.weight" : "blocks.0.moe.shared.fc.weight";
  ASSERT_GE(s.find(shared_in), 0) << shared_in;
  EXPECT_EQ(s.spec(s.find(shared_in)).global_shape, (Shape{2 * 6, channels})) << "shared experts x expert hidden";
  EXPECT_FALSE(s.spec(s.find(shared_in)).expert) << "shared experts are replicated over ep";
  EXPECT_TRUE(s.spec(s.find(llama ? "blocks.0.moe.experts.up.weight" : "blocks.0.moe.experts.fc.bias")).expert);
  s.allocate(Device::cpu, 1);
  tessera::testing::randomize_params(s, 0.3f);
  Tensor x = gc::normal({batch, seq, channels}, "x", 1.0f), y = Tensor::empty({batch, seq, channels});
  auto saved = blk.allocate(batch, seq, Device::cpu);
  auto scratch = blk.allocate_scratch(batch, seq, Device::cpu);
  const Tensor r = gc::normal({batch, seq, channels}, "R", 1.0f);
  const float aux_scale = 0.8f;
  auto f = [&] {
    const float aux = blk.forward(y, x, saved, scratch);
    return gc::dot(y, r) + static_cast<double>(aux_scale) * aux;
  };
  f();
  Tensor dres = r.clone();
  blk.backward(dres, x, saved, scratch, nullptr, aux_scale);
  const std::string tag = llama ? "llama moe block" : "gpt2 moe block";
  check(tag + ".dres (dL/dx on exit)", x.data<float>(), x.numel(), dres, f);
  check_params(s, tag + ":", f);

  // The same block's dx with the shared experts' weights zeroed differs from dres: the shared
  // experts' share of dx, put back by hand, is what the check above needed.
  const Tensor values = s.flat_values().clone();
  for (int id = 0; id < s.size(); ++id)
    if (s.spec(id).name.find(".moe.shared.") != std::string::npos) s.value(id).zero();
  f();
  Tensor no_shared = r.clone();
  blk.backward(no_shared, x, saved, scratch, nullptr, aux_scale);
  s.flat_values().copy_from(values);
  expect_detected(tag + ".dx without the shared experts", x.data<float>(), x.numel(), no_shared, f, kTol);
}

TEST(GradCheck, LlamaMoeBlockWithSharedExperts) { moe_block_gradcheck(true); }
TEST(GradCheck, Gpt2MoeBlockWithSharedExperts) { moe_block_gradcheck(false); }

// ---- the whole model ----------------------------------------------------------------------------------

// Mean cross-entropy over the real vocabulary, from the logits of the last forward, in double.
double mean_xent(const tessera::models::Gpt& m, const std::vector<int32_t>& rows, int64_t batch, int64_t seq) {
  const Tensor& logits = m.logits();
  const int64_t vp = logits.shape()[-1], v = m.config().vocab;
  double total = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) {
      const float* z = logits.data<float>() + (b * seq + t) * vp;
      double mx = z[0];
      for (int64_t j = 1; j < v; ++j) mx = std::max(mx, static_cast<double>(z[j]));
      double se = 0;
      for (int64_t j = 0; j < v; ++j) se += std::exp(z[j] - mx);
      total += mx + std::log(se) - z[rows[b * (seq + 1) + t + 1]];
    }
  return total / static_cast<double>(batch * seq);
}

TEST(GradCheck, GptEveryParameter) {
  tessera::models::GptConfig cfg;
  cfg.vocab = 11;  // not a multiple of the 64-row padding
  cfg.max_seq = 6;
  cfg.layers = 2;
  cfg.hidden = 16;
  cfg.heads = 2;
  const int64_t batch = 2, seq = 5;
  tessera::models::Gpt m(cfg, Device::cpu, 7, batch, seq);
  nn::ParamStore& s = m.params();
  tessera::testing::randomize_params(s, 0.25f);
  std::vector<int32_t> rows(batch * (seq + 1));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>((i * 7 + 3) % 11);
  rows[2] = rows[1];  // a repeated token
  auto f = [&] {
    m.forward(rows.data());
    return mean_xent(m, rows, batch, seq);
  };
  const float reported = m.forward(rows.data());
  EXPECT_NEAR(reported, mean_xent(m, rows, batch, seq), 1e-5 * reported) << "forward's loss is the mean loss";
  s.zero_grads();
  const float loss = m.forward_backward(rows.data(), 1.0f);
  EXPECT_EQ(loss, reported);
  check_params(s, "gpt:", f, kTolModel);
  // Padding rows of the tied embedding get no gradient.
  const int tid = s.find("embed.tokens.weight");
  const Tensor& g = s.grad(tid);
  for (int64_t i = cfg.vocab * cfg.hidden; i < g.numel(); ++i) ASSERT_EQ(g.data<float>()[i], 0.0f) << i;
}

}  // namespace
