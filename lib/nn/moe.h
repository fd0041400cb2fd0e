// MoeFeedForward: a mixture-of-experts feed-forward layer, the drop-in for a block's Mlp. A router
// (nn/moe_router.h) sends each token row to its top-k of E experts; each expert is an MLP
// C -> H -> C, GELU (tanh) with biases (gpt2), or SwiGLU without biases (MoeConfig::swiglu, Llama /
// Mixtral: down(silu(gate(x)) * up(x)), Mixtral's w1 = gate, w3 = up, w2 = down); the output is sum
// over the token's kept choices of gate * expert(x), added to y or overwriting it. A token dropped
// by every choice gets 0 (the block's residual carries it).
//
// Parameters, stacked over experts in the Linear layout (weight [out, in]):
//   name.router.weight        [E, C]      replicated
//   GELU experts:   name.experts.fc.weight    [E, H, C]   name.experts.fc.bias    [E, H]
//                   name.experts.proj.weight  [E, C, H]   name.experts.proj.bias  [E, C]
//   SwiGLU experts: name.experts.gate.weight  [E, H, C]   name.experts.up.weight  [E, H, C]
//                   name.experts.down.weight  [E, C, H]
// The expert tensors are split along dim 0 over the expert-parallel ranks (this rank's E / ep
// experts; Shard{0, first local expert, E / ep, parts = ep}), so a checkpoint holds every expert
// under its global index and loads at any ep.
//
// One call: route (this rank's rows), exchange routing counts over the ep group, decide capacity,
// pack the kept rows by expert, dispatch them to the experts' ranks, run each local expert on its
// rows, combine the results back, weight by the gates. Backward runs the same path in reverse
// (dispatch the gated dy, experts backward, combine dx) and adds the router's gradient. The
// communication is the layout's (nn/expert_layout.h; parallel/expert_parallel.h).
//
// Under expert parallelism each ep rank routes different token rows: the group's rows together
// are what the one-rank layer sees in one call (capacity and the aux loss are over all of them),
// and the results equal the one-rank layer's on them. After backward the router's gradient (like
// every non-expert parameter's) covers this rank's tokens only: sum it over dp x ep (x sp). The
// experts' gradients are complete over the ep group: sum them over the ranks holding the same
// experts only (dp x sp, the mesh's data group), never over ep.
#pragma once
#include <string>
#include <vector>

#include "nn/expert_layout.h"
#include "nn/moe_router.h"

namespace tessera::nn {

struct MoeConfig {
  int64_t channels = 0, hidden = 0, experts = 0;
  RouterOptions router;
  float init_std = 0.02f, proj_init_std = 0.02f;  // expert fc (gate, up) and proj (down) weights (biases start at 0)
  bool swiglu = false;                             // SwiGLU experts (Llama) instead of GELU MLPs
  // Always-on experts beside the routed ones (DeepSeekMoE): the block adds a dense MLP of
  // shared_experts x hidden features (one MLP, equal to that many experts summed) to the layer's
  // output (nn/transformer_block.h). The layer itself does not use it.
  int64_t shared_experts = 0;
};

// What one call routed, over the whole ep group (the same on every rank), and this rank's loss.
struct MoeStats {
  int64_t tokens = 0;               // token rows over the group
  int64_t capacity = 0;             // per expert; 0: no limit
  int64_t dropped = 0;              // (token, choice) assignments over capacity
  std::vector<int64_t> routed;      // [E] assignments per expert before capacity
  std::vector<int64_t> kept;        // [E] after capacity: the expert's load
  double aux_loss = 0, z_loss = 0;  // this rank's shares, unweighted (moe_router.h)
  double max_load() const;          // max_e kept / mean_e kept (1: balanced)
};

class MoeFeedForward {
 public:
  // Per call, kept from forward for backward (sized at allocate()).
  struct Saved {
    MoeRouter::Saved router;
    RoutePlan plan;
    Tensor all_counts;  // [ep, k E + 1] i32: every rank's routing counts
    Tensor slot;        // [N, k] i32: the assignment's row in the packed rows (-1: dropped)
    Tensor expert_in;   // [R_max, C] rows this rank's experts received, by local expert
    Tensor fc;          // [R_max, H] pre-activation (SwiGLU: the gate projection)
    Tensor up;          // [R_max, H] SwiGLU: the up projection (undefined for GELU experts)
    Tensor gelu;        // [R_max, H] the activation: down's (proj's) input
    Tensor returned;    // [N k, C] each kept assignment's expert output, back home, packed
    MoeStats stats;
  };
  // Workspace shared by the calls (and by the MoE layers of a model).
  struct Scratch {
    Tensor packed;   // [N k, C] rows to dispatch / gradients combined back
    Tensor rows_a;   // [R_max, C] expert outputs; backward: their gradients
    Tensor rows_b;   // [R_max, C] backward: gradients of the expert inputs
    Tensor dhidden;  // [R_max, H]
    Tensor dup;      // [R_max, H] SwiGLU: the up projection's gradient
    Tensor dgate;    // [N, k]
    Tensor dlogits;  // [N, E]
    Tensor staging;  // the layout's
  };

  MoeFeedForward() = default;
  // name: e.g. "blocks.3.moe". Throws tessera::Error on a bad config, or experts that do not
  // split over the layout's ranks (naming both numbers).
  MoeFeedForward(ParamStore& store, const std::string& name, const MoeConfig& config,
                 const ExpertLayout& layout = ExpertLayout::single());

  // rows: the token rows this rank routes in each call (every rank of the ep group should
  // allocate the same). The expert buffers are sized for the most rows this rank's experts can
  // receive: ep x rows x k, or with a capacity (E / ep) x capacity(ep x rows), whichever is less.
  Saved allocate(int64_t rows, Device device = Device::cpu) const;
  Scratch allocate_scratch(int64_t rows, Device device = Device::cpu) const;

  // x, y [N, C] (N = the rows allocated), y overwritten (with `accumulate`: added to). Returns this rank's share of the layer's
  // loss term, aux_loss_coef * aux + z_loss_coef * z, for the model to add to its loss;
  // saved.stats holds the rest. Collective over the ep group.
  float forward(Tensor& y, const Tensor& x, Saved& saved, Scratch& scratch, bool accumulate = false) const;
  // dx [N, C] overwritten with dL/dx (with `accumulate`: dL/dx added to it); parameter gradients accumulate. dy = dL/dy; loss_scale: the
  // weight of the returned loss term in L (the model's grad_scale / tokens normalisation, as for
  // its main loss). Collective over the ep group.
  // With `defer` (zero-bubble B), dx alone is computed now, through the experts and the router,
  // with both all-to-alls (dx needs them); the experts' and the router's weight gradients are
  // recorded there for W, which communicates nothing. W keeps, per call: the expert outputs'
  // gradients [R, C], their hidden gradients [R, H] (SwiGLU: the gate's and the up projection's,
  // 2 x [R, H]), in buffers of R_max rows (allocate()'s), and the router logits' gradient [N, E]
  // (the gates' and both auxiliary losses' parts); it reads the expert inputs and activations and
  // x from `saved` and x, which must stay valid until it runs. Its products are the ones backward
  // computes without `defer`, on the same operands, accumulated in the same order of micro-batches:
  // the gradients are bitwise the same.
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& saved, Scratch& scratch,
                float loss_scale, bool accumulate = false, WeightGrads* defer = nullptr) const;

  const MoeConfig& config() const { return config_; }
  int64_t local_experts() const { return local_experts_; }
  int64_t first_local_expert() const { return first_expert_; }
  const MoeRouter& router() const { return router_; }
  // The expert parameters' ids (their gradients are complete over the ep group after backward:
  // reduce them over the ranks with the same experts, not over ep).
  std::vector<int> expert_param_ids() const;
  int router_param_id() const { return store_->find(router_name_); }

 private:
  int64_t max_received(int64_t rows) const;
  void run_experts(Tensor& out, const Saved& s, int64_t received) const;
  // dinput from dout through the local experts; their weight gradients added now, or (defer)
  // their operands kept and experts_backward_weights recorded.
  void experts_backward(Tensor& dinput, Tensor& dout, const Saved& s, Scratch& scratch, WeightGrads* defer) const;
  // The experts' weight gradients from their outputs' gradients dout [R, C] and their hidden
  // gradients dhidden (and dup, SwiGLU) [R, H], with the inputs and activations s kept.
  void experts_backward_weights(const Tensor& dout, const Tensor& dhidden, const Tensor& dup, const Saved& s) const;

  MoeConfig config_;
  ParamStore* store_ = nullptr;
  const ExpertLayout* layout_ = nullptr;
  std::string router_name_;
  MoeRouter router_;
  int64_t local_experts_ = 0, first_expert_ = 0;
  // GELU: fc, proj and their biases; SwiGLU: fc is gate, proj is down, up_weight_ the up
  // projection, no biases (-1).
  int fc_weight_ = -1, fc_bias_ = -1, proj_weight_ = -1, proj_bias_ = -1, up_weight_ = -1;
};

}  // namespace tessera::nn
