// SelfAttention: qkv projection, multi-head attention (tiled, online softmax; causal for language
// models, over every position for ViT), output projection. Under a tensor-parallel layout the heads are split: the QKV projection is
// column-split (each rank computes q, k and v of its heads) and the output projection row-split:
// one tensor-parallel region, with the layout's communication at its edges. Under a sequence-parallel
// layout x holds this rank's positions and the attention core (SequenceLayout) communicates.
#pragma once
#include <string>

#include "nn/linear.h"
#include "nn/sequence_layout.h"

namespace tessera::nn {

class SelfAttention {
 public:
  // What forward keeps for backward, for one micro-batch of B x T.
  struct Saved {
    Tensor qkv;           // [B, T, 3, H, D] of this rank's H heads (and T positions)
    Tensor att;           // [B, T, H, D], attention output before the projection
    AttentionSaved core;  // what the attention core keeps (lse, ...)
  };

  SelfAttention() = default;
  SelfAttention(ParamStore& store, const std::string& name, int64_t channels, int64_t heads, float init_std,
                float proj_init_std, bool causal = true, const TensorLayout& layout = TensorLayout::single(),
                SequenceLayout& sequence = SequenceLayout::single());
  // shared_core: when given, att and core are views of its tensors (selective activation
  // checkpointing: every micro-batch and block writes them into one set, and backward recomputes
  // them first).
  Saved allocate(int64_t batch, int64_t seq, Device device, const Saved* shared_core = nullptr) const;
  Saved allocate_core(int64_t batch, int64_t seq, Device device) const;  // att and core only
  // att and core again from the kept qkv: the attention core's forward (communicating over sp as
  // forward does).
  void recompute_core(Saved& saved) const;

  // x, y: the token rows this rank holds ([B, T, C], or a share of the rows when the layout splits
  // them); region: the layout's workspace.
  void forward(Tensor& y, const Tensor& x, Saved& saved, RegionWorkspace& region) const;
  // dx = d/dx (overwritten); dqkv_scratch and datt_scratch (the shapes of Saved's qkv and att) are
  // workspace. With `defer`, the weight gradients are recorded there instead (nn/weight_grads.h).
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& saved, Tensor& dqkv_scratch,
                Tensor& datt_scratch, RegionWorkspace& region, WeightGrads* defer = nullptr) const;

 private:
  Linear qkv_, proj_;
  ParamStore* store_ = nullptr;  // its precision is the attention core's (ParamStore::matmul_inputs)
  const TensorLayout* layout_ = nullptr;
  SequenceLayout* sequence_ = nullptr;
  int64_t heads_ = 0;  // on this rank
  bool causal_ = true;
};

}  // namespace tessera::nn
