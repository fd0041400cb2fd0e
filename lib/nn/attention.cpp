// SelfAttention forward/backward: projections around the fused attention kernel.
#include "nn/attention.h"

#include "kernels/ops.h"

namespace tessera::nn {

namespace {
int64_t local_heads(int64_t channels, int64_t heads, const TensorLayout& layout) {
  TESSERA_CHECK(heads > 0 && channels % heads == 0, "hidden size ", channels, " is not divisible by ", heads,
                " heads");
  TESSERA_CHECK(heads % layout.size() == 0, "--heads ", heads, " is not divisible by --tp ", layout.size(),
                " (tensor parallelism splits the attention heads)");
  return heads / layout.size();
}
}  // namespace

SelfAttention::SelfAttention(ParamStore& store, const std::string& name, int64_t channels, int64_t heads,
                             float init_std, float proj_init_std, bool causal, const TensorLayout& layout,
                             SequenceLayout& sequence)
    : store_(&store), layout_(&layout), sequence_(&sequence), heads_(local_heads(channels, heads, layout)), causal_(causal) {
  qkv_ = Linear(store, name + ".qkv", channels, 3 * channels, {true, init_std, Split::columns, 3}, layout);
  proj_ = Linear(store, name + ".proj", channels, channels, {true, proj_init_std, Split::rows}, layout);
}

SelfAttention::Saved SelfAttention::allocate(int64_t batch, int64_t seq, Device device,
                                             const Saved* shared_core) const {
  const int64_t c = proj_.in_features();  // this rank's heads x head size
  Saved s = shared_core ? *shared_core : allocate_core(batch, seq, device);
  s.qkv = Tensor::empty({batch, seq, 3 * c}, DType::f32, device);
  return s;
}

SelfAttention::Saved SelfAttention::allocate_core(int64_t batch, int64_t seq, Device device) const {
  const int64_t c = proj_.in_features();
  return {Tensor(), Tensor::empty({batch, seq, c}, DType::f32, device),
          sequence_->allocate(batch, seq, heads_, c / heads_, device)};
}

void SelfAttention::recompute_core(Saved& s) const {
  sequence_->forward(s.att, s.qkv, heads_, causal_, s.core, store_->matmul_inputs());
}

void SelfAttention::forward(Tensor& y, const Tensor& x, Saved& s, RegionWorkspace& region) const {
  qkv_.forward(s.qkv, layout_->enter(x, region.in));
  sequence_->forward(s.att, s.qkv, heads_, causal_, s.core, store_->matmul_inputs());
  Tensor& out = layout_->whole(y, region);
  proj_.forward(out, s.att);
  layout_->exit(y, out);
}

void SelfAttention::backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& s,
                                   Tensor& dqkv, Tensor& datt, RegionWorkspace& region, WeightGrads* defer) const {
  proj_.backward(&datt, layout_->exit_backward(dy, region.out), s.att, false, defer);
  sequence_->backward(dqkv, datt, s.qkv, s.att, heads_, causal_, s.core, store_->matmul_inputs());
  Tensor& whole_dx = layout_->whole(dx, region);
  // Rows split: x gathered again, into the region's workspace (so a deferred W keeps a copy).
  qkv_.backward(&whole_dx, dqkv, layout_->enter(x, region.in), false, defer, !layout_->splits_rows());
  layout_->enter_backward(dx, whole_dx);
}

}  // namespace tessera::nn
