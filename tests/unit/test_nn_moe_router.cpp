// MoeRouter (nn/moe_router.h): top-k choices and ties, gates, capacity and the order of dropping
// (also decided over several ranks' counts, and over ep x token shards), the aux and z losses on hand-computed cases, and the
// backward of gates and losses against central finite differences, under each --router-norm
// (softmax_topk's gates equal the softmax over the chosen logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "nn/moe_router.h"
#include "nn/param_store.h"

using tessera::Device;
using tessera::DType;
using tessera::Shape;
using tessera::Tensor;
namespace nn = tessera::nn;
namespace gc = tessera::testing;

namespace {

Tensor from_rows(const std::vector<std::vector<float>>& rows) {
  Tensor t = Tensor::empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < rows[r].size(); ++c) t.data<float>()[r * rows[r].size() + c] = rows[r][c];
  return t;
}

// A router whose weight is the identity (C = E), so its logits are x itself.
struct IdentityRouter {
  nn::ParamStore store;
  nn::MoeRouter router;
  IdentityRouter(int64_t experts, int k, float capacity_factor, nn::RouterNorm norm = nn::RouterNorm::auto_) {
    router = nn::MoeRouter(store, "router", experts, experts, {k, capacity_factor, 0.01f, 0.001f, 0.02f, norm});
    store.allocate(Device::cpu, 1);
    Tensor& w = store.value(0);
    w.zero();
    for (int64_t e = 0; e < experts; ++e) w.data<float>()[e * experts + e] = 1.0f;
  }
};

// Routes x on one rank: forward, then capacity from its own counts.
void route_one_rank(const nn::MoeRouter& r, const Tensor& x, nn::MoeRouter::Saved& s, nn::RoutePlan& plan) {
  r.forward(x, s);
  r.apply_capacity(s, plan, s.counts, 0);
}

std::vector<int> column(const Tensor& t, int64_t k, int64_t j) {
  std::vector<int> v;
  for (int64_t i = 0; i < t.numel() / k; ++i) v.push_back(t.data<int32_t>()[i * k + j]);
  return v;
}

TEST(MoeRouter, TopKTakesTheLargestLogitsAndTheLowerIndexOnTies) {
  // Logits exact in fp32, including exact ties.
  const Tensor x = from_rows({{0.25f, 2.0f, -1.0f, 0.5f},     // 1 then 3
                              {1.0f, 1.0f, 1.0f, 1.0f},       // all equal: 0 then 1
                              {0.0f, 3.0f, 3.0f, -2.0f},      // tie for first: 1 then 2
                              {-1.0f, -1.0f, 0.5f, 0.5f},     // tie for first: 2 then 3
                              {4.0f, -3.0f, -3.0f, -3.0f}});  // tie for second: 0 then 1
  for (int k : {1, 2}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    IdentityRouter ir(4, k, 0.0f);
    nn::MoeRouter::Saved s = ir.router.allocate(5);
    nn::RoutePlan plan;
    route_one_rank(ir.router, x, s, plan);
    EXPECT_EQ(column(s.expert, k, 0), (std::vector<int>{1, 0, 1, 2, 0}));
    if (k == 2) {
      EXPECT_EQ(column(s.expert, k, 1), (std::vector<int>{3, 1, 2, 3, 1}));
    }
    for (int64_t t = 0; t < 5; ++t) {
      const float* row = x.data<float>() + t * 4;
      double sum = 0;
      for (int e = 0; e < 4; ++e) sum += std::exp(static_cast<double>(row[e]));
      EXPECT_NEAR(s.lse.data<float>()[t], std::log(sum), 1e-6) << t;
      for (int e = 0; e < 4; ++e) EXPECT_NEAR(s.probs.data<float>()[t * 4 + e], std::exp(row[e]) / sum, 1e-7);
      const int e1 = s.expert.data<int32_t>()[t * k];
      if (k == 1) {
        EXPECT_NEAR(s.gate.data<float>()[t], std::exp(row[e1]) / sum, 1e-7) << "k = 1: the gate is p[e1]";
      } else {
        const int e2 = s.expert.data<int32_t>()[t * k + 1];
        const double g1 = 1.0 / (1.0 + std::exp(static_cast<double>(row[e2]) - row[e1]));
        EXPECT_NEAR(s.gate.data<float>()[t * 2], g1, 1e-7) << "k = 2: renormalised over the two";
        EXPECT_NEAR(s.gate.data<float>()[t * 2 + 1], 1.0 - g1, 1e-7);
      }
      for (int j = 0; j < k; ++j) EXPECT_EQ(s.kept.data<int32_t>()[t * k + j], 1) << "no capacity: nothing dropped";
    }
    EXPECT_EQ(plan.dropped, 0);
    EXPECT_EQ(plan.capacity, 0);
    EXPECT_EQ(plan.tokens, 5);
    EXPECT_EQ(plan.first_choice, (std::vector<int64_t>{2, 2, 1, 0}));
  }
}

TEST(MoeRouter, CapacityIsCeilOfFactorTimesAssignmentsPerExpert) {
  nn::ParamStore store;
  const nn::MoeRouter k2(store, "a", 3, 4, {2, 1.25f});
  EXPECT_EQ(k2.capacity(10), 7);  // ceil(1.25 * 10 * 2 / 4) = ceil(6.25)
  EXPECT_EQ(k2.capacity(8), 5);   // 1.25 * 8 * 2 / 4 = 5 exactly
  const nn::MoeRouter k1(store, "b", 3, 4, {1, 0.5f});
  EXPECT_EQ(k1.capacity(12), 2);  // ceil(1.5)
  const nn::MoeRouter none(store, "c", 3, 4, {1, 0.0f});
  EXPECT_EQ(none.capacity(1000), 0) << "factor 0: no limit";
}

TEST(MoeRouter, TokensPastCapacityAreDroppedInTokenOrder) {
  // k = 1, E = 2, six tokens, factor 1: capacity 3; five choose expert 0.
  IdentityRouter ir(2, 1, 1.0f);
  const Tensor x = from_rows({{1, 0}, {1, 0}, {0, 1}, {1, 0}, {1, 0}, {1, 0}});
  nn::MoeRouter::Saved s = ir.router.allocate(6);
  nn::RoutePlan plan;
  route_one_rank(ir.router, x, s, plan);
  EXPECT_EQ(plan.capacity, 3);
  EXPECT_EQ(column(s.kept, 1, 0), (std::vector<int>{1, 1, 1, 1, 0, 0})) << "the first three of expert 0 are kept";
  EXPECT_EQ(plan.dropped, 2);
  EXPECT_EQ(plan.routed, (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(plan.kept, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(plan.traffic.rows, (std::vector<int64_t>{3, 1}));
}

TEST(MoeRouter, FirstChoicesTakeCapacityBeforeSecondChoices) {
  // k = 2, E = 3, four tokens, factor 1: capacity ceil(4 * 2 / 3) = 3. Choices (first, second):
  // t0 (0, 1), t1 (1, 0), t2 (0, 1), t3 (0, 2). Expert 0's queue: first choices t0 t2 t3, then
  // t1's second choice at position 3: dropped (in plain token order t3's first choice would be).
  IdentityRouter ir(3, 2, 1.0f);
  const Tensor x = from_rows({{2, 1, 0}, {1, 2, 0}, {2, 1, 0}, {2, 0, 1}});
  nn::MoeRouter::Saved s = ir.router.allocate(4);
  nn::RoutePlan plan;
  route_one_rank(ir.router, x, s, plan);
  EXPECT_EQ(plan.capacity, 3);
  EXPECT_EQ(column(s.kept, 2, 0), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(column(s.kept, 2, 1), (std::vector<int>{1, 0, 1, 1}));
  EXPECT_EQ(plan.dropped, 1);
  EXPECT_EQ(plan.routed, (std::vector<int64_t>{4, 3, 1}));
  EXPECT_EQ(plan.kept, (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(plan.first_choice, (std::vector<int64_t>{3, 1, 0}));
}

// Three ranks' shares of a batch, each routed alone and decided from the gathered counts, keep
// and drop exactly what one rank routing the whole batch does; the loss shares add up.
TEST(MoeRouter, CapacityOverRanksMatchesOneRankOnTheWholeBatch) {
  for (int k : {1, 2}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    nn::ParamStore store;
    const nn::MoeRouter router(store, "router", 5, 4, {k, 0.75f, 0.1f, 0.05f, 0.5f});
    store.allocate(Device::cpu, 7);
    const Tensor x = gc::normal({12, 5}, "x", 1.0f);
    nn::MoeRouter::Saved whole = router.allocate(12);
    nn::RoutePlan whole_plan;
    route_one_rank(router, x, whole, whole_plan);
    ASSERT_GT(whole_plan.dropped, 0) << "the case should drop something";
    const nn::RouterLosses whole_losses = router.losses(whole, whole_plan);

    const int ranks = 3;
    const int64_t per = 4, width = router.count_width();
    std::vector<nn::MoeRouter::Saved> parts;
    Tensor all = Tensor::empty({ranks, width}, DType::i32);
    for (int r = 0; r < ranks; ++r) {
      parts.push_back(router.allocate(per));
      router.forward(x.rows(r * per, per), parts.back());
      std::copy_n(parts.back().counts.data<int32_t>(), width, all.data<int32_t>() + r * width);
    }
    double aux = 0, z = 0;
    for (int r = 0; r < ranks; ++r) {
      nn::RoutePlan plan;
      router.apply_capacity(parts[r], plan, all, r);
      EXPECT_EQ(plan.tokens, 12);
      EXPECT_EQ(plan.dropped, whole_plan.dropped);
      EXPECT_EQ(plan.kept, whole_plan.kept);
      EXPECT_EQ(plan.routed, whole_plan.routed);
      int64_t sent = 0;
      for (int i = 0; i < ranks; ++i) sent += plan.traffic.sent_by(i);
      EXPECT_EQ(sent, whole_plan.traffic.sent_by(0));
      for (int64_t i = 0; i < per * k; ++i)
        EXPECT_EQ(parts[r].kept.data<int32_t>()[i], whole.kept.data<int32_t>()[r * per * k + i]) << "rank " << r;
      const nn::RouterLosses l = router.losses(parts[r], plan);
      aux += l.aux;
      z += l.z;
    }
    EXPECT_NEAR(aux, whole_losses.aux, 1e-6 * whole_losses.aux);
    EXPECT_NEAR(z, whole_losses.z, 1e-6 * whole_losses.z);
  }
}

// ep 2 x sp 2: each of the four ranks holds half the positions of its ep rank's 2 sequences of 6
// (counted per sequence), as sequence parallelism splits them; decided from the token group's
// gathered counts, they keep and drop exactly what one rank routing the 4 sequences does, and the
// traffic of each shard's ep group is its own rows'. split_gather's shards (contiguous rows, one
// segment) alike.
TEST(MoeRouter, CapacityOverEpAndTokenShardsMatchesOneRank) {
  for (int k : {1, 2})
    for (bool each_sequence : {true, false}) {
      SCOPED_TRACE("k = " + std::to_string(k) + (each_sequence ? ", sp shards" : ", split_gather shards"));
      nn::ParamStore store;
      const nn::MoeRouter router(store, "router", 5, 4, {k, 0.75f, 0.1f, 0.05f, 0.5f});
      store.allocate(Device::cpu, 7);
      const int ep = 2, shards = 2;
      const int64_t sequences = 2, seq = 6, half = seq / shards, rows = sequences * half;  // per rank
      const Tensor x = gc::normal({ep * sequences * seq, 5}, "x", 1.0f);                 // one-rank order
      nn::MoeRouter::Saved whole = router.allocate(ep * sequences * seq);
      nn::RoutePlan whole_plan;
      route_one_rank(router, x, whole, whole_plan);
      ASSERT_GT(whole_plan.dropped, 0) << "the case should drop something";
      const nn::RouterLosses whole_losses = router.losses(whole, whole_plan);

      // The one-rank row of rank (i, s)'s local row t.
      auto global_row = [&](int i, int s, int64_t t) -> int64_t {
        if (!each_sequence) return (i * shards + s) * rows + t;
        return (i * sequences + t / half) * seq + s * half + t % half;
      };
      const int64_t segments = each_sequence ? sequences : 1, width = router.count_width(segments);
      std::vector<nn::MoeRouter::Saved> parts;
      Tensor all = Tensor::empty({ep * shards, width}, DType::i32);
      for (int i = 0; i < ep; ++i)
        for (int s = 0; s < shards; ++s) {
          Tensor mine = Tensor::empty({rows, 5});
          for (int64_t t = 0; t < rows; ++t) mine.rows(t, 1).copy_from(x.rows(global_row(i, s, t), 1));
          parts.push_back(router.allocate(rows, Device::cpu, segments));
          router.forward(mine, parts.back());
          std::copy_n(parts.back().counts.data<int32_t>(), width, all.data<int32_t>() + (i * shards + s) * width);
        }
      double aux = 0, z = 0;
      for (int i = 0; i < ep; ++i)
        for (int s = 0; s < shards; ++s) {
          nn::MoeRouter::Saved& part = parts[i * shards + s];
          nn::RoutePlan plan;
          router.apply_capacity(part, plan, all, nn::RouteGroup{ep, i, shards, s, segments});
          EXPECT_EQ(plan.tokens, ep * sequences * seq);
          EXPECT_EQ(plan.dropped, whole_plan.dropped);
          EXPECT_EQ(plan.kept, whole_plan.kept);
          EXPECT_EQ(plan.routed, whole_plan.routed);
          EXPECT_EQ(plan.first_choice, whole_plan.first_choice);
          int64_t kept_here = 0;
          for (int64_t t = 0; t < rows; ++t)
            for (int64_t j = 0; j < k; ++j) {
              EXPECT_EQ(part.kept.data<int32_t>()[t * k + j], whole.kept.data<int32_t>()[global_row(i, s, t) * k + j])
                  << "rank (" << i << ", " << s << ") row " << t << " choice " << j;
              kept_here += part.kept.data<int32_t>()[t * k + j];
            }
          EXPECT_EQ(plan.traffic.sent_by(i), kept_here) << "the traffic is this shard's ep group's";
          const nn::RouterLosses l = router.losses(part, plan);
          aux += l.aux;
          z += l.z;
        }
      EXPECT_NEAR(aux, whole_losses.aux, 1e-6 * whole_losses.aux);
      EXPECT_NEAR(z, whole_losses.z, 1e-6 * whole_losses.z);
    }
}

TEST(MoeRouter, AuxAndZLossesOnAHandComputedCase) {
  // E = 2, k = 1, three tokens with logits (ln 3, 0), (ln 3, 0), (0, ln 3): p = (3/4, 1/4) twice and
  // (1/4, 3/4). f = (2/3, 1/3), P = (7/12, 5/12): aux = 2 (2/3 7/12 + 1/3 5/12) = 19/18. Every
  // row's logsumexp is ln 4: z = (ln 4)^2.
  const float l3 = std::log(3.0f);
  const Tensor x = from_rows({{l3, 0}, {l3, 0}, {0, l3}});
  IdentityRouter ir(2, 1, 0.0f);
  nn::MoeRouter::Saved s = ir.router.allocate(3);
  nn::RoutePlan plan;
  route_one_rank(ir.router, x, s, plan);
  const nn::RouterLosses l = ir.router.losses(s, plan);
  EXPECT_NEAR(l.aux, 19.0 / 18.0, 1e-6);
  EXPECT_NEAR(l.z, std::pow(std::log(4.0), 2), 1e-6);

  // Uniform probabilities and balanced first choices give aux = 1.
  const Tensor flat = from_rows({{0, 0}, {0, 0}});  // both tie: first choice 0 for both tokens
  nn::MoeRouter::Saved s2 = ir.router.allocate(2);
  route_one_rank(ir.router, flat, s2, plan);
  EXPECT_NEAR(ir.router.losses(s2, plan).aux, 2.0 * (1.0 * 0.5), 1e-7) << "f = (1, 0), P = (1/2, 1/2)";

  // k = 2: f counts first choices only. E = 3, logits (2, 1, 0) and (0, 2, 1): first choices 0
  // and 1, so f = (1/2, 1/2, 0) and aux = 3 (P_0 + P_1) / 2.
  IdentityRouter ir3(3, 2, 0.0f);
  const Tensor x3 = from_rows({{2, 1, 0}, {0, 2, 1}});
  nn::MoeRouter::Saved s3 = ir3.router.allocate(2);
  route_one_rank(ir3.router, x3, s3, plan);
  const double z0 = std::exp(2.0) + std::exp(1.0) + 1.0;
  const double p0 = (std::exp(2.0) / z0 + 1.0 / z0) / 2.0, p1 = (std::exp(1.0) / z0 + std::exp(2.0) / z0) / 2.0;
  EXPECT_NEAR(ir3.router.losses(s3, plan).aux, 3.0 * (0.5 * p0 + 0.5 * p1), 1e-6);
  EXPECT_EQ(plan.first_choice, (std::vector<int64_t>{1, 1, 0}));
}

// ---- gradients --------------------------------------------------------------------------------

// L = sum_tj R_tj gate_tj + s (aux_coef aux + z_coef z). Finite differences with step 1/64; every
// perturbed evaluation must route as the unperturbed one (the loss is piecewise smooth), which
// the inputs below leave a wide margin for.
constexpr float kStep = 1.0f / 64;
constexpr double kTol = 2e-4;

struct RouterProblem {
  nn::ParamStore store;
  nn::MoeRouter router;
  Tensor x, r;
  nn::MoeRouter::Saved s;
  nn::RoutePlan plan;
  std::vector<int32_t> routing;  // the unperturbed choices
  int64_t reroutes = 0;          // perturbed evaluations that chose differently
  float scale = 1.3f;

  RouterProblem(int k, float aux_coef = 0.3f, float z_coef = 0.2f, nn::RouterNorm norm = nn::RouterNorm::auto_) {
    router = nn::MoeRouter(store, "router", 6, 4, {k, 0.0f, aux_coef, z_coef, 0.02f, norm});
    store.allocate(Device::cpu, 3);
    gc::fill_normal(store.value(0), "router.w", 0.7f);
    r = gc::normal({10, k}, "R", 1.0f);
    s = router.allocate(10);
    // Draw x until every row's routing has a margin no finite-difference step can cross.
    x = gc::normal({10, 6}, "x", 1.0f);
    for (int draw = 1; draw < 200 && routing_margin() <= safe_margin(); ++draw)
      x = gc::normal({10, 6}, "x" + std::to_string(draw), 1.0f);
    objective();
    routing.assign(s.expert.data<int32_t>(), s.expert.data<int32_t>() + s.expert.numel());
  }
  double objective() {
    route_one_rank(router, x, s, plan);
    if (!routing.empty() && !std::equal(routing.begin(), routing.end(), s.expert.data<int32_t>())) ++reroutes;
    const nn::RouterLosses l = router.losses(s, plan);
    const double loss = router.options().aux_loss_coef * l.aux + router.options().z_loss_coef * l.z;
    return gc::dot(s.gate, r) + scale * loss;
  }
  // The smallest gap between consecutive logits of a row, down to the (k+1)-th: what decides the
  // choices and their order (first choices make f).
  double routing_margin() const {
    double margin = 1e9;
    const float* w = store.value(0).data<float>();
    for (int64_t t = 0; t < 10; ++t) {
      std::vector<double> row(4, 0.0);
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t c = 0; c < 6; ++c) row[j] += static_cast<double>(x.data<float>()[t * 6 + c]) * w[j * 6 + c];
      std::sort(row.begin(), row.end(), std::greater<double>());
      for (int j = 0; j < router.top_k(); ++j) margin = std::min(margin, row[j] - row[j + 1]);
    }
    return margin;
  }
  // A step of 2h on one element of x moves a gap by at most 2h (|W_i| + |W_j|); on one of W, by 2h |x|.
  double safe_margin() const {
    double w_max = 0, x_max = 0;
    for (int64_t i = 0; i < store.value(0).numel(); ++i)
      w_max = std::max<double>(w_max, std::fabs(store.value(0).data<float>()[i]));
    for (int64_t i = 0; i < x.numel(); ++i) x_max = std::max<double>(x_max, std::fabs(x.data<float>()[i]));
    return 1.5 * 2 * kStep * std::max(2 * w_max, x_max);
  }
  // dx and the router weight's gradient for dgate and loss scale given.
  Tensor grads(const Tensor& dgate, float loss_scale, Tensor& dx) {
    objective();
    store.zero_grads();
    dx = Tensor::zeros(x.shape());
    Tensor dlogits = Tensor::empty({10, 4});
    router.backward(dx, dlogits, dgate, x, s, plan, loss_scale);
    return store.grad(0).clone();
  }
};

template <typename F>
gc::Comparison compare_fd(float* v, int64_t n, const Tensor& analytic, F&& f) {
  const std::vector<int64_t> idx = gc::sample_indices(n, 1 << 20);
  return gc::compare(gc::gather(analytic, idx), gc::numeric_grad(v, idx, kStep, f));
}

void router_gradcheck(int k, nn::RouterNorm norm = nn::RouterNorm::auto_) {
  SCOPED_TRACE(std::string("--router-norm ") + nn::router_norm_name(norm) + ", top-" + std::to_string(k));
  RouterProblem p(k, 0.3f, 0.2f, norm);
  ASSERT_GT(p.routing_margin(), p.safe_margin()) << "no draw of x routes far enough from a tie";
  auto f = [&] { return p.objective(); };
  Tensor dx;
  const Tensor dw = p.grads(p.r, p.scale, dx);
  const gc::Comparison cx = compare_fd(p.x.data<float>(), p.x.numel(), dx, f);
  const gc::Comparison cw = compare_fd(p.store.value(0).data<float>(), dw.numel(), dw, f);
  gc::report("router.dx (gates + aux + z)", cx);
  gc::report("router.weight (gates + aux + z)", cw);
  EXPECT_LT(cx.rel_err, kTol);
  EXPECT_LT(cw.rel_err, kTol);
  EXPECT_EQ(p.reroutes, 0) << "a perturbation changed the routing: the check is not of a smooth function";

  // Each part alone: the losses without gates (R = 0), the gates without losses (scale 0).
  const Tensor r = p.r;
  p.r = Tensor::zeros(r.shape());
  Tensor dx_losses;
  const Tensor dw_losses = p.grads(p.r, p.scale, dx_losses);
  const gc::Comparison lx = compare_fd(p.x.data<float>(), p.x.numel(), dx_losses, f);
  const gc::Comparison lw = compare_fd(p.store.value(0).data<float>(), dw.numel(), dw_losses, f);
  gc::report("router.dx (aux + z only)", lx);
  gc::report("router.weight (aux + z only)", lw);
  EXPECT_LT(lx.rel_err, kTol);
  EXPECT_LT(lw.rel_err, kTol);
  p.r = r;
  const float scale = p.scale;
  p.scale = 0.0f;
  Tensor dx_gates;
  const Tensor dw_gates = p.grads(p.r, 0.0f, dx_gates);
  const gc::Comparison gx = compare_fd(p.x.data<float>(), p.x.numel(), dx_gates, f);
  gc::report("router.dx (gates only)", gx);
  EXPECT_LT(gx.rel_err, kTol);
  if (k == 1 && p.router.renormalises()) {  // the gate is 1: nothing flows through it, as it should
    double most = 0;
    for (int64_t i = 0; i < dx_gates.numel(); ++i) most = std::max<double>(most, std::fabs(dx_gates.data<float>()[i]));
    EXPECT_EQ(most, 0.0) << "a constant gate passed a gradient";
    return;  // no gates' part to drop below
  }

  // Sensitivity: with both parts in the objective, a gradient missing either fails.
  p.scale = scale;
  EXPECT_GT(compare_fd(p.x.data<float>(), p.x.numel(), dx_gates, f).rel_err, 10 * kTol) << "aux and z dropped";
  EXPECT_GT(compare_fd(p.x.data<float>(), p.x.numel(), dx_losses, f).rel_err, 10 * kTol) << "gates dropped";
  EXPECT_EQ(p.reroutes, 0);
}

TEST(MoeRouter, GradientsOfGatesAndLossesTop1) { router_gradcheck(1); }
TEST(MoeRouter, GradientsOfGatesAndLossesTop2) { router_gradcheck(2); }
TEST(MoeRouter, GradientsUnderSoftmaxGatesTop1) { router_gradcheck(1, nn::RouterNorm::softmax); }
TEST(MoeRouter, GradientsUnderSoftmaxGatesTop2) { router_gradcheck(2, nn::RouterNorm::softmax); }
TEST(MoeRouter, GradientsUnderSoftmaxTopkGatesTop1) { router_gradcheck(1, nn::RouterNorm::softmax_topk); }
TEST(MoeRouter, GradientsUnderSoftmaxTopkGatesTop2) { router_gradcheck(2, nn::RouterNorm::softmax_topk); }

// --router-norm's gates: softmax gives the chosen probabilities; softmax_topk the chosen
// probabilities renormalised, which is the softmax over the chosen logits alone; auto is softmax
// at top-1 and softmax_topk at top-2. Names parse back; a bad name is refused naming the choices.
TEST(MoeRouter, GateNormalisations) {
  const Tensor x = from_rows({{2.0f, 0.5f, 1.0f, -1.0f}, {-0.5f, 0.25f, 1.5f, 0.0f}});  // identity router: logits = x
  for (int k : {1, 2})
    for (nn::RouterNorm norm : {nn::RouterNorm::auto_, nn::RouterNorm::softmax, nn::RouterNorm::softmax_topk}) {
      SCOPED_TRACE(std::string(nn::router_norm_name(norm)) + ", top-" + std::to_string(k));
      EXPECT_EQ(nn::parse_router_norm(nn::router_norm_name(norm)), norm);
      IdentityRouter ir(4, k, 0.0f, norm);
      nn::MoeRouter::Saved s = ir.router.allocate(2);
      nn::RoutePlan plan;
      route_one_rank(ir.router, x, s, plan);
      const bool renormalised = norm == nn::RouterNorm::softmax_topk || (norm == nn::RouterNorm::auto_ && k == 2);
      EXPECT_EQ(ir.router.renormalises(), renormalised);
      for (int64_t t = 0; t < 2; ++t) {
        const float* l = x.data<float>() + t * 4;
        double all = 0, chosen = 0;
        for (int e = 0; e < 4; ++e) all += std::exp(static_cast<double>(l[e]));
        for (int j = 0; j < k; ++j) chosen += std::exp(static_cast<double>(l[s.expert.data<int32_t>()[t * k + j]]));
        double sum = 0;
        for (int j = 0; j < k; ++j) {
          const double logit = l[s.expert.data<int32_t>()[t * k + j]], g = s.gate.data<float>()[t * k + j];
          const double p = std::exp(logit) / all;  // the full softmax's probability
          EXPECT_NEAR(g, renormalised ? std::exp(logit) / chosen : p, 1e-6);
          sum += g;
        }
        if (renormalised) {
          EXPECT_NEAR(sum, 1.0, 1e-6);
        }
      }
    }
  try {
    nn::parse_router_norm("topk");
    ADD_FAILURE() << "--router-norm topk accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax_topk"), std::string::npos) << e.what();
  }
}

// The aux loss's gradient alone (coefficient 1, no z, no gates), for k = 1 and 2; a gradient 5%
// off fails.
TEST(MoeRouter, AuxLossGradient) {
  for (int k : {1, 2}) {
    RouterProblem p(k, 1.0f, 0.0f);
    ASSERT_GT(p.routing_margin(), p.safe_margin());
    p.r = Tensor::zeros(p.r.shape());
    auto f = [&] { return p.objective(); };
    Tensor dx;
    const Tensor dw = p.grads(p.r, p.scale, dx);
    const gc::Comparison cx = compare_fd(p.x.data<float>(), p.x.numel(), dx, f);
    const gc::Comparison cw = compare_fd(p.store.value(0).data<float>(), dw.numel(), dw, f);
    gc::report("router.dx (aux only, k = " + std::to_string(k) + ")", cx);
    gc::report("router.weight (aux only)", cw);
    EXPECT_LT(cx.rel_err, kTol);
    EXPECT_LT(cw.rel_err, kTol);
    Tensor off = dx.clone();
    for (int64_t i = 0; i < off.numel(); ++i) off.data<float>()[i] *= 1.05f;
    EXPECT_GT(compare_fd(p.x.data<float>(), p.x.numel(), off, f).rel_err, 10 * kTol);
    EXPECT_EQ(p.reroutes, 0);
  }
}

// The z loss's gradient, alone, against finite differences of z (with a coefficient of 1 it is
// the only term; detecting a missing factor 2 proves the check can see it).
TEST(MoeRouter, ZLossGradient) {
  nn::ParamStore store;
  const nn::MoeRouter router(store, "router", 6, 4, {1, 0.0f, 0.0f, 1.0f, 0.02f});
  store.allocate(Device::cpu, 3);
  gc::fill_normal(store.value(0), "router.w", 0.7f);
  Tensor x = gc::normal({10, 6}, "x", 1.0f);
  nn::MoeRouter::Saved s = router.allocate(10);
  nn::RoutePlan plan;
  auto f = [&] {
    route_one_rank(router, x, s, plan);
    return router.losses(s, plan).z;
  };
  f();
  Tensor dx = Tensor::zeros(x.shape()), dlogits = Tensor::empty({10, 4}), dgate = Tensor::zeros({10, 1});
  router.backward(dx, dlogits, dgate, x, s, plan, 1.0f);
  const gc::Comparison c = compare_fd(x.data<float>(), x.numel(), dx, f);
  gc::report("router.dx (z only)", c);
  EXPECT_LT(c.rel_err, kTol);
  Tensor half = dx.clone();
  for (int64_t i = 0; i < half.numel(); ++i) half.data<float>()[i] *= 0.5f;
  EXPECT_GT(compare_fd(x.data<float>(), x.numel(), half, f).rel_err, 10 * kTol);
}

TEST(MoeRouter, RefusesUnsupportedOptions) {
  nn::ParamStore store;
  auto message = [&](const nn::RouterOptions& o, int64_t experts) -> std::string {
    try {
      nn::MoeRouter(store, "blocks.0.moe.router", 4, experts, o);
    } catch (const tessera::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({3, 0.0f}, 4).find("top-k 3 is not supported"), std::string::npos);
  EXPECT_NE(message({2, 0.0f}, 1).find("at least 2 experts"), std::string::npos);
  EXPECT_NE(message({1, -1.0f}, 4).find("capacity factor -1"), std::string::npos);
}

}  // namespace
