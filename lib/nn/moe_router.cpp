// MoeRouter: softmax and top-k per token row, capacity over the group, the auxiliary losses and
// the backward of gates and losses into the logits (host loops: the router is E columns wide).
#include "nn/moe_router.h"

#include <algorithm>
#include <cmath>

namespace tessera::nn {

const char* router_norm_name(RouterNorm norm) {
  switch (norm) {
    case RouterNorm::softmax: return "softmax";
    case RouterNorm::softmax_topk: return "softmax_topk";
    case RouterNorm::auto_: break;
  }
  return "auto";
}

RouterNorm parse_router_norm(const std::string& name) {
  for (RouterNorm norm : {RouterNorm::auto_, RouterNorm::softmax, RouterNorm::softmax_topk})
    if (name == router_norm_name(norm)) return norm;
  fail("--router-norm ", name, ": expected auto (top-1: softmax, top-2: softmax_topk), softmax (the chosen",
       " probabilities) or softmax_topk (renormalised over the chosen experts, as Mixtral)");
}

MoeRouter::MoeRouter(ParamStore& store, const std::string& name, int64_t channels, int64_t experts,
                     const RouterOptions& options)
    : options_(options), experts_(experts) {
  TESSERA_CHECK(options.top_k == 1 || options.top_k == 2, name, ": top-k ", options.top_k,
                " is not supported (1 or 2)");
  TESSERA_CHECK(experts >= options.top_k, name, ": top-", options.top_k, " routing needs at least ", options.top_k,
                " experts, not ", experts);
  TESSERA_CHECK(options.capacity_factor >= 0.0f && std::isfinite(options.capacity_factor), name, ": capacity factor ",
                options.capacity_factor, " (0: no limit, or a positive factor)");
  linear_ = Linear(store, name, channels, experts, {false, options.init_std});
}

MoeRouter::Saved MoeRouter::allocate(int64_t rows, Device device) const {
  TESSERA_CHECK(device == Device::cpu, "the MoE router runs on the host (cpu tensors only)");
  const int64_t k = options_.top_k;
  return {Tensor::empty({rows, experts_}),      Tensor::empty({rows}),
          Tensor::empty({rows, k}, DType::i32), Tensor::empty({rows, k}),
          Tensor::empty({rows, k}, DType::i32), Tensor::empty({count_width()}, DType::i32)};
}

int64_t MoeRouter::capacity(int64_t tokens) const {
  if (options_.capacity_factor == 0.0f) return 0;
  const double c = std::ceil(static_cast<double>(options_.capacity_factor) * static_cast<double>(tokens) *
                             options_.top_k / static_cast<double>(experts_));
  return std::max<int64_t>(1, static_cast<int64_t>(c));
}

void MoeRouter::forward(const Tensor& x, Saved& s) const {
  const int64_t n = s.lse.numel(), e_count = experts_, k = options_.top_k;
  TESSERA_CHECK(x.numel() == n * linear_.in_features(), "MoE router: input ", x.shape().str(), " is not the ", n,
                " rows of ", linear_.in_features(), " channels it was allocated for");
  linear_.forward(s.probs, x);  // logits, made probabilities in place below
  float* p = s.probs.data<float>();
  float* lse = s.lse.data<float>();
  int32_t* expert = s.expert.data<int32_t>();
  float* gate = s.gate.data<float>();
  int32_t* counts = s.counts.data<int32_t>();
  std::fill_n(counts, count_width(), 0);
  const bool renormalise = renormalises();
  for (int64_t t = 0; t < n; ++t) {
    float* row = p + t * e_count;
    // Choices from the logits themselves: strict > keeps the lower index on a tie.
    int64_t first = 0;
    for (int64_t e = 1; e < e_count; ++e)
      if (row[e] > row[first]) first = e;
    int64_t second = -1;
    if (k == 2)
      for (int64_t e = 0; e < e_count; ++e)
        if (e != first && (second < 0 || row[e] > row[second])) second = e;
    const double max = row[first];
    double sum = 0.0;
    for (int64_t e = 0; e < e_count; ++e) sum += std::exp(static_cast<double>(row[e]) - max);
    lse[t] = static_cast<float>(max + std::log(sum));
    for (int64_t e = 0; e < e_count; ++e)
      row[e] = static_cast<float>(std::exp(static_cast<double>(row[e]) - max) / sum);
    expert[t * k] = static_cast<int32_t>(first);
    ++counts[first];
    if (k == 1) {
      gate[t] = renormalise ? 1.0f : row[first];
    } else {
      expert[t * k + 1] = static_cast<int32_t>(second);
      ++counts[e_count + second];
      const double p1 = row[first], p2 = row[second], sum12 = renormalise ? p1 + p2 : 1.0;
      gate[t * k] = static_cast<float>(p1 / sum12);
      gate[t * k + 1] = static_cast<float>(p2 / sum12);
    }
  }
  counts[k * e_count] = static_cast<int32_t>(n);
}

void MoeRouter::apply_capacity(Saved& s, RoutePlan& plan, const Tensor& all_counts, int rank) const {
  const int64_t e_count = experts_, k = options_.top_k, width = count_width();
  TESSERA_CHECK(all_counts.numel() % width == 0 && all_counts.numel() >= width, "MoE router: gathered counts of ",
                all_counts.numel(), " elements are not rows of ", width);
  const int ranks = static_cast<int>(all_counts.numel() / width);
  TESSERA_CHECK(rank >= 0 && rank < ranks, "MoE router: rank ", rank, " outside ", ranks, " ranks");
  const int32_t* all = all_counts.data<int32_t>();
  auto count = [&](int i, int64_t choice, int64_t e) -> int64_t { return all[i * width + choice * e_count + e]; };

  plan.tokens = 0;
  for (int i = 0; i < ranks; ++i) plan.tokens += all[i * width + k * e_count];
  plan.capacity = capacity(plan.tokens);
  plan.first_choice.assign(e_count, 0);
  plan.routed.assign(e_count, 0);
  plan.kept.assign(e_count, 0);
  plan.traffic.reset(ranks, e_count);
  // Where this rank's assignments of each (choice, expert) start in that expert's queue: after
  // every earlier choice's assignments of all ranks, then this choice's of lower ranks.
  std::vector<int64_t> start(static_cast<size_t>(k * e_count), 0);
  for (int64_t e = 0; e < e_count; ++e) {
    int64_t queued = 0;
    for (int64_t choice = 0; choice < k; ++choice)
      for (int i = 0; i < ranks; ++i) {
        const int64_t c = count(i, choice, e);
        const int64_t kept = plan.capacity == 0 ? c : std::clamp<int64_t>(plan.capacity - queued, 0, c);
        if (i == rank) start[choice * e_count + e] = queued;
        plan.traffic.rows[i * e_count + e] += kept;
        plan.kept[e] += kept;
        plan.routed[e] += c;
        if (choice == 0) plan.first_choice[e] += c;
        queued += c;
      }
  }
  plan.dropped = 0;
  for (int64_t e = 0; e < e_count; ++e) plan.dropped += plan.routed[e] - plan.kept[e];

  const int64_t n = s.lse.numel();
  const int32_t* expert = s.expert.data<int32_t>();
  int32_t* kept = s.kept.data<int32_t>();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t choice = 0; choice < k; ++choice) {
      const int64_t position = start[choice * e_count + expert[t * k + choice]]++;
      kept[t * k + choice] = plan.capacity == 0 || position < plan.capacity ? 1 : 0;
    }
}

RouterLosses MoeRouter::losses(const Saved& s, const RoutePlan& plan) const {
  const int64_t n = s.lse.numel(), e_count = experts_;
  const double tokens = static_cast<double>(plan.tokens);
  const float* p = s.probs.data<float>();
  const float* lse = s.lse.data<float>();
  RouterLosses l;
  if (plan.tokens == 0) return l;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < e_count; ++e) l.aux += static_cast<double>(plan.first_choice[e]) * p[t * e_count + e];
    l.z += static_cast<double>(lse[t]) * lse[t];
  }
  // aux = E sum_e (first_e / N) (sum_t p_te / N); z = sum_t lse_t^2 / N.
  l.aux *= static_cast<double>(e_count) / (tokens * tokens);
  l.z /= tokens;
  return l;
}

void MoeRouter::backward(Tensor& dx, Tensor& dlogits, const Tensor& dgate, const Tensor& x, const Saved& s,
                         const RoutePlan& plan, float loss_scale, WeightGrads* defer) const {
  const int64_t n = s.lse.numel(), e_count = experts_, k = options_.top_k;
  const double tokens = static_cast<double>(plan.tokens);
  // d(loss_scale aux_coef aux)/dp_te = loss_scale aux_coef E f_e / N, the same for every token.
  std::vector<double> aux_dp(static_cast<size_t>(e_count));
  for (int64_t e = 0; e < e_count; ++e)
    aux_dp[e] = loss_scale * static_cast<double>(options_.aux_loss_coef) * static_cast<double>(e_count) *
                (static_cast<double>(plan.first_choice[e]) / tokens) / tokens;
  const double z_scale = loss_scale * static_cast<double>(options_.z_loss_coef) * 2.0 / tokens;

  const float* p = s.probs.data<float>();
  const float* lse = s.lse.data<float>();
  const int32_t* expert = s.expert.data<int32_t>();
  const float* gate = s.gate.data<float>();
  const float* dg = dgate.data<float>();
  float* dl = dlogits.data<float>();
  const bool renormalise = renormalises();  // k = 1: the gate is 1, no gradient through it
  std::vector<double> dp(static_cast<size_t>(e_count));
  for (int64_t t = 0; t < n; ++t) {
    const float* pt = p + t * e_count;
    float* dlt = dl + t * e_count;
    // Through the probabilities: the aux loss, and gates that are probabilities (g_j = p[e_j]).
    std::copy(aux_dp.begin(), aux_dp.end(), dp.begin());
    if (!renormalise)
      for (int64_t j = 0; j < k; ++j) dp[expert[t * k + j]] += dg[t * k + j];
    double p_dot_dp = 0.0;
    for (int64_t e = 0; e < e_count; ++e) p_dot_dp += pt[e] * dp[e];
    const double z_term = z_scale * lse[t];
    for (int64_t e = 0; e < e_count; ++e) dlt[e] = static_cast<float>(pt[e] * (dp[e] - p_dot_dp + z_term));
    if (renormalise && k == 2) {
      // g = softmax of the two chosen logits: dg1/dl1 = -dg1/dl2 = g1 g2, and the same for g2.
      const double g12 = static_cast<double>(gate[t * 2]) * gate[t * 2 + 1];
      const double d = g12 * (static_cast<double>(dg[t * 2]) - dg[t * 2 + 1]);
      dlt[expert[t * 2]] += static_cast<float>(d);
      dlt[expert[t * 2 + 1]] -= static_cast<float>(d);
    }
  }
  linear_.backward(&dx, dlogits, x, /*accumulate_dx=*/true, defer, /*x_outlives=*/true);
}

}  // namespace tessera::nn
