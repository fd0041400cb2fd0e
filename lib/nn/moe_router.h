// MoeRouter: which experts each token row goes to and with what weight, for a mixture-of-experts
// layer: logits = x W^T (W [E, C], no bias), probabilities p = softmax(logits), the top-k experts
// (k = 1 or 2; on equal logits the lower expert index wins), gate weights, expert capacity with
// dropping, and the two auxiliary losses with their gradients.
//
//   gates      RouterNorm::auto_ (the default): k = 1 as softmax, k = 2 as softmax_topk.
//              RouterNorm::softmax: g_j = p[e_j], the probabilities themselves, not renormalised
//              (Switch for k = 1; DeepSeekMoE and Qwen-MoE for k = 2).
//              RouterNorm::softmax_topk: g_j = p[e_j] / sum_i p[e_i], the chosen probabilities
//              renormalised to sum to 1 (GShard, Mixtral). This equals a softmax over the k chosen
//              logits alone (the full softmax's denominator cancels), so the gates pass no
//              gradient to the other logits; for k = 1 the gate is 1 and the router learns from the
//              auxiliary losses only.
//              Gates are computed before any dropping: a token whose second choice is dropped
//              keeps g_1 < 1 on its first.
//   capacity   per expert, over the tokens N of the whole expert-parallel group:
//              ceil(capacity_factor * N * k / E); capacity_factor 0 = no limit. Assignments
//              (token, choice) are taken first choices first, then second choices, each in global
//              token order (rank 0's rows, then rank 1's, ...); those past an expert's capacity
//              are dropped (the token gets nothing from that expert).
//   aux loss   Switch/GShard load balancing: aux = E * sum_e f_e * P_e, with f_e the fraction of
//              the N tokens whose FIRST choice is e (before capacity; f is a constant for the
//              gradient) and P_e the mean probability of e over the N tokens. 1 when balanced.
//   z loss     mean over the N tokens of logsumexp(logits)^2 (ST-MoE).
// The layer's loss term is aux_loss_coef * aux + z_loss_coef * z. Under expert parallelism every
// rank computes its share of each (a sum over its own tokens divided by N): the shares of the
// group add up to the loss over all N tokens, as under sequence parallelism.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/expert_layout.h"
#include "nn/linear.h"

namespace tessera::nn {

// How the chosen experts' gate weights come from the probabilities (see the top of this file).
enum class RouterNorm { auto_, softmax, softmax_topk };
const char* router_norm_name(RouterNorm norm);   // auto, softmax, softmax_topk
RouterNorm parse_router_norm(const std::string& name);  // throws naming the choices

struct RouterOptions {
  int top_k = 1;                 // 1 or 2
  float capacity_factor = 0.0f;  // 0: no token is dropped
  float aux_loss_coef = 0.01f;
  float z_loss_coef = 0.001f;
  float init_std = 0.02f;  // the router weight's
  RouterNorm norm = RouterNorm::auto_;
};

// What the whole expert-parallel group routed in one call. Every rank computes the same plan from
// the counts all ranks exchanged (MoeRouter::apply_capacity).
struct RoutePlan {
  int64_t tokens = 0;                 // N: token rows over the group
  int64_t capacity = 0;               // assignments one expert takes; 0: no limit
  std::vector<int64_t> first_choice;  // [E] tokens whose first choice is e
  std::vector<int64_t> routed;        // [E] assignments to e, every choice, before capacity
  std::vector<int64_t> kept;          // [E] after capacity
  int64_t dropped = 0;                // assignments over capacity (for k = 1: tokens)
  ExpertTraffic traffic;              // kept assignments per (rank, expert)
};

// This rank's shares (unweighted) of the two auxiliary losses.
struct RouterLosses {
  double aux = 0, z = 0;
};

class MoeRouter {
 public:
  // Per call, kept from forward for backward.
  struct Saved {
    Tensor probs;   // [N, E] softmax of the logits
    Tensor lse;     // [N] logsumexp of the logits
    Tensor expert;  // [N, k] i32: the chosen experts, best first
    Tensor gate;    // [N, k] gate weights
    Tensor kept;    // [N, k] i32: 1 within capacity, 0 dropped
    Tensor counts;  // [k E + 1] i32: this rank's assignments per (choice, expert), then its N
  };

  MoeRouter() = default;
  // Registers name.weight [E, C]. Throws tessera::Error for k outside {1, 2}, k > E, or a negative
  // capacity factor.
  MoeRouter(ParamStore& store, const std::string& name, int64_t channels, int64_t experts,
            const RouterOptions& options);
  Saved allocate(int64_t rows, Device device = Device::cpu) const;

  int64_t experts() const { return experts_; }
  int top_k() const { return options_.top_k; }
  const RouterOptions& options() const { return options_; }
  // Whether the gates are the chosen probabilities renormalised (softmax over the top-k logits).
  bool renormalises() const {
    return options_.norm == RouterNorm::softmax_topk || (options_.norm == RouterNorm::auto_ && options_.top_k == 2);
  }
  int64_t count_width() const { return options_.top_k * experts_ + 1; }  // Saved::counts' length
  // Per-expert capacity for `tokens` token rows over the group (0: no limit).
  int64_t capacity(int64_t tokens) const;

  // x [N, C] (the rows allocate() was sized for): probabilities, lse, choices, gates and counts.
  void forward(const Tensor& x, Saved& s) const;
  // all_counts [ranks, count_width()] i32: every rank's Saved::counts, in rank order (this rank's
  // at row `rank`). Fills the plan and this rank's kept flags.
  void apply_capacity(Saved& s, RoutePlan& plan, const Tensor& all_counts, int rank) const;
  RouterLosses losses(const Saved& s, const RoutePlan& plan) const;
  // dgate [N, k]: dL/dgate (0 where dropped). loss_scale: the weight of this layer's loss term
  // (aux_loss_coef aux + z_loss_coef z) in L. Adds dL/dW to the router weight's gradient and dL/dx
  // to dx [N, C]. dlogits [N, E] is workspace. With `defer` the weight's gradient is recorded
  // there (a copy of dlogits, x read when it runs: x must stay valid until then).
  void backward(Tensor& dx, Tensor& dlogits, const Tensor& dgate, const Tensor& x, const Saved& s,
                const RoutePlan& plan, float loss_scale, WeightGrads* defer = nullptr) const;

 private:
  RouterOptions options_;
  int64_t experts_ = 0;
  Linear linear_;
};

}  // namespace tessera::nn
