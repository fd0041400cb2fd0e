// TransformerBlock forward/backward along the residual stream.
#include "nn/transformer_block.h"

#include "kernels/ops.h"

namespace tessera::nn {

TransformerBlock::TransformerBlock(ParamStore& store, const std::string& name, const BlockConfig& c,
                                   const TensorLayout& layout, SequenceLayout& sequence)
    : config_(c),
      tp_(layout.size()),
      ln1_(store, name + ".ln1", c.channels),
      ln2_(store, name + ".ln2", c.channels),
      attn_(store, name + ".attn", c.channels, c.heads, c.init_std, c.proj_init_std, layout, sequence),
      mlp_(store, name + ".mlp", c.channels, c.mlp_hidden, c.init_std, c.proj_init_std, layout) {}

TransformerBlock::Saved TransformerBlock::allocate(int64_t batch, int64_t seq, Device device) const {
  const int64_t n = batch * seq, c = config_.channels;
  auto act = [&](Shape s) { return Tensor::empty(std::move(s), DType::f32, device); };
  Saved s;
  s.ln1 = act({batch, seq, c});
  s.ln1_mean = act({n});
  s.ln1_rstd = act({n});
  s.attn = attn_.allocate(batch, seq, device);
  s.mid = act({batch, seq, c});
  s.ln2 = act({batch, seq, c});
  s.ln2_mean = act({n});
  s.ln2_rstd = act({n});
  s.mlp = mlp_.allocate(n, device);
  return s;
}

TransformerBlock::Scratch TransformerBlock::allocate_scratch(int64_t batch, int64_t seq, Device device) const {
  const int64_t c = config_.channels;
  auto act = [&](Shape s) { return Tensor::empty(std::move(s), DType::f32, device); };
  return {act({batch, seq, c}), act({batch, seq, c / tp_}), act({batch, seq, 3 * c / tp_}),
          act({batch * seq, config_.mlp_hidden / tp_})};
}

void TransformerBlock::forward(Tensor& y, const Tensor& x, Saved& s) const {
  ln1_.forward(s.ln1, s.ln1_mean, s.ln1_rstd, x);
  attn_.forward(y, s.ln1, s.attn);  // y as a temporary for the attention branch
  ops::add(s.mid, x, y);
  ln2_.forward(s.ln2, s.ln2_mean, s.ln2_rstd, s.mid);
  mlp_.forward(y, s.ln2, s.mlp);
  ops::add_inplace(y, s.mid);
}

void TransformerBlock::backward(Tensor& dres, const Tensor& x, const Saved& s, Scratch& w) const {
  // MLP branch: dres = dL/dy = dL/dmid (identity path) + the branch through ln2.
  mlp_.backward(w.d_c, dres, s.ln2, s.mlp, w.d_hidden);
  ln2_.backward(dres, w.d_c, s.mid, s.ln2_mean, s.ln2_rstd);
  // Attention branch: dres now dL/dmid.
  attn_.backward(w.d_c, dres, s.ln1, s.attn, w.d_qkv, w.d_att);
  ln1_.backward(dres, w.d_c, x, s.ln1_mean, s.ln1_rstd);
}

}  // namespace tessera::nn
