// CausalSelfAttention: qkv projection, causal multi-head attention (tiled, online softmax), output
// projection. Under a tensor-parallel layout the heads are split: the QKV projection is
// column-split (each rank computes q, k and v of its heads; its backward all-reduces(tp) dx) and
// the output projection row-split (its forward all-reduces(tp) y). Under a sequence-parallel
// layout x holds this rank's positions and the attention core (SequenceLayout) communicates.
#pragma once
#include <string>

#include "nn/linear.h"
#include "nn/sequence_layout.h"

namespace tessera::nn {

class CausalSelfAttention {
 public:
  // What forward keeps for backward, for one micro-batch of B x T.
  struct Saved {
    Tensor qkv;           // [B, T, 3, H, D] of this rank's H heads (and T positions)
    Tensor att;           // [B, T, H, D], attention output before the projection
    AttentionSaved core;  // what the attention core keeps (lse, ...)
  };

  CausalSelfAttention() = default;
  CausalSelfAttention(ParamStore& store, const std::string& name, int64_t channels, int64_t heads,
                      float init_std, float proj_init_std, const TensorLayout& layout = TensorLayout::single(),
                      SequenceLayout& sequence = SequenceLayout::single());
  Saved allocate(int64_t batch, int64_t seq, Device device) const;

  void forward(Tensor& y, const Tensor& x, Saved& saved) const;  // x, y [B, T, C]
  // dx = d/dx (overwritten); dqkv_scratch and datt_scratch (the shapes of Saved's qkv and att) are
  // workspace.
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& saved, Tensor& dqkv_scratch,
                Tensor& datt_scratch) const;

 private:
  Linear qkv_, proj_;
  SequenceLayout* sequence_ = nullptr;
  int64_t heads_ = 0;  // on this rank
};

}  // namespace tessera::nn
