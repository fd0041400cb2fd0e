// Unit tests of optim: AdamW against a scalar double-precision reference (decay ranges, grad_scale, several steps), the LR schedule, the global gradient norm and the clipping factor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "models/gpt/gpt.h"
#include "nn/param_store.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"

using tessera::Device;
using tessera::Tensor;
using tessera::nn::Init;
using tessera::nn::ParamStore;
using tessera::optim::AdamW;
using tessera::optim::AdamWConfig;
using tessera::optim::LrSchedule;

namespace {

// Parameters in an order that makes decay ranges alternate: w1 (decay), b1 (no), w2 (decay),
// w3 (decay, merges with w2), ln (no), emb (decay, padded rows).
void build(ParamStore& s) {
  s.add("w1", {4, 3}, Init::Normal(0.5f), true);
  s.add("b1", {4}, Init::Normal(0.5f), false);
  s.add("w2", {2, 3}, Init::Normal(0.5f), true);
  s.add("w3", {5}, Init::Normal(0.5f), true);
  s.add("ln", {3}, Init::Ones(), false);
  s.add("emb", {3, 2}, Init::Normal(0.5f), true, tessera::nn::Shard{0, 0, 4});
  s.allocate(Device::cpu, 99);
}

// torch.optim.AdamW on one element, in double.
struct RefAdamW {
  double p, m = 0, v = 0;
  void step(double g, double lr, double b1, double b2, double eps, double wd, int64_t t) {
    p *= 1.0 - lr * wd;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mhat = m / (1 - std::pow(b1, static_cast<double>(t)));
    const double vhat = v / (1 - std::pow(b2, static_cast<double>(t)));
    p -= lr * mhat / (std::sqrt(vhat) + eps);
  }
};

void set_grads(ParamStore& s, int step) {
  float* g = s.flat_grads().data<float>();
  for (int64_t i = 0; i < s.numel(); ++i)
    g[i] = tessera::philox_normal(7, tessera::stream_id("grads"), static_cast<uint64_t>(step * 1000 + i));
  // Padding rows of emb keep a zero gradient, as the model guarantees.
  const auto& e = s.spec(s.find("emb"));
  for (int64_t i = 6; i < 8; ++i) g[e.offset + i] = 0.0f;
}

TEST(AdamW, MatchesTheScalarReferenceWithDecayRanges) {
  ParamStore s;
  build(s);
  AdamWConfig cfg;
  cfg.beta1 = 0.8f;
  cfg.beta2 = 0.9f;
  cfg.eps = 1e-6f;
  cfg.weight_decay = 0.3f;
  AdamW opt(s, cfg);
  EXPECT_EQ(opt.exp_avg().numel(), s.numel());
  EXPECT_EQ(opt.exp_avg_sq().numel(), s.numel());

  std::vector<RefAdamW> ref(s.numel());
  std::vector<bool> decay(s.numel());
  for (int id = 0; id < s.size(); ++id)
    for (int64_t i = 0; i < s.spec(id).local_shape.numel(); ++i) {
      ref[s.spec(id).offset + i].p = s.value(id).data<float>()[i];
      decay[s.spec(id).offset + i] = s.spec(id).weight_decay;
    }
  const float lrs[] = {0.1f, 0.05f, 0.02f, 0.2f};
  const float scales[] = {1.0f, 0.5f, 1.0f, 0.25f};
  // Tolerance 5e-7 relative (fp32 kernel vs double; measured worst 4.7e-8 after four steps).
  for (int t = 1; t <= 4; ++t) {
    set_grads(s, t);
    for (int64_t i = 0; i < s.numel(); ++i)
      ref[i].step(static_cast<double>(s.flat_grads().data<float>()[i]) * scales[t - 1], lrs[t - 1], cfg.beta1,
                  cfg.beta2, cfg.eps, decay[i] ? cfg.weight_decay : 0.0, t);
    opt.step(lrs[t - 1], scales[t - 1]);
    EXPECT_EQ(opt.steps_taken(), t);
    for (int64_t i = 0; i < s.numel(); ++i) {
      const double p = s.flat_values().data<float>()[i];
      ASSERT_NEAR(p, ref[i].p, 5e-7 * (1.0 + std::fabs(ref[i].p))) << "element " << i << " after step " << t;
      ASSERT_NEAR(opt.exp_avg().data<float>()[i], ref[i].m, 1e-6 * (1.0 + std::fabs(ref[i].m))) << i;
      ASSERT_NEAR(opt.exp_avg_sq().data<float>()[i], ref[i].v, 1e-6 * (1.0 + std::fabs(ref[i].v))) << i;
    }
  }
  // Padding rows: zero gradient, zero value, nothing moves them.
  const auto& e = s.spec(s.find("emb"));
  for (int64_t i = 6; i < 8; ++i) EXPECT_EQ(s.flat_values().data<float>()[e.offset + i], 0.0f);
}

// With a zero gradient the Adam term vanishes: decayed parameters shrink by exactly (1 - lr wd),
// the others (biases, LayerNorm) do not move at all.
TEST(AdamW, BiasesAndNormsAreNotDecayed) {
  ParamStore s;
  build(s);
  const Tensor before = s.flat_values().clone();
  AdamWConfig cfg;
  cfg.weight_decay = 0.5f;
  AdamW opt(s, cfg);
  opt.step(0.1f);
  for (int id = 0; id < s.size(); ++id) {
    const auto& spec = s.spec(id);
    for (int64_t i = 0; i < spec.local_shape.numel(); ++i) {
      const float b = before.data<float>()[spec.offset + i], a = s.value(id).data<float>()[i];
      if (spec.weight_decay)
        EXPECT_FLOAT_EQ(a, b * (1.0f - 0.1f * 0.5f)) << spec.name << "[" << i << "]";
      else
        EXPECT_EQ(a, b) << spec.name << "[" << i << "] was decayed";
    }
  }
}

// grad_scale multiplies the gradient before anything else: step(lr, s) on g equals step(lr) on s g.
TEST(AdamW, GradScaleIsAGradientMultiplier) {
  ParamStore a, b;
  build(a);
  build(b);
  AdamW oa(a, AdamWConfig{}), ob(b, AdamWConfig{});
  for (int t = 1; t <= 3; ++t) {
    set_grads(a, t);
    set_grads(b, t);
    tessera::ops::scale_inplace(b.flat_grads(), 0.3f);
    oa.step(0.01f, 0.3f);
    ob.step(0.01f);
  }
  for (int64_t i = 0; i < a.numel(); ++i)
    EXPECT_NEAR(a.flat_values().data<float>()[i], b.flat_values().data<float>()[i], 1e-7f) << i;
}

// The step counter drives bias correction; a restored counter resumes where it was.
TEST(AdamW, StepCounterResumes) {
  ParamStore a, b;
  build(a);
  build(b);
  AdamW oa(a, AdamWConfig{}), ob(b, AdamWConfig{});
  for (int t = 1; t <= 3; ++t) {
    set_grads(a, t);
    oa.step(0.01f);
  }
  // b: the same states copied in, the counter set, one more step each.
  b.flat_values().copy_from(a.flat_values());
  ob.exp_avg().copy_from(oa.exp_avg());
  ob.exp_avg_sq().copy_from(oa.exp_avg_sq());
  ob.set_steps_taken(3);
  set_grads(a, 4);
  set_grads(b, 4);
  oa.step(0.01f);
  ob.step(0.01f);
  EXPECT_EQ(ob.steps_taken(), 4);
  for (int64_t i = 0; i < a.numel(); ++i)
    EXPECT_EQ(a.flat_values().data<float>()[i], b.flat_values().data<float>()[i]) << i;
}

// The weights' bf16 bits the update may write (mixed precision's copy) must cover the shard:
// a copy of another size is refused before anything is updated.
TEST(AdamW, WeightBitsOfTheWrongSizeAreRefused) {
  ParamStore s;
  build(s);
  AdamW opt(s, AdamWConfig{});
  const std::vector<float> before(s.flat_values().data<float>(), s.flat_values().data<float>() + s.numel());
  tessera::Tensor short_bits = tessera::Tensor::empty({s.numel() - 1}, tessera::DType::bf16);
  EXPECT_THROW(opt.step(1e-3f, 1.0f, false, short_bits), tessera::Error);
  for (int64_t i = 0; i < s.numel(); ++i) EXPECT_EQ(s.flat_values().data<float>()[i], before[i]) << i;
  EXPECT_EQ(opt.steps_taken(), 0);
  tessera::Tensor bits = tessera::Tensor::empty({s.numel()}, tessera::DType::bf16);
  opt.step(1e-3f, 1.0f, false, bits);  // the right size is taken
  EXPECT_EQ(opt.steps_taken(), 1);
}

TEST(LrSchedule, WarmupCosineAndMinimum) {
  LrSchedule s;
  s.peak = 1e-3;
  s.min = 1e-4;
  s.warmup = 10;
  s.total = 110;
  EXPECT_DOUBLE_EQ(s.at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.at(1), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(5), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);  // the end of warmup is the peak
  for (int64_t t = 11; t <= 110; ++t) {
    const double progress = static_cast<double>(t - 10) / 100.0;
    EXPECT_NEAR(s.at(t), 1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(M_PI * progress)), 1e-15) << t;
    EXPECT_LT(s.at(t), s.at(t - 1)) << "decreasing after warmup, step " << t;
  }
  EXPECT_NEAR(s.at(60), 0.5 * (1e-3 + 1e-4), 1e-15);  // half way: the mean of peak and min
  EXPECT_NEAR(s.at(110), 1e-4, 1e-15);                // the last step reaches the minimum
  EXPECT_NEAR(s.at(500), 1e-4, 1e-15);                // and stays there
  for (int64_t t = 1; t <= 10; ++t) EXPECT_GT(s.at(t), s.at(t - 1)) << "increasing in warmup, step " << t;

  LrSchedule flat;  // no warmup, min = 0
  flat.peak = 2.0;
  flat.total = 4;
  EXPECT_DOUBLE_EQ(flat.at(0), 2.0);
  EXPECT_NEAR(flat.at(2), 1.0, 1e-12);
  EXPECT_NEAR(flat.at(4), 0.0, 1e-12);

  LrSchedule constant;  // min = peak: constant after warmup
  constant.peak = constant.min = 3e-4;
  constant.warmup = 2;
  constant.total = 10;
  EXPECT_DOUBLE_EQ(constant.at(1), 1.5e-4);
  for (int64_t t = 2; t <= 12; ++t) EXPECT_DOUBLE_EQ(constant.at(t), 3e-4) << t;
}

TEST(GradClip, GradNormAndClipFactor) {
  ParamStore s;
  build(s);
  float* g = s.flat_grads().data<float>();
  double sq = 0;
  for (int64_t i = 0; i < s.numel(); ++i) {
    g[i] = 0.01f * static_cast<float>(i % 7) - 0.02f;
    sq += static_cast<double>(g[i]) * g[i];
  }
  EXPECT_NEAR(tessera::optim::grad_norm(s), std::sqrt(sq), 1e-12 * std::sqrt(sq) + 1e-15);
  s.zero_grads();
  EXPECT_EQ(tessera::optim::grad_norm(s), 0.0);
  g[3] = 3.0f;
  g[10] = -4.0f;
  EXPECT_DOUBLE_EQ(tessera::optim::grad_norm(s), 5.0);

  using tessera::optim::clip_factor;
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0f);        // below the maximum: untouched
  EXPECT_NEAR(clip_factor(1.0, 1.0), 1.0 / (1.0 + 1e-6), 1e-7);  // at it: PyTorch's 1e-6 guard applies
  EXPECT_FLOAT_EQ(clip_factor(5.0, 1.0), static_cast<float>(1.0 / (5.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_factor(100.0, 2.5), static_cast<float>(2.5 / (100.0 + 1e-6)));
  EXPECT_EQ(clip_factor(1e9, 0.0), 1.0f);        // max_norm <= 0: clipping off
  EXPECT_EQ(clip_factor(1e9, -1.0), 1.0f);
  EXPECT_EQ(clip_factor(0.0, 1.0), 1.0f);
  // Clipping then applies as AdamW's grad_scale: the clipped gradient has norm max_norm.
  const float f = clip_factor(5.0, 1.0);
  EXPECT_NEAR(5.0 * f, 1.0, 1e-6);
}

// End to end on a tiny model: a few AdamW steps on one batch lower its loss.
TEST(AdamW, LowersTheLossOfATinyGpt) {
  tessera::models::GptConfig cfg;
  cfg.vocab = 11;
  cfg.max_seq = 8;
  cfg.layers = 1;
  cfg.hidden = 16;
  cfg.heads = 2;
  tessera::models::Gpt m(cfg, Device::cpu, 3, 2, 8);
  std::vector<int32_t> rows(2 * 9);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>((3 * i + 1) % 11);
  AdamW opt(m.params(), AdamWConfig{});
  const float first = m.forward(rows.data());
  for (int t = 0; t < 20; ++t) {
    m.params().zero_grads();
    m.forward_backward(rows.data(), 1.0f);
    opt.step(1e-2f);
  }
  const float last = m.forward(rows.data());
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
  // Padding rows of the tied table are still zero after the steps.
  const auto& s = m.params();
  const Tensor& wte = s.value(s.find("embed.tokens.weight"));
  for (int64_t i = cfg.vocab * cfg.hidden; i < wte.numel(); ++i) ASSERT_EQ(wte.data<float>()[i], 0.0f) << i;
}

}  // namespace
