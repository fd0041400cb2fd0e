// CausalSelfAttention forward/backward: projections around the fused attention kernel.
#include "nn/attention.h"

#include "kernels/ops.h"

namespace tessera::nn {

CausalSelfAttention::CausalSelfAttention(ParamStore& store, const std::string& name, int64_t channels,
                                         int64_t heads, float init_std, float proj_init_std)
    : qkv_(store, name + ".qkv", channels, 3 * channels, true, init_std),
      proj_(store, name + ".proj", channels, channels, true, proj_init_std),
      heads_(heads) {
  TESSERA_CHECK(heads > 0 && channels % heads == 0, "hidden size ", channels, " is not divisible by ", heads,
                " heads");
}

CausalSelfAttention::Saved CausalSelfAttention::allocate(int64_t batch, int64_t seq, Device device) const {
  const int64_t c = proj_.out_features();
  return {Tensor::empty({batch, seq, 3 * c}, DType::f32, device), Tensor::empty({batch, seq, c}, DType::f32, device),
          Tensor::empty({batch, heads_, seq}, DType::f32, device)};
}

void CausalSelfAttention::forward(Tensor& y, const Tensor& x, Saved& s) const {
  qkv_.forward(s.qkv, x);
  ops::attention_forward(s.att, s.lse, s.qkv, heads_);
  proj_.forward(y, s.att);
}

void CausalSelfAttention::backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& s,
                                   Tensor& dqkv, Tensor& datt) const {
  proj_.backward(&datt, dy, s.att);
  ops::attention_backward(dqkv, datt, s.qkv, s.att, s.lse, heads_);
  qkv_.backward(&dx, dqkv, x);
}

}  // namespace tessera::nn
