// Unit tests of models::Vit: parameter names, shapes, count and initialisation; the loss at
// initialisation; seeding and micro-batch accumulation; ignored labels; evaluation's accuracy; the
// whole model's backward against central finite differences (both poolings); overfitting a tiny
// batch with plain gradient steps; configurations and layouts it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "gradcheck.h"
#include "kernel_test_util.h"
#include "param_randomize.h"
#include "models/vit/vit.h"

using tessera::Device;
using tessera::Shape;
using tessera::Tensor;
using tessera::models::Vit;
using tessera::models::VitConfig;
namespace nn = tessera::nn;
namespace gc = tessera::testing;

namespace {

VitConfig tiny(const std::string& pool = "cls") {
  VitConfig c;
  c.image = 8;
  c.channels = 3;
  c.patch = 4;
  c.hidden = 16;
  c.layers = 2;
  c.heads = 2;
  c.mlp_ratio = 2;
  c.classes = 3;
  c.pool = pool;
  c.label_smoothing = 0.1f;
  return c;
}

// [batch, H, W, C] images of N(0, 1) values (as normalised pixels are), keyed by seed.
std::vector<float> random_images(const VitConfig& c, int64_t batch, uint64_t seed = 5) {
  std::vector<float> v(batch * c.image * c.image * c.channels);
  tessera::philox_fill_normal(v.data(), static_cast<int64_t>(v.size()), seed, tessera::stream_id("test.images"), 0,
                              0.0f, 1.0f);
  return v;
}

std::vector<int32_t> random_labels(const VitConfig& c, int64_t batch, uint64_t seed = 5) {
  std::vector<int32_t> l(batch);
  for (int64_t i = 0; i < batch; ++i)
    l[i] = static_cast<int32_t>(tessera::philox_bits(seed, tessera::stream_id("test.labels"), i)[0] % c.classes);
  return l;
}

std::vector<float> host(const Tensor& t) {
  const Tensor h = t.to(Device::cpu);
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

// The label-smoothed cross-entropy of the last forward's logits, in double, mean over valid rows.
double mean_loss(const Vit& m, const std::vector<int32_t>& labels) {
  const std::vector<float> z = host(m.logits());
  const int64_t k = m.config().classes;
  const double eps = m.config().label_smoothing;
  double total = 0;
  int64_t valid = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    if (labels[r] < 0) continue;
    const float* x = z.data() + r * k;
    const double mx = *std::max_element(x, x + k);
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += std::exp(x[j] - mx);
    const double lse = mx + std::log(s);
    for (int64_t j = 0; j < k; ++j) total -= ((j == labels[r] ? 1.0 - eps : 0.0) + eps / k) * (x[j] - lse);
    ++valid;
  }
  return valid ? total / static_cast<double>(valid) : 0.0;
}

TEST(Vit, ParameterNamesShapesAndDecay) {
  for (const std::string pool : {"cls", "mean"}) {
    SCOPED_TRACE(pool);
    const VitConfig cfg = tiny(pool);
    const int64_t c = cfg.hidden, h = cfg.mlp_ratio * c, tokens = pool == "cls" ? 5 : 4;
    Vit m(cfg, Device::cpu, 1, 2);
    const nn::ParamStore& s = m.params();
    struct Want {
      Shape shape;
      bool decay;
    };
    std::map<std::string, Want> want = {
        {"patch.proj.weight", {{c, 4 * 4 * 3}, true}},
        {"patch.proj.bias", {{c}, false}},
        {"pos.weight", {{tokens, c}, false}},
        {"ln_f.weight", {{c}, false}},
        {"ln_f.bias", {{c}, false}},
        {"head.weight", {{cfg.classes, c}, true}},
        {"head.bias", {{cfg.classes}, false}},
    };
    if (pool == "cls") want["cls_token"] = {{c}, false};
    for (int i = 0; i < cfg.layers; ++i) {
      const std::string b = "blocks." + std::to_string(i) + ".";
      for (const char* ln : {"ln1", "ln2"}) {
        want[b + ln + ".weight"] = {{c}, false};
        want[b + ln + ".bias"] = {{c}, false};
      }
      want[b + "attn.qkv.weight"] = {{3 * c, c}, true};
      want[b + "attn.qkv.bias"] = {{3 * c}, false};
      want[b + "attn.proj.weight"] = {{c, c}, true};
      want[b + "attn.proj.bias"] = {{c}, false};
      want[b + "mlp.fc.weight"] = {{h, c}, true};
      want[b + "mlp.fc.bias"] = {{h}, false};
      want[b + "mlp.proj.weight"] = {{c, h}, true};
      want[b + "mlp.proj.bias"] = {{c}, false};
    }
    EXPECT_EQ(s.size(), static_cast<int>(want.size()));
    for (const auto& [name, w] : want) {
      const int id = s.find(name);
      ASSERT_GE(id, 0) << "missing parameter " << name;
      EXPECT_EQ(s.spec(id).global_shape, w.shape) << name;
      EXPECT_EQ(s.spec(id).local_shape, w.shape) << name;
      EXPECT_EQ(s.spec(id).weight_decay, w.decay) << name;
    }
    // Flat order: the embedding unit, the blocks, the head unit.
    EXPECT_EQ(s.specs().front().name, "patch.proj.weight");
    EXPECT_EQ(s.specs().back().name, "head.bias");
    EXPECT_EQ(m.logits().shape(), Shape({2, cfg.classes}));
    EXPECT_EQ(cfg.tokens(), tokens);
  }
}

TEST(Vit, ParameterCountAndFlops) {
  const VitConfig cfg = tiny();
  const int64_t c = cfg.hidden, h = cfg.mlp_ratio * c, k = cfg.classes, l = cfg.layers, t = 5;
  Vit m(cfg, Device::cpu, 1, 2);
  const int64_t block = 4 * c + (3 * c * c + 3 * c) + (c * c + c) + (h * c + h) + (c * h + c);
  const int64_t count = (48 * c + c) + c + t * c + l * block + 2 * c + (k * c + k);
  EXPECT_EQ(m.params().logical_numel(), count);
  EXPECT_EQ(m.params().numel(), count);
  EXPECT_DOUBLE_EQ(m.flops_per_sample(), 6.0 * count * t + 12.0 * l * t * t * c);
}

TEST(Vit, InitialValuesFollowTheInitRules) {
  VitConfig cfg = tiny();
  cfg.hidden = 64;  // enough elements for the RMS to settle
  cfg.heads = 4;
  Vit m(cfg, Device::cpu, 3, 2);
  nn::ParamStore& s = m.params();
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  for (int id = 0; id < s.size(); ++id) {
    const auto& spec = s.spec(id);
    const std::vector<float> v = host(s.value(id));
    double sq = 0;
    for (float x : v) sq += static_cast<double>(x) * x;
    const double rms = std::sqrt(sq / static_cast<double>(v.size()));
    if (spec.name.ends_with(".bias")) {
      EXPECT_EQ(rms, 0.0) << spec.name;
    } else if (spec.name.find("ln") != std::string::npos) {
      for (float x : v) EXPECT_EQ(x, 1.0f) << spec.name;
    } else {  // patch.proj, cls_token, pos, head and the blocks' matrices: normal
      const bool proj = spec.name.ends_with("attn.proj.weight") || spec.name.ends_with("mlp.proj.weight");
      const double want = proj ? proj_std : 0.02;
      EXPECT_NEAR(rms, want, 5.0 * want / std::sqrt(2.0 * static_cast<double>(v.size()))) << spec.name;
    }
  }
}

// Small logits: the loss is log K whatever the smoothing (the target sums to one); evaluation
// reports the same loss and leaves the gradients alone.
TEST(Vit, LossAtInitIsNearLogClasses) {
  for (const std::string pool : {"cls", "mean"}) {
    SCOPED_TRACE(pool);
    VitConfig cfg = tiny(pool);
    cfg.classes = 10;
    const int64_t batch = 8;
    Vit m(cfg, Device::cpu, 11, batch);
    const auto images = random_images(cfg, batch);
    const auto labels = random_labels(cfg, batch);
    const Vit::Eval e = m.evaluate(images.data(), labels.data());
    EXPECT_EQ(e.count, batch);
    EXPECT_NEAR(e.loss_sum / batch, std::log(10.0), 0.05);
    EXPECT_NEAR(e.loss_sum / batch, mean_loss(m, labels), 1e-5);
    for (float g : host(m.params().flat_grads())) ASSERT_EQ(g, 0.0f);
    const float loss = m.forward_backward(images.data(), labels.data(), 1.0f);
    EXPECT_NEAR(loss, e.loss_sum / batch, 1e-6 * loss);
  }
}

TEST(Vit, SameSeedSameModelOtherSeedOtherModel) {
  const VitConfig cfg = tiny();
  const auto images = random_images(cfg, 2);
  const auto labels = random_labels(cfg, 2);
  Vit a(cfg, Device::cpu, 42, 2), b(cfg, Device::cpu, 42, 2), c(cfg, Device::cpu, 43, 2), d(cfg, Device::cpu, 42, 5);
  EXPECT_EQ(host(a.params().flat_values()), host(b.params().flat_values()));
  EXPECT_EQ(host(a.params().flat_values()), host(d.params().flat_values())) << "independent of the micro-batch";
  EXPECT_NE(host(a.params().flat_values()), host(c.params().flat_values()));
  const float la = a.forward_backward(images.data(), labels.data(), 1.0f);
  EXPECT_EQ(b.forward_backward(images.data(), labels.data(), 1.0f), la);
  EXPECT_EQ(host(a.params().flat_grads()), host(b.params().flat_grads()));
  EXPECT_NE(c.forward_backward(images.data(), labels.data(), 1.0f), la);
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b, double b_factor = 1.0) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += std::pow(static_cast<double>(a[i]) - b_factor * b[i], 2);
    norm += std::pow(b_factor * b[i], 2);
  }
  return std::sqrt(diff / norm);
}

// Two half batches with grad_scale 0.5 give the gradient of the full batch.
TEST(Vit, MicroBatchAccumulationEqualsTheFullBatch) {
  const VitConfig cfg = tiny("mean");
  const int64_t batch = 4, half = 2, image = cfg.image * cfg.image * cfg.channels;
  const auto images = random_images(cfg, batch, 9);
  const auto labels = random_labels(cfg, batch, 9);
  Vit full(cfg, Device::cpu, 21, batch), part(cfg, Device::cpu, 21, half);
  const float loss = full.forward_backward(images.data(), labels.data(), 1.0f);
  const float l0 = part.forward_backward(images.data(), labels.data(), 0.5f);
  const float l1 = part.forward_backward(images.data() + half * image, labels.data() + half, 0.5f);
  EXPECT_NEAR(0.5 * (l0 + l1), loss, 2e-6 * loss);
  EXPECT_LT(relative_difference(host(part.params().flat_grads()), host(full.params().flat_grads())), 1e-6);
}

// Rows with a label < 0 change neither the loss nor the gradient: a batch with two ignored rows
// equals the batch of its valid rows alone; a batch of ignored rows gives loss 0 and no gradient.
TEST(Vit, IgnoredLabelsContributeNothing) {
  const VitConfig cfg = tiny();
  const int64_t image = cfg.image * cfg.image * cfg.channels;
  const auto images = random_images(cfg, 4, 13);
  const std::vector<int32_t> labels = {2, -1, 0, -100};
  std::vector<float> valid_images(images.begin(), images.begin() + image);
  valid_images.insert(valid_images.end(), images.begin() + 2 * image, images.begin() + 3 * image);
  const std::vector<int32_t> valid_labels = {2, 0};
  Vit padded(cfg, Device::cpu, 8, 4), plain(cfg, Device::cpu, 8, 2);
  const float lp = padded.forward_backward(images.data(), labels.data(), 1.0f);
  const float lv = plain.forward_backward(valid_images.data(), valid_labels.data(), 1.0f);
  EXPECT_NEAR(lp, lv, 1e-6 * lv);
  EXPECT_LT(relative_difference(host(padded.params().flat_grads()), host(plain.params().flat_grads())), 1e-6);
  const Vit::Eval e = padded.evaluate(images.data(), labels.data());
  EXPECT_EQ(e.count, 2);
  EXPECT_NEAR(e.loss_sum, 2.0 * lv, 1e-6 * lv);

  padded.params().zero_grads();
  const std::vector<int32_t> none = {-1, -1, -1, -1};
  EXPECT_EQ(padded.forward_backward(images.data(), none.data(), 1.0f), 0.0f);
  for (float g : host(padded.params().flat_grads())) ASSERT_EQ(g, 0.0f);
  const Vit::Eval empty = padded.evaluate(images.data(), none.data());
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(empty.correct, 0);
  EXPECT_EQ(empty.loss_sum, 0.0);
}

// correct counts the valid rows whose first maximal logit is at the label.
TEST(Vit, EvaluateCountsCorrectPredictions) {
  VitConfig cfg = tiny("mean");
  cfg.classes = 5;
  const int64_t batch = 6;
  Vit m(cfg, Device::cpu, 17, batch);
  const auto images = random_images(cfg, batch, 3);
  m.evaluate(images.data(), random_labels(cfg, batch).data());
  const std::vector<float> z = host(m.logits());
  std::vector<int32_t> labels(batch);
  for (int64_t r = 0; r < batch; ++r) {
    const auto row = z.begin() + r * 5;
    const int32_t top = static_cast<int32_t>(std::max_element(row, row + 5) - row);
    labels[r] = r < 3 ? top : (top + 1) % 5;  // rows 0-2 right, 3-5 wrong
  }
  labels[1] = -1;  // ignored: not counted even though its prediction would be right
  const Vit::Eval e = m.evaluate(images.data(), labels.data());
  EXPECT_EQ(e.count, 5);
  EXPECT_EQ(e.correct, 2);
}

// ---- the whole model's gradient ---------------------------------------------------------------------

// Every parameter random and of moderate size (no trivially symmetric gradient): matrices
// N(0, w_std), vectors N(0, 0.2), LayerNorm weights 1 + N(0, 0.2).
// As the Gpt check in test_nn_gradcheck.cpp: the five-point stencil with h = 1/32 and a
// norm-relative tolerance per tensor of 5e-4 (measured here: at most 1.2e-4, the blocks; the head
// and final norm, nearly linear in the loss, 2e-5). A gradient 1% off gives ~1e-2.
constexpr float kStep = 1.0f / 32;
constexpr double kTolModel = 5e-4;

void vit_gradcheck(const std::string& pool) {
  const VitConfig cfg = tiny(pool);
  const int64_t batch = 4;
  Vit m(cfg, Device::cpu, 7, batch);
  nn::ParamStore& s = m.params();
  tessera::testing::randomize_params(s, 0.25f);
  const auto images = random_images(cfg, batch, 21);
  const std::vector<int32_t> labels = {1, -1, 2, 0};  // one ignored row
  auto f = [&] {
    m.evaluate(images.data(), labels.data());
    return mean_loss(m, labels);
  };
  s.zero_grads();
  const float loss = m.forward_backward(images.data(), labels.data(), 1.0f);
  EXPECT_NEAR(loss, f(), 1e-5 * loss);
  const Tensor grads = s.flat_grads().clone();
  for (int id = 0; id < s.size(); ++id) {
    const nn::ParamSpec& spec = s.spec(id);
    const Tensor g = grads.slice(spec.offset, spec.local_shape);
    const auto idx = gc::sample_indices(spec.local_shape.numel(), 1 << 20);
    const gc::Comparison c =
        gc::compare(gc::gather(g, idx), gc::numeric_grad(s.value(id).data<float>(), idx, kStep, f));
    gc::report("vit(" + pool + "):" + spec.name, c);
    EXPECT_LT(c.rel_err, kTolModel) << spec.name;
    EXPECT_GT(c.num_norm, 1e-6) << spec.name << ": the loss barely depends on it; the check proves nothing";
  }
}

TEST(GradCheck, VitEveryParameterClassToken) { vit_gradcheck("cls"); }
TEST(GradCheck, VitEveryParameterMeanPool) { vit_gradcheck("mean"); }

// ---- training ----------------------------------------------------------------------------------------

// Plain gradient steps on the parameter store fit a tiny batch: the loss falls well below log K
// (measured: 0.291 after 150 steps; the floor with smoothing 0.1 and 3 classes is the target's
// entropy, 0.290), and every image is then classified right.
TEST(Vit, OverfitsATinyBatch) {
  for (const std::string pool : {"cls", "mean"}) {
    SCOPED_TRACE(pool);
    const VitConfig cfg = tiny(pool);
    const int64_t batch = 6;
    Vit m(cfg, Device::cpu, 5, batch);
    const auto images = random_images(cfg, batch, 31);
    const auto labels = random_labels(cfg, batch, 31);
    nn::ParamStore& s = m.params();
    float first = 0, loss = 0;
    for (int step = 0; step < 150; ++step) {
      s.zero_grads();
      loss = m.forward_backward(images.data(), labels.data(), 1.0f);
      if (step == 0) first = loss;
      float* w = s.flat_values().data<float>();
      const float* g = s.flat_grads().data<float>();
      for (int64_t i = 0; i < s.numel(); ++i) w[i] -= 0.5f * g[i];
    }
    EXPECT_NEAR(first, std::log(3.0), 0.05);
    EXPECT_LT(loss, 0.5 * std::log(3.0)) << "from " << first;
    const Vit::Eval e = m.evaluate(images.data(), labels.data());
    EXPECT_EQ(e.correct, batch);
  }
}

// ---- what it refuses ---------------------------------------------------------------------------------

using tessera::testing::expect_error;

struct RowSplitLayout : nn::TensorLayout {
  bool splits_rows() const override { return true; }
};
struct TwoRankSequence : nn::SequenceLayout {
  int size() const override { return 2; }
};

TEST(Vit, BadConfigsLayoutsAndLabelsThrow) {
  auto build = [](const VitConfig& c) { Vit m(c, Device::cpu, 1, 2); };
  auto with = [](auto change) {
    VitConfig c = tiny();
    change(c);
    return c;
  };
  expect_error([&] { build(with([](VitConfig& c) { c.patch = 3; })); }, "does not divide the image size 8");
  expect_error([&] { build(with([](VitConfig& c) { c.hidden = 15; })); }, "not divisible by --heads");
  expect_error([&] { build(with([](VitConfig& c) { c.pool = "max"; })); }, "--pool must be cls or mean");
  expect_error([&] { build(with([](VitConfig& c) { c.label_smoothing = 1.0f; })); }, "--label-smoothing");
  expect_error([&] { build(with([](VitConfig& c) { c.classes = 1; })); }, "classes must be at least 2");
  expect_error([&] { build(with([](VitConfig& c) { c.layers = 0; })); }, "--layers");
  expect_error([&] { tiny().validate(4); }, "--heads 2 is not divisible by --tp 4");
  EXPECT_NO_THROW(tiny().validate(2));

  RowSplitLayout rows;
  TwoRankSequence sequence;
  tessera::models::ModelLayout split_gather, sp;
  split_gather.tensor = &rows;
  sp.sequence = &sequence;
  expect_error([&] { Vit m(tiny(), Device::cpu, 1, 2, split_gather); }, "--sp-mode split_gather is not supported");
  // 8 x 8 images in 4 x 4 patches: 4 patches + the class token do not split over 2 ranks.
  expect_error([&] { Vit m(tiny(), Device::cpu, 1, 2, sp); }, "--sp 2 does not divide the 5 tokens of an image");

  Vit m(tiny(), Device::cpu, 1, 2);
  const auto images = random_images(tiny(), 2);
  const std::vector<int32_t> bad = {0, 3};  // 3 classes: 0..2
  expect_error([&] { m.forward_backward(images.data(), bad.data(), 1.0f); }, "label 3 at row 1");
  expect_error([&] { m.evaluate(images.data(), bad.data()); }, "is not below the number of classes 3");
}

}  // namespace
