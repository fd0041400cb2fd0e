// CausalSelfAttention: qkv projection, causal multi-head attention (tiled, online softmax), output
// projection. Local module: all heads on this rank.
#pragma once
#include <string>

#include "nn/linear.h"

namespace tessera::nn {

class CausalSelfAttention {
 public:
  // What forward keeps for backward, for one micro-batch of B x T.
  struct Saved {
    Tensor qkv;   // [B, T, 3C]
    Tensor att;   // [B, T, C], attention output before the projection
    Tensor lse;   // [B, H, T]
  };

  CausalSelfAttention() = default;
  CausalSelfAttention(ParamStore& store, const std::string& name, int64_t channels, int64_t heads,
                      float init_std, float proj_init_std);
  Saved allocate(int64_t batch, int64_t seq, Device device) const;

  void forward(Tensor& y, const Tensor& x, Saved& saved) const;  // x, y [B, T, C]
  // dx = d/dx (overwritten); dqkv_scratch [B, T, 3C] and datt_scratch [B, T, C] are workspace.
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& saved, Tensor& dqkv_scratch,
                Tensor& datt_scratch) const;

 private:
  Linear qkv_, proj_;
  int64_t heads_ = 0;
};

}  // namespace tessera::nn
