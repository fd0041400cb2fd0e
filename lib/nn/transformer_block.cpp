// TransformerBlock forward/backward along the residual stream.
#include "nn/transformer_block.h"

#include "kernels/ops.h"

namespace tessera::nn {

TransformerBlock::TransformerBlock(ParamStore& store, const std::string& name, const BlockConfig& c,
                                   const TensorLayout& layout, SequenceLayout& sequence, const ExpertLayout& experts)
    : config_(c),
      layout_(&layout),
      ln1_(store, name + ".ln1", c.channels, layout, c.norm_eps, c.norm),
      ln2_(store, name + ".ln2", c.channels, layout, c.norm_eps, c.norm) {
  attn_ = SelfAttention(store, name + ".attn", c.channels, c.heads, c.init_std, c.proj_init_std, c.causal, layout,
                        sequence, c.attention);
  if (c.moe) {
    TESSERA_CHECK(!layout.splits_features(), "a mixture-of-experts block routes whole token rows: not under",
                  " --tp-mode 2d, 2.5d or 3d (use --tp-mode 1d)");
    TESSERA_CHECK(!layout.splits_rows() || (experts.shard_size() == layout.size() && !experts.shards_each_sequence()),
                  "a mixture-of-experts block under --sp-mode split_gather needs the tp group as its experts'",
                  " token shards (parallel/expert_parallel.h)");
    moe_ = MoeFeedForward(store, name + ".moe", *c.moe, experts);
    // split_gather: each tp rank routes its share of the rows (a token shard), so the router's and
    // the experts' gradients cover its rows only and are summed over the tp group, like the norms'.
    if (layout.splits_rows()) {
      store.set_partial(moe_.router_param_id(), PartialGrad::rows);
      for (int id : moe_.expert_param_ids()) store.set_partial(id, PartialGrad::rows);
    }
    if (c.moe->shared_experts > 0) {
      const int64_t shared = c.moe->shared_experts * c.moe->hidden;
      TESSERA_CHECK(shared % layout.size() == 0, "--shared-experts ", c.moe->shared_experts, " x --expert-hidden ",
                    c.moe->hidden, " = ", shared, " is not divisible by --tp ", layout.size(),
                    " (tensor parallelism splits the shared experts' hidden features)");
      if (c.moe->swiglu) {
        shared_swiglu_ = SwiGluMlp(store, name + ".moe.shared", c.channels, shared, c.moe->init_std,
                                   c.moe->proj_init_std, layout);
      } else {
        shared_mlp_ = Mlp(store, name + ".moe.shared", c.channels, shared, c.moe->init_std, c.moe->proj_init_std,
                          layout);
      }
    }
  } else if (c.swiglu) {
    swiglu_ = SwiGluMlp(store, name + ".mlp", c.channels, c.mlp_hidden, c.init_std, c.proj_init_std, layout);
  } else {
    mlp_ = Mlp(store, name + ".mlp", c.channels, c.mlp_hidden, c.init_std, c.proj_init_std, layout);
  }
}

TransformerBlock::Saved TransformerBlock::allocate(int64_t batch, int64_t seq, Device device,
                                                   const Saved& recomputed) const {
  switch (config_.recompute) {
    case Recompute::forward:
      TESSERA_CHECK(recomputed.mid.defined(), "a fully checkpointed block needs its recomputed buffers");
      return recomputed;  // views: nothing of its own
    case Recompute::attention_core:
      TESSERA_CHECK(recomputed.attn.att.defined(), "a selectively checkpointed block needs its recomputed buffers");
      return allocate_kept(batch, seq, device, &recomputed.attn);
    case Recompute::nothing:
      break;
  }
  return allocate_kept(batch, seq, device, nullptr);
}

TransformerBlock::Saved TransformerBlock::allocate_recomputed(int64_t batch, int64_t seq, Device device) const {
  Saved s;
  if (config_.recompute == Recompute::forward) s = allocate_kept(batch, seq, device, nullptr);
  if (config_.recompute == Recompute::attention_core) s.attn = attn_.allocate_core(batch, seq, device);
  return s;
}

TransformerBlock::Saved TransformerBlock::allocate_kept(int64_t batch, int64_t seq, Device device,
                                                        const SelfAttention::Saved* shared_core) const {
  const int64_t rows = layout_->local_rows(batch * seq), c = layout_->local_features(config_.channels);
  auto act = [&](Shape s) { return Tensor::empty(std::move(s), DType::f32, device); };
  Saved s;
  s.ln1 = act({rows, c});
  s.ln1_mean = act({rows});
  s.ln1_rstd = act({rows});
  s.attn = attn_.allocate(batch, seq, device, shared_core);
  s.mid = act({rows, c});
  s.ln2 = act({rows, c});
  s.ln2_mean = act({rows});
  s.ln2_rstd = act({rows});
  if (is_moe()) {
    s.moe = moe_.allocate(rows, device, batch);
    if (has_shared_experts() && config_.moe->swiglu) s.shared_swiglu = shared_swiglu_.allocate(batch * seq, device);
    if (has_shared_experts() && !config_.moe->swiglu) s.shared_mlp = shared_mlp_.allocate(batch * seq, device);
  } else if (config_.swiglu) {
    s.swiglu = swiglu_.allocate(batch * seq, device);
  } else {
    s.mlp = mlp_.allocate(batch * seq, device);
  }
  return s;
}

TransformerBlock::Scratch TransformerBlock::allocate_scratch(int64_t batch, int64_t seq, Device device) const {
  const int64_t n = batch * seq, c = config_.channels, tp = layout_->size();
  auto act = [&](Shape s) { return Tensor::empty(std::move(s), DType::f32, device); };
  Scratch w{act({layout_->local_rows(n), layout_->local_features(c)}), act({batch, seq, c / tp}), act({batch, seq, 3 * c / tp}),
            act({n, config_.mlp_hidden / tp}), layout_->workspace(n, c, device), {}, {}, {}, {}, {}};
  if (is_moe()) w.moe = moe_.allocate_scratch(layout_->local_rows(n), device);
  if (has_shared_experts()) {
    const int64_t shared = config_.moe->shared_experts * config_.moe->hidden / tp;
    w.shared_dhidden = act({n, shared});
    if (config_.moe->swiglu) w.shared_dup = act({n, shared});
  }
  if (config_.swiglu) w.d_up = act({n, config_.mlp_hidden / tp});
  w.projections = attn_.allocate_projections(batch, seq, device);
  return w;
}

float TransformerBlock::forward(Tensor& y, const Tensor& x, Saved& s, Scratch& w, const DocumentMask& docs) const {
  ln1_.forward(s.ln1, s.ln1_mean, s.ln1_rstd, x);
  attn_.forward(y, s.ln1, s.attn, w.region, w.projections, docs);  // y as a temporary for the attention branch
  ln2_.add_forward(s.mid, s.ln2, s.ln2_mean, s.ln2_rstd, x, y);  // the residual, then its norm
  float aux = 0.0f;
  if (is_moe()) {
    // Shared experts first, into y; the routed experts' output is added to it.
    if (has_shared_experts() && config_.moe->swiglu) shared_swiglu_.forward(y, s.ln2, s.shared_swiglu, w.region);
    if (has_shared_experts() && !config_.moe->swiglu) shared_mlp_.forward(y, s.ln2, s.shared_mlp, w.region);
    aux = moe_.forward(y, s.ln2, s.moe, w.moe, /*accumulate=*/has_shared_experts());
  } else if (config_.swiglu) {
    swiglu_.forward(y, s.ln2, s.swiglu, w.region);
  } else {
    mlp_.forward(y, s.ln2, s.mlp, w.region);
  }
  ops::add_inplace(y, s.mid);
  return aux;
}

void TransformerBlock::recompute(const Tensor& x, Saved& s, Scratch& w, const DocumentMask& docs) const {
  switch (config_.recompute) {
    case Recompute::forward:
      forward(w.d_c, x, s, w, docs);  // the output is the next block's input, which is kept
      break;
    case Recompute::attention_core:
      attn_.recompute_core(s.attn, docs);
      break;
    case Recompute::nothing:
      break;
  }
}

void TransformerBlock::backward(Tensor& dres, const Tensor& x, const Saved& s, Scratch& w, WeightGrads* defer,
                                float aux_loss_scale, const DocumentMask& docs) const {
  TESSERA_CHECK(!defer || config_.recompute == Recompute::nothing, "a checkpointed block's weight gradients cannot",
                " be deferred (zero-bubble): its recomputed activations are shared until its backward ends");
  // MLP branch: dres = dL/dy = dL/dmid (identity path) + the branch through ln2.
  if (is_moe()) {
    TESSERA_CHECK(aux_loss_scale > 0.0f, "MoE block backward needs the auxiliary loss's scale");
    if (has_shared_experts() && config_.moe->swiglu)
      shared_swiglu_.backward(w.d_c, dres, s.ln2, s.shared_swiglu, w.shared_dhidden, w.shared_dup, w.region, defer);
    if (has_shared_experts() && !config_.moe->swiglu)
      shared_mlp_.backward(w.d_c, dres, s.ln2, s.shared_mlp, w.shared_dhidden, w.region, defer);
    // With defer: the experts' and the router's weight gradients recorded (s.ln2 and s.moe kept).
    moe_.backward(w.d_c, dres, s.ln2, s.moe, w.moe, aux_loss_scale, /*accumulate=*/has_shared_experts(), defer);
  } else if (config_.swiglu) {
    swiglu_.backward(w.d_c, dres, s.ln2, s.swiglu, w.d_hidden, w.d_up, w.region, defer);
  } else {
    mlp_.backward(w.d_c, dres, s.ln2, s.mlp, w.d_hidden, w.region, defer);
  }
  ln2_.backward(dres, w.d_c, s.mid, s.ln2_mean, s.ln2_rstd, defer);
  // Attention branch: dres now dL/dmid.
  attn_.backward(w.d_c, dres, s.ln1, s.attn, w.d_qkv, w.d_att, w.region, w.projections, defer, docs);
  ln1_.backward(dres, w.d_c, x, s.ln1_mean, s.ln1_rstd, defer);
}

}  // namespace tessera::nn
