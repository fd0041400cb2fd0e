// MoeFeedForward (nn/moe.h) on one rank: the forward against a plain loop over tokens and experts,
// one expert against nn::Mlp, dropped tokens, the parameters' layout, and every gradient (x, the
// router weight, the expert weights and biases) against central finite differences, for k = 1 and
// 2 with and without capacity dropping, with checks that a gradient missing a term fails; the same
// for SwiGLU experts (Llama / Mixtral: gate, up, down), and one SwiGLU expert against nn::SwiGluMlp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "gradcheck.h"
#include "nn/mlp.h"
#include "nn/moe.h"
#include "nn/swiglu_mlp.h"
#include "param_randomize.h"

using tessera::Device;
using tessera::DType;
using tessera::Shape;
using tessera::Tensor;
namespace nn = tessera::nn;
namespace gc = tessera::testing;

namespace {

constexpr int64_t kTokens = 12, kChannels = 6, kHidden = 10, kExperts = 4;
constexpr float kStep = 1.0f / 64;
constexpr double kTol = 2e-4;

nn::MoeConfig config(int k, float capacity_factor, int64_t experts = kExperts, bool swiglu = false) {
  nn::MoeConfig c;
  c.swiglu = swiglu;
  c.channels = kChannels;
  c.hidden = kHidden;
  c.experts = experts;
  c.router = {k, capacity_factor, 0.1f, 0.05f, 0.02f};
  return c;
}

// A one-rank layer with random parameters (biases too) and its buffers for kTokens rows.
struct Layer {
  nn::ParamStore store;
  nn::MoeFeedForward moe;
  nn::MoeFeedForward::Saved saved;
  nn::MoeFeedForward::Scratch scratch;
  Tensor x, y, r;
  float loss_scale = 0.7f;
  std::vector<int32_t> routing;  // the unperturbed choices and kept flags
  int64_t reroutes = 0;

  Layer(const nn::MoeConfig& c, int64_t tokens = kTokens) {
    moe = nn::MoeFeedForward(store, "moe", c);
    store.allocate(Device::cpu, 5);
    gc::randomize_params(store, 0.5f);
    saved = moe.allocate(tokens);
    scratch = moe.allocate_scratch(tokens);
    y = Tensor::empty({tokens, c.channels});
    r = gc::normal({tokens, c.channels}, "R", 1.0f);
    // Draw x until every row's routing has a margin no finite-difference step can cross.
    x = gc::normal({tokens, c.channels}, "x", 1.0f);
    for (int draw = 1; draw < 500 && routing_margin() <= safe_margin(); ++draw)
      x = gc::normal({tokens, c.channels}, "x" + std::to_string(draw), 1.0f);
    objective();
    routing = current_routing();
  }
  const Tensor& router_weight() const { return store.value(moe.router_param_id()); }
  std::vector<int32_t> current_routing() const {
    std::vector<int32_t> v(saved.router.expert.data<int32_t>(),
                           saved.router.expert.data<int32_t>() + saved.router.expert.numel());
    v.insert(v.end(), saved.router.kept.data<int32_t>(), saved.router.kept.data<int32_t>() + saved.router.kept.numel());
    return v;
  }
  // L = sum(y R) + loss_scale * (the layer's loss term).
  double objective() {
    const float loss = moe.forward(y, x, saved, scratch);
    if (!routing.empty() && current_routing() != routing) ++reroutes;
    return gc::dot(y, r) + static_cast<double>(loss_scale) * loss;
  }
  // Runs forward and backward with dy and the loss weight given; returns dx (gradients in store).
  Tensor backward(const Tensor& dy, float scale) {
    objective();
    store.zero_grads();
    Tensor dx = Tensor::empty(x.shape());
    for (int64_t i = 0; i < dx.numel(); ++i) dx.data<float>()[i] = 1e3f;  // must be overwritten
    moe.backward(dx, dy, x, saved, scratch, scale);
    return dx;
  }
  double routing_margin() const {
    const int64_t e_count = moe.config().experts, k = moe.router().top_k();
    const float* w = router_weight().data<float>();
    double margin = 1e9;
    for (int64_t t = 0; t < x.dim(0); ++t) {
      std::vector<double> row(e_count, 0.0);
      for (int64_t e = 0; e < e_count; ++e)
        for (int64_t c = 0; c < x.dim(1); ++c)
          row[e] += static_cast<double>(x.data<float>()[t * x.dim(1) + c]) * w[e * x.dim(1) + c];
      std::sort(row.begin(), row.end(), std::greater<double>());
      for (int64_t j = 0; j < k && j + 1 < e_count; ++j) margin = std::min(margin, row[j] - row[j + 1]);
    }
    return margin;
  }
  double safe_margin() const {
    double w_max = 0, x_max = 0;
    for (int64_t i = 0; i < router_weight().numel(); ++i)
      w_max = std::max<double>(w_max, std::fabs(router_weight().data<float>()[i]));
    for (int64_t i = 0; i < x.numel(); ++i) x_max = std::max<double>(x_max, std::fabs(x.data<float>()[i]));
    return 1.5 * 2 * kStep * std::max(2 * w_max, x_max);
  }
};

template <typename F>
gc::Comparison compare_fd(const std::string& what, float* v, int64_t n, const Tensor& analytic, F&& f,
                          bool print = true) {
  const std::vector<int64_t> idx = gc::sample_indices(n, 1 << 20);
  const gc::Comparison c = gc::compare(gc::gather(analytic, idx), gc::numeric_grad(v, idx, kStep, f));
  if (print) gc::report(what, c);
  return c;
}

float gelu(float v) {
  const double c = std::sqrt(2.0 / M_PI);
  return static_cast<float>(0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v))));
}

// y by a plain loop: for each token, each kept choice, gate * proj(gelu(fc(x))) of that expert.
Tensor reference_forward(const Layer& l) {
  const int64_t n = l.x.dim(0), c = kChannels, h = kHidden, k = l.moe.router().top_k();
  const nn::ParamStore& s = l.store;
  const float* w1 = s.value(s.find("moe.experts.fc.weight")).data<float>();
  const float* b1 = s.value(s.find("moe.experts.fc.bias")).data<float>();
  const float* w2 = s.value(s.find("moe.experts.proj.weight")).data<float>();
  const float* b2 = s.value(s.find("moe.experts.proj.bias")).data<float>();
  Tensor y = Tensor::zeros({n, c});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      if (!l.saved.router.kept.data<int32_t>()[t * k + j]) continue;
      const int64_t e = l.saved.router.expert.data<int32_t>()[t * k + j];
      const double g = l.saved.router.gate.data<float>()[t * k + j];
      std::vector<float> act(h);
      for (int64_t i = 0; i < h; ++i) {
        double v = b1[e * h + i];
        for (int64_t q = 0; q < c; ++q)
          v += static_cast<double>(w1[(e * h + i) * c + q]) * l.x.data<float>()[t * c + q];
        act[i] = gelu(static_cast<float>(v));
      }
      for (int64_t o = 0; o < c; ++o) {
        double v = b2[e * c + o];
        for (int64_t i = 0; i < h; ++i) v += static_cast<double>(w2[(e * c + o) * h + i]) * act[i];
        y.data<float>()[t * c + o] += static_cast<float>(g * v);
      }
    }
  return y;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
  return m;
}

TEST(Moe, ParametersAreStackedOverExperts) {
  nn::ParamStore store;
  const nn::MoeFeedForward moe(store, "blocks.1.moe", config(2, 0.0f));
  struct Want {
    const char* name;
    Shape shape;
  };
  for (const Want& w : {Want{"blocks.1.moe.router.weight", {kExperts, kChannels}},
                        Want{"blocks.1.moe.experts.fc.weight", {kExperts, kHidden, kChannels}},
                        Want{"blocks.1.moe.experts.fc.bias", {kExperts, kHidden}},
                        Want{"blocks.1.moe.experts.proj.weight", {kExperts, kChannels, kHidden}},
                        Want{"blocks.1.moe.experts.proj.bias", {kExperts, kChannels}}}) {
    const int id = store.find(w.name);
    ASSERT_GE(id, 0) << w.name;
    EXPECT_EQ(store.spec(id).global_shape, w.shape) << w.name;
    EXPECT_EQ(store.spec(id).shard.dim, -1) << "one rank holds every expert";
  }
}

TEST(Moe, ForwardIsTheGatedSumOfTheChosenExperts) {
  for (int k : {1, 2})
    for (float cf : {0.0f, 0.5f}) {
      SCOPED_TRACE("k = " + std::to_string(k) + ", capacity factor " + std::to_string(cf));
      Layer l(config(k, cf));
      l.objective();
      EXPECT_LT(max_abs_diff(l.y, reference_forward(l)), 1e-5);
      const nn::MoeStats& st = l.saved.stats;
      EXPECT_EQ(st.tokens, kTokens);
      int64_t kept = 0, routed = 0;
      for (int64_t e = 0; e < kExperts; ++e) {
        kept += st.kept[e];
        routed += st.routed[e];
        if (cf > 0) {
          EXPECT_LE(st.kept[e], st.capacity);
        }
      }
      EXPECT_EQ(routed, kTokens * k);
      EXPECT_EQ(kept + st.dropped, routed);
      if (cf > 0) {
        EXPECT_GT(st.dropped, 0) << "capacity " << st.capacity << " should drop something here";
      } else {
        EXPECT_EQ(st.dropped, 0);
      }
      // A token whose every choice was dropped gets exactly 0.
      for (int64_t t = 0; t < kTokens; ++t) {
        bool any = false;
        for (int j = 0; j < k; ++j) any = any || l.saved.router.kept.data<int32_t>()[t * k + j];
        if (any) continue;
        for (int64_t c = 0; c < kChannels; ++c) EXPECT_EQ(l.y.data<float>()[t * kChannels + c], 0.0f) << "token " << t;
      }
      EXPECT_GT(st.max_load(), 1.0 - 1e-12);
    }
}

// With one expert (and so p = 1, gate 1) the layer is the Mlp with the same weights.
TEST(Moe, OneExpertIsTheMlp) {
  Layer l(config(1, 0.0f, 1));
  nn::ParamStore ms;
  nn::Mlp mlp(ms, "mlp", kChannels, kHidden, 0.02f, 0.02f);
  ms.allocate(Device::cpu, 1);
  for (const char* p : {"fc.weight", "fc.bias", "proj.weight", "proj.bias"})
    ms.value(ms.find(std::string("mlp.") + p)).copy_from(l.store.value(l.store.find(std::string("moe.experts.") + p)));
  nn::Mlp::Saved saved = mlp.allocate(kTokens, Device::cpu);
  nn::RegionWorkspace region;
  Tensor y = Tensor::empty({kTokens, kChannels});
  mlp.forward(y, l.x, saved, region);
  l.objective();
  EXPECT_LT(max_abs_diff(l.y, y), 1e-6);
}

// Every gradient against finite differences of L = sum(y R) + s loss.
void moe_gradcheck(int k, float capacity_factor, bool swiglu = false) {
  SCOPED_TRACE(swiglu ? "SwiGLU experts" : "GELU experts");
  Layer l(config(k, capacity_factor, kExperts, swiglu));
  ASSERT_GT(l.routing_margin(), l.safe_margin()) << "no draw of x routes far enough from a tie";
  if (capacity_factor > 0) {
    ASSERT_GT(l.saved.stats.dropped, 0);
  }
  auto f = [&] { return l.objective(); };
  const Tensor dx = l.backward(l.r, l.loss_scale);
  const Tensor grads = l.store.flat_grads().clone();

  const gc::Comparison cx = compare_fd("moe.dx", l.x.data<float>(), l.x.numel(), dx, f);
  EXPECT_LT(cx.rel_err, kTol);
  for (int id = 0; id < l.store.size(); ++id) {
    const nn::ParamSpec& spec = l.store.spec(id);
    const gc::Comparison c = compare_fd(spec.name, l.store.value(id).data<float>(), spec.local_shape.numel(),
                                        grads.slice(spec.offset, spec.local_shape), f);
    EXPECT_LT(c.rel_err, kTol) << spec.name;
    EXPECT_GT(c.num_norm, 1e-6) << spec.name << ": L barely depends on it";
  }
  EXPECT_EQ(l.reroutes, 0) << "a perturbation changed the routing: the check is not of a smooth function";

  // Sensitivity: gradients missing a term fail the same tolerance.
  const int router = l.moe.router_param_id();
  const nn::ParamSpec& rs = l.store.spec(router);
  float* rw = l.store.value(router).data<float>();
  // The router weight without the aux and z terms (loss weight 0 in backward).
  l.backward(l.r, 0.0f);
  const Tensor no_losses = l.store.grad(router).clone();
  EXPECT_GT(compare_fd("", rw, rs.local_shape.numel(), no_losses, f, false).rel_err, 10 * kTol) << "aux + z dropped";
  // The router weight without the gates' path (dy = 0: only the losses).
  const Tensor dx_losses_only = l.backward(Tensor::zeros(l.r.shape()), l.loss_scale);
  const Tensor no_gates = l.store.grad(router).clone();
  EXPECT_GT(compare_fd("", rw, rs.local_shape.numel(), no_gates, f, false).rel_err, 10 * kTol) << "gates dropped";
  // dx 1% off; dx without the router's share.
  Tensor off = dx.clone(), no_router = dx.clone();
  for (int64_t i = 0; i < off.numel(); ++i) {
    off.data<float>()[i] *= 1.01f;
    no_router.data<float>()[i] -= dx_losses_only.data<float>()[i];  // drops the aux/z part of dx
  }
  EXPECT_GT(compare_fd("", l.x.data<float>(), l.x.numel(), off, f, false).rel_err, 10 * kTol) << "dx * 1.01";
  EXPECT_GT(compare_fd("", l.x.data<float>(), l.x.numel(), no_router, f, false).rel_err, 10 * kTol)
      << "dx without aux/z";
  // An expert tensor's gradient with its largest element zeroed.
  const int bias = l.store.find(swiglu ? "moe.experts.up.weight" : "moe.experts.fc.bias");
  Tensor db = grads.slice(l.store.spec(bias).offset, l.store.spec(bias).local_shape).clone();
  int64_t arg = 0;
  for (int64_t i = 0; i < db.numel(); ++i)
    if (std::fabs(db.data<float>()[i]) > std::fabs(db.data<float>()[arg])) arg = i;
  db.data<float>()[arg] = 0.0f;
  EXPECT_GT(compare_fd("", l.store.value(bias).data<float>(), db.numel(), db, f, false).rel_err, 10 * kTol)
      << l.store.spec(bias).name << " with its largest term dropped";
  EXPECT_EQ(l.reroutes, 0);
}

TEST(MoeGradCheck, Top1NoDrop) { moe_gradcheck(1, 0.0f); }
TEST(MoeGradCheck, Top2NoDrop) { moe_gradcheck(2, 0.0f); }
TEST(MoeGradCheck, Top1WithDropping) { moe_gradcheck(1, 0.5f); }
TEST(MoeGradCheck, Top2WithDropping) { moe_gradcheck(2, 0.75f); }
TEST(MoeGradCheck, SwiGluTop1WithDropping) { moe_gradcheck(1, 0.5f, true); }
TEST(MoeGradCheck, SwiGluTop2NoDrop) { moe_gradcheck(2, 0.0f, true); }
TEST(MoeGradCheck, SwiGluTop2WithDropping) { moe_gradcheck(2, 0.75f, true); }

// SwiGLU experts: Mixtral's w1 (gate), w3 (up), w2 (down) stacked over experts, no biases.
TEST(Moe, SwiGluExpertsAreStackedWithoutBiases) {
  nn::ParamStore store;
  const nn::MoeFeedForward moe(store, "blocks.1.moe", config(2, 0.0f, kExperts, true));
  EXPECT_EQ(store.size(), 4) << "router, gate, up, down";
  struct Want {
    const char* name;
    Shape shape;
  };
  for (const Want& w : {Want{"blocks.1.moe.experts.gate.weight", {kExperts, kHidden, kChannels}},
                        Want{"blocks.1.moe.experts.up.weight", {kExperts, kHidden, kChannels}},
                        Want{"blocks.1.moe.experts.down.weight", {kExperts, kChannels, kHidden}}}) {
    const int id = store.find(w.name);
    ASSERT_GE(id, 0) << w.name;
    EXPECT_EQ(store.spec(id).global_shape, w.shape) << w.name;
    EXPECT_TRUE(store.spec(id).expert) << w.name;
  }
  EXPECT_EQ(moe.expert_param_ids().size(), 3u);
}

// One SwiGLU expert (p = 1, gate 1) is nn::SwiGluMlp with the same weights.
TEST(Moe, OneSwiGluExpertIsTheSwiGluMlp) {
  Layer l(config(1, 0.0f, 1, true));
  nn::ParamStore ms;
  nn::SwiGluMlp mlp(ms, "mlp", kChannels, kHidden, 0.02f, 0.02f);
  ms.allocate(Device::cpu, 1);
  for (const char* p : {"gate.weight", "up.weight", "down.weight"})
    ms.value(ms.find(std::string("mlp.") + p)).copy_from(l.store.value(l.store.find(std::string("moe.experts.") + p)));
  nn::SwiGluMlp::Saved saved = mlp.allocate(kTokens, Device::cpu);
  nn::RegionWorkspace region;
  Tensor y = Tensor::empty({kTokens, kChannels});
  mlp.forward(y, l.x, saved, region);
  l.objective();
  EXPECT_LT(max_abs_diff(l.y, y), 1e-6);
  double norm = 0;
  for (int64_t i = 0; i < y.numel(); ++i) norm += std::fabs(y.data<float>()[i]);
  EXPECT_GT(norm, 1e-3) << "the expert's output is not trivially zero";
}

// With `accumulate` forward adds to y and backward adds to dx.
TEST(Moe, AccumulateAddsToTheOutputAndInputGradient) {
  Layer l(config(2, 0.75f, kExperts, true));
  l.objective();
  const Tensor y = l.y.clone();
  Tensor y2 = gc::normal(y.shape(), "y0", 1.0f);
  const Tensor y0 = y2.clone();
  l.moe.forward(y2, l.x, l.saved, l.scratch, true);
  const Tensor dx = l.backward(l.r, l.loss_scale);
  Tensor dx2 = y0.clone();
  l.moe.backward(dx2, l.r, l.x, l.saved, l.scratch, l.loss_scale, true);
  for (int64_t i = 0; i < y.numel(); ++i) {
    EXPECT_NEAR(y2.data<float>()[i], y0.data<float>()[i] + y.data<float>()[i], 1e-5);
    EXPECT_NEAR(dx2.data<float>()[i], y0.data<float>()[i] + dx.data<float>()[i], 1e-5);
  }
}

// Parameter gradients accumulate over calls; dx is overwritten; a second call allocates nothing.
TEST(Moe, BackwardAccumulatesAndAllocatesNothing) {
  Layer l(config(2, 0.75f));
  l.backward(l.r, l.loss_scale);
  const Tensor once = l.store.flat_grads().clone();
  const int64_t allocations = tessera::memory_stats(Device::cpu).allocations;
  Tensor dx = Tensor::empty(l.x.shape());
  l.objective();
  l.moe.backward(dx, l.r, l.x, l.saved, l.scratch, l.loss_scale);
  EXPECT_EQ(tessera::memory_stats(Device::cpu).allocations, allocations + 1) << "only dx was allocated";
  for (int64_t i = 0; i < once.numel(); ++i)
    EXPECT_NEAR(l.store.flat_grads().data<float>()[i], 2 * once.data<float>()[i],
                1e-5 * (1 + std::fabs(once.data<float>()[i])));
}

TEST(Moe, RefusesBadConfigs) {
  auto message = [](const nn::MoeConfig& c) -> std::string {
    nn::ParamStore store;
    try {
      nn::MoeFeedForward(store, "blocks.0.moe", c);
    } catch (const tessera::Error& e) {
      return e.what();
    }
    return "";
  };
  nn::MoeConfig c = config(1, 0.0f);
  c.hidden = 0;
  EXPECT_NE(message(c).find("hidden 0"), std::string::npos) << message(c);
  EXPECT_NE(message(config(3, 0.0f)).find("top-k 3"), std::string::npos);
  EXPECT_NE(message(config(2, 0.0f, 1)).find("at least 2 experts"), std::string::npos);
}

}  // namespace
