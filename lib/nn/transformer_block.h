// TransformerBlock (pre-LN): x + attn(ln1(x)), then + mlp(ln2(.)). Written once; GPT, ViT, Llama and
// MoE models share it (Llama's: RMSNorm, rotary grouped-query attention, a SwiGLU MLP): with
// BlockConfig::moe the feed-forward is a mixture of experts (nn/moe.h) whose experts live where the
// ExpertLayout says, plus, with MoeConfig::shared_experts S, an always-on dense MLP of S x the
// experts' hidden size (name.moe.shared: SwiGLU for Llama, GELU for gpt2), replicated over ep and
// split over tp like the dense MLP. Under a tensor-parallel layout the attention and the MLP are regions split over
// the group (nn/tensor_layout.h: their edges communicate); layer norms and the residual stream
// hold this rank's token rows: all of them (1D) or a share (rows split).
#pragma once
#include <string>

#include "nn/attention.h"
#include "nn/layer_norm.h"
#include "nn/mlp.h"
#include "nn/moe.h"
#include "nn/swiglu_mlp.h"

namespace tessera::nn {

// Activation checkpointing: what a block's backward recomputes instead of keeping it from forward.
enum class Recompute {
  nothing,         // forward keeps every Saved tensor, per micro-batch
  attention_core,  // selective: the attention core's output and statistics (SelfAttention::Saved's
                   // att and core) are recomputed from the kept q, k, v
  forward,         // full: only the block's input is kept (by the caller); backward reruns forward
};

struct BlockConfig {
  int64_t channels = 0, heads = 0, mlp_hidden = 0;
  float init_std = 0.02f, proj_init_std = 0.02f;
  bool causal = true;  // attention to earlier positions only (GPT); false: to every position (ViT)
  NormKind norm = NormKind::layer;
  float norm_eps = 1e-5f;
  AttentionOptions attention = {};  // Llama's attention when it has a rope_theta
  bool swiglu = false;         // Llama's MLP (mlp_hidden: its hidden features)
  const MoeConfig* moe = nullptr;  // a mixture-of-experts feed-forward instead of the MLP
  Recompute recompute = Recompute::nothing;
};

class TransformerBlock {
 public:
  // Per micro-batch state kept from forward for backward.
  struct Saved {
    Tensor ln1, ln1_mean, ln1_rstd;
    SelfAttention::Saved attn;
    Tensor mid;  // x + attn(...)
    Tensor ln2, ln2_mean, ln2_rstd;
    Mlp::Saved mlp;
    SwiGluMlp::Saved swiglu;
    MoeFeedForward::Saved moe;  // MoE blocks: routing, expert activations and statistics
    Mlp::Saved shared_mlp;         // MoE blocks' shared experts (gpt2)
    SwiGluMlp::Saved shared_swiglu;  // MoE blocks' shared experts (llama)
  };
  // Workspace shared by all blocks.
  struct Scratch {
    Tensor d_c, d_att, d_qkv, d_hidden;
    RegionWorkspace region;
    MoeFeedForward::Scratch moe;  // allocated by MoE blocks
    Tensor d_up;         // SwiGLU blocks: the up projection's gradient
    Tensor projections;  // Llama attention: its q, k, v before packing (and their gradients)
    Tensor shared_dhidden, shared_dup;  // MoE blocks' shared experts: [N, S H / tp] (dup: SwiGLU's)
  };

  TransformerBlock() = default;
  TransformerBlock(ParamStore& store, const std::string& name, const BlockConfig& config,
                   const TensorLayout& layout = TensorLayout::single(),
                   SequenceLayout& sequence = SequenceLayout::single(),
                   const ExpertLayout& experts = ExpertLayout::single());
  bool is_moe() const { return config_.moe != nullptr; }
  bool has_shared_experts() const { return is_moe() && config_.moe->shared_experts > 0; }
  Recompute recompute() const { return config_.recompute; }
  // Per micro-batch: what forward keeps for backward. The parts the block recomputes are views of
  // `recomputed` (made by allocate_recomputed, shared by every micro-batch and by the model's
  // blocks of the same kind: forward writes them as workspace, backward recomputes them first).
  Saved allocate(int64_t batch, int64_t seq, Device device, const Saved& recomputed = {}) const;
  // The buffers backward recomputes into: a whole Saved (full), the attention core's (selective),
  // nothing (undefined tensors) when the block recomputes nothing.
  Saved allocate_recomputed(int64_t batch, int64_t seq, Device device) const;
  Scratch allocate_scratch(int64_t batch, int64_t seq, Device device) const;

  // x, y: the token rows this rank holds ([B x T, C], T: this rank's positions under sequence
  // parallelism; a share of the rows when the tensor layout splits them); y may not alias x.
  // Returns the MoE layer's auxiliary loss term (this rank's share; 0 for a dense block).
  // docs: the micro-batch's document mask (nn/sequence_layout.h; inactive: none), here and below.
  float forward(Tensor& y, const Tensor& x, Saved& saved, Scratch& scratch, const DocumentMask& docs = {}) const;
  // Before backward, a checkpointed block recomputes what forward did not keep, from its input x
  // (full: the whole forward, its output into scratch.d_c and thrown away; an MoE block
  // communicates over ep as in forward and routes alike, as x and the parameters are the same).
  // Nothing to do for a block that recomputes nothing.
  void recompute(const Tensor& x, Saved& saved, Scratch& scratch, const DocumentMask& docs = {}) const;
  // dres holds dL/dy on entry and dL/dx on exit (the residual stream's gradient, updated in place).
  // With `defer` only the input gradient is computed now and every weight gradient is recorded
  // there (nn/weight_grads.h: zero-bubble pipelines run them later); x and saved must then stay
  // valid until it runs (blocks that recompute nothing only: recomputed buffers are shared; an MoE
  // block's experts and router defer theirs too, nn/moe.h). aux_loss_scale: the weight of forward's
  // auxiliary term in the loss (MoE blocks: the micro-batch's gradient scale, deferred or not).
  void backward(Tensor& dres, const Tensor& x, const Saved& saved, Scratch& scratch,
                WeightGrads* defer = nullptr, float aux_loss_scale = 0.0f, const DocumentMask& docs = {}) const;

 private:
  // Every Saved tensor, the attention core's as views of shared_core when it is given.
  Saved allocate_kept(int64_t batch, int64_t seq, Device device, const SelfAttention::Saved* shared_core) const;

  BlockConfig config_;
  const TensorLayout* layout_ = nullptr;
  LayerNorm ln1_, ln2_;
  SelfAttention attn_;
  Mlp mlp_;
  SwiGluMlp swiglu_;
  MoeFeedForward moe_;
  Mlp shared_mlp_;          // shared experts (gpt2)
  SwiGluMlp shared_swiglu_;  // shared experts (llama)
};

}  // namespace tessera::nn
