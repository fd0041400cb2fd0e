// TransformerBlock (pre-LN): x + attn(ln1(x)), then + mlp(ln2(.)). Written once; GPT, ViT and MoE
// models share it: with BlockConfig::moe the feed-forward is a mixture of experts (nn/moe.h)
// whose experts live where the ExpertLayout says. Under a tensor-parallel layout the attention and the MLP are regions split over
// the group (nn/tensor_layout.h: their edges communicate); layer norms and the residual stream
// hold this rank's token rows: all of them (1D) or a share (rows split).
#pragma once
#include <string>

#include "nn/attention.h"
#include "nn/layer_norm.h"
#include "nn/mlp.h"
#include "nn/moe.h"

namespace tessera::nn {

struct BlockConfig {
  int64_t channels = 0, heads = 0, mlp_hidden = 0;
  float init_std = 0.02f, proj_init_std = 0.02f;
  bool causal = true;  // attention to earlier positions only (GPT); false: to every position (ViT)
  const MoeConfig* moe = nullptr;  // a mixture-of-experts feed-forward instead of the MLP
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
    MoeFeedForward::Saved moe;  // MoE blocks: routing, expert activations and statistics
  };
  // Workspace shared by all blocks.
  struct Scratch {
    Tensor d_c, d_att, d_qkv, d_hidden;
    RegionWorkspace region;
    MoeFeedForward::Scratch moe;  // allocated by MoE blocks
  };

  TransformerBlock() = default;
  TransformerBlock(ParamStore& store, const std::string& name, const BlockConfig& config,
                   const TensorLayout& layout = TensorLayout::single(),
                   SequenceLayout& sequence = SequenceLayout::single(),
                   const ExpertLayout& experts = ExpertLayout::single());
  bool is_moe() const { return config_.moe != nullptr; }
  Saved allocate(int64_t batch, int64_t seq, Device device) const;
  Scratch allocate_scratch(int64_t batch, int64_t seq, Device device) const;

  // x, y: the token rows this rank holds ([B x T, C], T: this rank's positions under sequence
  // parallelism; a share of the rows when the tensor layout splits them); y may not alias x.
  // Returns the MoE layer's auxiliary loss term (this rank's share; 0 for a dense block).
  float forward(Tensor& y, const Tensor& x, Saved& saved, Scratch& scratch) const;
  // dres holds dL/dy on entry and dL/dx on exit (the residual stream's gradient, updated in place).
  // With `defer` only the input gradient is computed now and every weight gradient is recorded
  // there (nn/weight_grads.h: zero-bubble pipelines run them later); x and saved must then stay
  // valid until it runs (dense blocks only). aux_loss_scale: the weight of forward's auxiliary
  // term in the loss (MoE blocks: the micro-batch's gradient scale).
  void backward(Tensor& dres, const Tensor& x, const Saved& saved, Scratch& scratch,
                WeightGrads* defer = nullptr, float aux_loss_scale = 0.0f) const;

 private:
  BlockConfig config_;
  const TensorLayout* layout_ = nullptr;
  LayerNorm ln1_, ln2_;
  SelfAttention attn_;
  Mlp mlp_;
  MoeFeedForward moe_;
};

}  // namespace tessera::nn
