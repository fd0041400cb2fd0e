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
                             SequenceLayout& sequence, const AttentionOptions& options)
    : options_(options),
      store_(&store),
      layout_(&layout),
      sequence_(&sequence),
      heads_(local_heads(channels, heads, layout)),
      head_dim_(channels / heads),
      causal_(causal) {
  // Parameters in the order q, k, v (or the fused qkv), then the output projection.
  const LinearOptions proj{!options.llama(), proj_init_std, Split::rows};
  if (!options.llama()) {
    qkv_ = Linear(store, name + ".qkv", channels, 3 * channels, {true, init_std, Split::columns, 3}, layout);
    proj_ = Linear(store, name + ".proj", channels, channels, proj, layout);
    return;
  }
  // Llama: the kv heads split over tp like the query heads where tp divides them; replicated
  // (every rank projects all of them, its gradients partial: summed over tp) where they divide tp.
  const int64_t kv = options.kv_heads > 0 ? options.kv_heads : heads, tp = layout.size();
  TESSERA_CHECK(heads % kv == 0, "--kv-heads ", kv, " does not divide --heads ", heads);
  TESSERA_CHECK(head_dim_ % 2 == 0, "rotary positions need an even head size: --hidden / --heads is ", head_dim_);
  // A grid layout (2D, 2.5D, 3D) splits the kv heads over its side q like the query heads: each
  // rank's block of K and V holds the kv heads its query heads read. Replicating them would need
  // every rank's K and V over all kv heads from its block of the features (not written).
  TESSERA_CHECK(!layout.splits_features() || kv % tp == 0, "--kv-heads ", kv, " is not divisible by the tensor-",
                "parallel grid's side ", tp, ": --tp-mode 2d, 2.5d and 3d split the kv heads over the grid's side",
                " (replicating them when there are fewer is --tp-mode 1d's)");
  TESSERA_CHECK(kv % tp == 0 || tp % kv == 0, "--kv-heads ", kv, " and --tp ", tp, ": tensor parallelism splits",
                " the kv heads (--tp divides --kv-heads) or replicates them (--kv-heads divides --tp)");
  group_ = heads / kv;
  const bool replicated = kv % tp != 0;
  kv_heads_ = replicated ? kv : kv / tp;
  first_kv_head_ = replicated ? 0 : layout.rank() * kv_heads_;
  const Split kv_split = replicated ? Split::none : Split::columns;
  const int64_t kv_features = kv * head_dim_;
  q_ = Linear(store, name + ".q", channels, channels, {false, init_std, Split::columns}, layout);
  k_ = Linear(store, name + ".k", channels, kv_features, {false, init_std, kv_split}, layout);
  v_ = Linear(store, name + ".v", channels, kv_features, {false, init_std, kv_split}, layout);
  proj_ = Linear(store, name + ".proj", channels, channels, proj, layout);
  if (replicated && tp > 1)
    for (const Linear* l : {&k_, &v_}) store.set_partial(l->weight_id(), PartialGrad::rows);
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

Tensor SelfAttention::allocate_projections(int64_t batch, int64_t seq, Device device) const {
  if (!options_.llama()) return Tensor();
  return Tensor::empty({batch * seq, (heads_ + 2 * kv_heads_) * head_dim_}, DType::f32, device);
}

SelfAttention::Projections SelfAttention::views(Tensor& projections, int64_t rows) const {
  const int64_t q = heads_ * head_dim_, kv = kv_heads_ * head_dim_;
  TESSERA_CHECK(projections.numel() >= rows * (q + 2 * kv), "SelfAttention: the projections' workspace is too small");
  return {projections.slice(0, {rows, q}), projections.slice(rows * q, {rows, kv}),
          projections.slice(rows * (q + kv), {rows, kv})};
}

// Positions: this rank's sequence shard starts at rank x its length (SequenceLayout), unless each
// row's own position is given (documents restart them; the zigzag layout holds two chunks), all
// below the layout's positions_end; heads: the query heads of this tp rank, and the kv heads its k
// and v hold.
ops::RopeShape SelfAttention::rope_shape(const Tensor& qkv, const DocumentMask& docs) const {
  ops::RopeShape r;
  r.batch = qkv.dim(0);
  r.seq = qkv.dim(1);
  r.heads = heads_;
  r.kv_heads = kv_heads_;
  r.head_dim = head_dim_;
  r.group = group_;
  r.first_head = layout_->rank() * heads_;
  r.first_kv_head = first_kv_head_;
  r.first_position = sequence_->rank() * r.seq;
  r.theta = options_.rope_theta;
  if (docs.positions.defined()) {  // the rotary table covers [0, positions_end)
    r.positions = docs.positions.data<int32_t>();
    r.first_position = sequence_->positions_end(r.seq * sequence_->size()) - r.seq;
  }
  return r;
}

void SelfAttention::recompute_core(Saved& s, const DocumentMask& docs) const {
  sequence_->forward(s.att, s.qkv, heads_, causal_, s.core, store_->matmul_inputs(), docs.segments);
}

void SelfAttention::forward(Tensor& y, const Tensor& x, Saved& s, RegionWorkspace& region, Tensor& projections,
                            const DocumentMask& docs) const {
  const Tensor& whole_x = layout_->enter(x, region.in);
  if (options_.llama()) {
    Projections p = views(projections, whole_x.numel() / whole_x.shape()[-1]);
    q_.forward(p.q, whole_x);
    k_.forward(p.k, whole_x);
    v_.forward(p.v, whole_x);
    ops::rope_pack_forward(s.qkv, p.q, p.k, p.v, rope_shape(s.qkv, docs));
  } else {
    qkv_.forward(s.qkv, whole_x);
  }
  sequence_->forward(s.att, s.qkv, heads_, causal_, s.core, store_->matmul_inputs(), docs.segments);
  Tensor& out = layout_->whole(y, region);
  proj_.forward(out, s.att);
  layout_->exit(y, out);
}

void SelfAttention::backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& s, Tensor& dqkv,
                             Tensor& datt, RegionWorkspace& region, Tensor& projections, WeightGrads* defer,
                             const DocumentMask& docs) const {
  proj_.backward(&datt, layout_->exit_backward(dy, region.out), s.att, false, defer);
  sequence_->backward(dqkv, datt, s.qkv, s.att, heads_, causal_, s.core, store_->matmul_inputs(), docs.segments);
  Tensor& whole_dx = layout_->whole(dx, region);
  // Rows split: x gathered again, into the region's workspace (so a deferred W keeps a copy).
  const Tensor& whole_x = layout_->enter(x, region.in);
  const bool x_outlives = !layout_->splits_rows();
  if (options_.llama()) {
    Projections d = views(projections, whole_x.numel() / whole_x.shape()[-1]);
    ops::rope_pack_backward(d.q, d.k, d.v, dqkv, rope_shape(s.qkv, docs));
    q_.backward(&whole_dx, d.q, whole_x, false, defer, x_outlives);
    k_.backward(&whole_dx, d.k, whole_x, true, defer, x_outlives);
    v_.backward(&whole_dx, d.v, whole_x, true, defer, x_outlives);
  } else {
    qkv_.backward(&whole_dx, dqkv, whole_x, false, defer, x_outlives);
  }
  layout_->enter_backward(dx, whole_dx);
}

}  // namespace tessera::nn
