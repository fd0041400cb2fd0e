// Vit: construction (parameters, activations) and the forward/backward of one micro-batch.
#include "models/vit/vit.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "core/allocator.h"
#include "models/whole_model.h"

namespace tessera::models {

void VitConfig::validate(int tp) const {
  TESSERA_CHECK(image >= 1, "the image size must be at least 1, got ", image);
  TESSERA_CHECK(channels >= 1, "image channels must be at least 1, got ", channels);
  TESSERA_CHECK(patch >= 1, "--patch must be at least 1, got ", patch);
  TESSERA_CHECK(image % patch == 0, "--patch ", patch, " does not divide the image size ", image);
  TESSERA_CHECK(layers >= 1, "--layers must be at least 1, got ", layers);
  TESSERA_CHECK(hidden >= 1, "--hidden must be at least 1, got ", hidden);
  TESSERA_CHECK(heads >= 1, "--heads must be at least 1, got ", heads);
  TESSERA_CHECK(hidden % heads == 0, "--hidden ", hidden, " is not divisible by --heads ", heads);
  TESSERA_CHECK(mlp_ratio >= 1, "--mlp-ratio must be at least 1, got ", mlp_ratio);
  TESSERA_CHECK(classes >= 2, "the number of classes must be at least 2, got ", classes);
  TESSERA_CHECK(pool == "cls" || pool == "mean", "--pool must be cls or mean, got '", pool, "'");
  TESSERA_CHECK(label_smoothing >= 0.0f && label_smoothing < 1.0f, "--label-smoothing must be in [0, 1), got ",
                label_smoothing);
  TESSERA_CHECK(heads % tp == 0, "--heads ", heads, " is not divisible by --tp ", tp,
                " (tensor parallelism splits the attention heads)");
}

namespace {

// This rank's share of an image's tokens under sequence parallelism.
int64_t local_tokens(const VitConfig& config, const nn::SequenceLayout& sequence) {
  const int64_t t = config.tokens(), sp = sequence.size();
  TESSERA_CHECK(t % sp == 0, "vit: --sp ", sp, " does not divide the ", t, " tokens of an image (", config.patches(),
                " patches", config.pool == "cls" ? " + the class token; --pool mean has no class token" : "",
                "): sequence parallelism gives each rank an equal share of the tokens");
  return t / sp;
}

}  // namespace

Vit::Modules Vit::register_modules(const VitConfig& config, const ModelLayout& layout,
                                   const std::vector<ModelChunk>& chunks, nn::ParamStore& store) {
  const ActivationCheckpointing& ckpt = layout.checkpointing;
  const bool first_stage = chunks.front().embedding, last_stage = chunks.back().head;
  const int64_t c = config.hidden;
  const float std = 0.02f, proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config.layers));
  nn::BlockConfig block{c, config.heads, config.mlp_ratio * c, std, proj_std, /*causal=*/false};
  const nn::TensorLayout& tensor = *layout.tensor;
  Modules m;
  // Replicated over 1D tp (a grid splits them like the stream's features): the patch embedding,
  // class token and positions ...
  if (first_stage) {
    m.embed_unit = m.unit_first_param.size();
    m.unit_first_param.push_back(store.size());
    nn::LinearOptions edge{true, std, nn::Split::columns, 1, /*stream_edge=*/true};
    m.patch_proj = nn::Linear(store, "patch.proj", config.patch_features(), c, edge, tensor);
    auto add_features = [&](const char* name, Shape shape, int dim) {
      const int id = store.add(name, std::move(shape), nn::Init::Normal(std), false,
                               tensor.feature_split(dim, c, 1, false, name));
      if (tensor.splits_features()) store.set_partial(id, nn::PartialGrad::rows);
      return id;
    };
    m.cls = config.pool == "cls" ? add_features("cls_token", {c}, 0) : -1;
    m.pos = add_features("pos.weight", {config.tokens(), c}, 1);
  }
  // ... the blocks, split over tp ...
  m.block_unit_base = m.unit_first_param.size();
  for (const ModelChunk& ch : chunks)
    for (int64_t i = ch.first_block; i < ch.end_block; ++i) {
      m.unit_first_param.push_back(store.size());
      block.recompute = ckpt.of_block(i);
      m.blocks.push_back(nn::TransformerBlock(store, "blocks." + std::to_string(i), block, tensor, *layout.sequence));
    }
  // ... and the final norm and classifier head, replicated again (split over a grid's feature
  // ranks: the head's partial logits are summed).
  if (last_stage) {
    m.head_unit = m.unit_first_param.size();
    m.unit_first_param.push_back(store.size());
    m.ln_f = nn::LayerNorm(store, "ln_f", c, tensor);
    nn::LinearOptions edge{true, std, nn::Split::rows, 1, /*stream_edge=*/true};
    m.head = nn::Linear(store, "head", c, config.classes, edge, tensor);
  }
  return m;
}

Vit::StageParams Vit::stage_params(const VitConfig& config, const ModelLayout& layout) {
  config.validate(layout.tensor->size());
  StageParams p;
  p.unit_first_param = register_modules(config, layout, model_chunks(config.layers, layout.pipeline), p.store)
                           .unit_first_param;
  return p;
}

Vit::Vit(const VitConfig& config, Device device, uint64_t seed, int64_t micro_batch, const ModelLayout& layout)
    : config_(config),
      device_(device),
      batch_(micro_batch),
      tokens_(config.tokens()),
      local_tokens_(local_tokens(config, *layout.sequence)),
      first_token_(layout.sequence->rank() * local_tokens_),
      features_(layout.tensor->local_features(config.hidden)),
      token_share_(layout.tensor->batch_parts()),
      tensor_(layout.tensor),
      sequence_(layout.sequence),
      slots_(static_cast<size_t>(std::max(layout.pipeline.chunks, 1)),
             [this](int chunk) { return allocate_activations(chunk); }),
      activation_rounding_(layout.activations) {
  config.validate(layout.tensor->size());
  TESSERA_CHECK(!layout.tensor->splits_rows(), "vit: --sp-mode split_gather is not supported for ViT (use --sp)");
  const ActivationCheckpointing& ckpt = layout.checkpointing;
  TESSERA_CHECK(ckpt.every >= 1 && (!ckpt.enabled() || ckpt.every <= config.layers), "--recompute-every-k-blocks ",
                ckpt.every, " must be in [1, --layers ", config.layers, "]");
  TESSERA_CHECK(micro_batch >= 1, "vit: the micro-batch must be at least 1, got ", micro_batch);
  chunks_ = model_chunks(config.layers, layout.pipeline);
  const bool first_stage = chunks_.front().embedding, last_stage = chunks_.back().head;

  Modules m = register_modules(config, layout, chunks_, store_);
  patch_proj_ = std::move(m.patch_proj);
  cls_ = m.cls;
  pos_ = m.pos;
  blocks_ = std::move(m.blocks);
  ln_f_ = std::move(m.ln_f);
  head_ = std::move(m.head);
  embed_unit_ = m.embed_unit;
  block_unit_base_ = m.block_unit_base;
  head_unit_ = m.head_unit;
  units_ = std::make_unique<parallel::ParamUnits>(store_, m.unit_first_param, device, seed, layout.zero3,
                                                  layout.offload_params, layout.zero3_overlap);
  model_numel_ = whole_model_numel<Vit>(config, layout, store_);

  auto act = [&](Shape s, DType t = DType::f32) { return Tensor::empty(std::move(s), t, device); };
  const int64_t b = micro_batch, t = local_tokens_;
  scratch_ = blocks_.front().allocate_scratch(b, t, device);
  for (const nn::TransformerBlock& blk : blocks_)  // checkpointed blocks' shared buffers
    if (blk.recompute() != nn::Recompute::nothing && !recomputed_.count(blk.recompute()))
      recomputed_.emplace(blk.recompute(), blk.allocate_recomputed(b, t, device));
  if (first_stage) {
    host_images_ = Tensor::empty({b, config.image, config.image, config.channels});
    images_ = device == Device::cpu ? host_images_ : act(host_images_.shape());
    proj_ = act({b, local_patches(), features_});
    if (sp_size() > 1) all_patches_ = act({b, config.patches(), config.patch_features()});
  }
  if (last_stage) {
    const int64_t n = b * t;
    host_labels_ = Tensor::empty({b}, DType::i32);
    labels_ = device == Device::cpu ? host_labels_ : act({b}, DType::i32);
    lnf_ = act({n, features_});
    lnf_mean_ = act({n});
    lnf_rstd_ = act({n});
    pooled_ = act({b, features_});
    dpooled_ = act({b, features_});
    logits_ = act({b, config.classes});
    losses_ = act({b});
    lse_ = act({b});
    host_losses_ = Tensor::empty({b});
    host_logits_ = Tensor::empty({b, config.classes});
  }
  if (!layout.pipeline.pipelined()) {  // one micro-batch's activations, allocated now
    slots_.at(0, 0);
    release(0, 0);
  }
}

double Vit::flops_per_sample() const {
  const double t = static_cast<double>(tokens_);
  return 6.0 * static_cast<double>(model_numel_) * t +
         12.0 * static_cast<double>(config_.layers) * t * t * static_cast<double>(config_.hidden);
}

std::unique_ptr<Vit::Activations> Vit::allocate_activations(int chunk) const {
  const ModelChunk& c = chunks_[static_cast<size_t>(chunk)];
  auto a = std::make_unique<Activations>();
  auto act = [&](Shape s) { return Tensor::empty(std::move(s), DType::f32, device_); };
  if (c.embedding) a->patches = act({batch_, local_patches(), config_.patch_features()});
  allocate_block_activations(*a, c, blocks_, batch_, local_tokens_, batch_ * local_tokens_, features_, device_,
                             [this](const nn::TransformerBlock& blk) {
                               const auto shared = recomputed_.find(blk.recompute());
                               return shared == recomputed_.end() ? nn::TransformerBlock::Saved{} : shared->second;
                             });
  return a;
}

void Vit::load_labels(const int32_t* labels) {
  for (int64_t r = 0; r < batch_; ++r)
    TESSERA_CHECK(labels[r] < config_.classes, "vit: label ", labels[r], " at row ", r,
                  " of the micro-batch is not below the number of classes ", config_.classes);
  std::copy_n(labels, batch_, host_labels_.data<int32_t>());
  valid_ = std::count_if(labels, labels + batch_, [](int32_t l) { return l >= 0; });
  if (device_ != Device::cpu) labels_.copy_from(host_labels_);
}

// Under ZeRO-3 the embedding unit stays gathered from its forward to its backward when the head
// follows on the same chunk (the whole model: its backward comes next); on a pipeline, which
// holds several micro-batches in flight, it is gathered again for its backward. The blocks are
// gathered for forward and again for backward; the head within forward_chunk.
void Vit::embed(Activations& a, const float* images, bool keep_for_backward) {
  std::copy_n(images, host_images_.numel(), host_images_.data<float>());
  if (device_ != Device::cpu) images_.copy_from(host_images_);
  units_->gather(embed_unit_, keep_for_backward);
  if (sp_size() == 1) {
    ops::image_to_patches(a.patches, images_, config_.patch);
  } else {  // this rank's patches of each image
    ops::image_to_patches(all_patches_, images_, config_.patch);
    const size_t row = config_.patch_features() * sizeof(float), all = config_.patches(), mine = local_patches();
    copy_rows_bytes(a.patches.data<float>(), mine * row, all_patches_.data<float>() + first_patch() * config_.patch_features(),
                    all * row, mine * row, batch_, device_);
  }
  patch_proj_.forward(proj_, a.patches);
  Tensor tokens = a.residual[0].reshape({batch_, local_tokens_, features_});
  ops::image_tokens_forward(tokens, proj_, holds_cls() ? store_.value(cls_) : Tensor(), positions(store_.value(pos_)));
  activation_rounding_.round(a.residual[0]);
  if (!keep_for_backward) units_->release(embed_unit_);
}

Vit::Eval Vit::forward_chunk(int chunk, int micro, const float* images, const int32_t* labels, bool training,
                             float grad_scale, parallel::GradSync* sync) {
  const ModelChunk& c = chunks_[static_cast<size_t>(chunk)];
  Activations& a = slots_.at(chunk, micro);
  if (c.head) load_labels(labels);
  if (c.embedding) embed(a, images, training && c.head);
  forward_blocks(stage_blocks(), c, a, activation_rounding_);
  return c.head ? head_forward(a, training, grad_scale, sync) : Eval{};
}

Vit::Eval Vit::head_forward(Activations& a, bool training, float grad_scale, parallel::GradSync* sync) {
  units_->gather(head_unit_, training);
  ln_f_.forward(lnf_, lnf_mean_, lnf_rstd_, a.residual.back());
  pool_forward();
  head_.forward(logits_, pooled_);
  if (tensor_->splits_features()) tensor_->all_reduce(logits_);  // the feature blocks' partial logits
  ops::classifier_xent_forward(losses_, lse_, logits_, labels_, config_.label_smoothing);
  if (!training) units_->release(head_unit_);
  host_losses_.copy_from(losses_);
  Eval e;
  const float* l = host_losses_.data<float>();
  for (int64_t r = 0; r < batch_; ++r) e.loss_sum += l[r];  // ignored rows hold 0
  e.count = valid_;
  if (training) {
    // Even without a valid row backward runs (scale 0): the collectives inside it must match the
    // other ranks'.
    const double rows = static_cast<double>(valid_ * token_share_);  // the grid's shares add up
    head_backward(a, valid_ > 0 ? static_cast<float>(grad_scale / rows) : 0.0f, sync);
  } else {
    count_correct(e);
  }
  return e;
}

// dL/d(chunk output) into a.dres; logits_ holds their gradient afterwards.
void Vit::head_backward(Activations& a, float scale, parallel::GradSync* sync) {
  // Every sp rank runs the head on the same pooled rows: each takes a 1/sp share of its gradients.
  ops::classifier_xent_backward(logits_, logits_, labels_, lse_, config_.label_smoothing,
                                scale / static_cast<float>(sp_size()));
  head_.backward(&dpooled_, logits_, pooled_);
  pool_backward();
  a.dres.zero();
  ln_f_.backward(a.dres, scratch_.d_c, a.residual.back(), lnf_mean_, lnf_rstd_);
  units_->grads_done(head_unit_, sync);
}

// Under sp each rank pools its own tokens (the class token's rank, or a 1/sp share of the mean:
// its tokens' mean / sp), and the shares are summed over the sp group.
void Vit::pool_forward() {
  const Tensor x = lnf_.reshape({batch_, local_tokens_, features_});
  if (pooling() == ops::TokenPool::first && !holds_cls()) {
    pooled_.zero();
  } else {
    ops::token_pool_forward(pooled_, x, pooling());
    if (pooling() == ops::TokenPool::mean && sp_size() > 1) ops::scale_inplace(pooled_, 1.0f / static_cast<float>(sp_size()));
  }
  sequence_->all_reduce(pooled_);
}

// dpooled_ is this rank's 1/sp share of the pooled rows' gradient: the mean's gradient per token,
// dpooled / tokens, is the share / local tokens; the class token's rank needs the whole.
void Vit::pool_backward() {
  Tensor dlnf = scratch_.d_c.reshape({batch_, local_tokens_, features_});
  if (pooling() == ops::TokenPool::first) {
    if (!holds_cls()) {
      dlnf.zero();
      return;
    }
    if (sp_size() > 1) ops::scale_inplace(dpooled_, static_cast<float>(sp_size()));
  }
  ops::token_pool_backward(dlnf, dpooled_, pooling());
}

void Vit::count_correct(Eval& e) {
  host_logits_.copy_from(logits_);
  const int64_t k = config_.classes;
  const int32_t* labels = host_labels_.data<int32_t>();
  for (int64_t r = 0; r < batch_; ++r) {
    const float* z = host_logits_.data<float>() + r * k;
    if (labels[r] >= 0 && std::max_element(z, z + k) - z == labels[r]) ++e.correct;
  }
}

void Vit::backward_chunk(int chunk, int micro, parallel::GradSync* sync, bool defer_weights) {
  const ModelChunk& c = chunks_[static_cast<size_t>(chunk)];
  Activations& a = slots_.at(chunk, micro);
  backward_blocks(stage_blocks(), c, a, sync, defer_weights, 0.0f);
  if (c.embedding && !defer_weights) embed_backward(a, c.head, sync);
  units_->finish_grads();  // ZeRO-3: the reduce-scatters still in flight, into the shard
}

void Vit::backward_weights_chunk(int chunk, int micro, parallel::GradSync* sync) {
  const ModelChunk& c = chunks_[static_cast<size_t>(chunk)];
  Activations& a = slots_.at(chunk, micro);
  backward_block_weights(stage_blocks(), c, a, sync);
  if (c.embedding) embed_backward(a, false, sync);
  units_->finish_grads();  // ZeRO-3: the reduce-scatters still in flight, into the shard
}

// gathered: the embedding unit is still gathered, with gradients, from its forward.
void Vit::embed_backward(Activations& a, bool gathered, parallel::GradSync* sync) {
  if (!gathered) units_->gather(embed_unit_, true);
  Tensor dcls = holds_cls() ? store_.grad(cls_) : Tensor();
  Tensor dpos = positions(store_.grad(pos_));
  ops::image_tokens_backward(proj_, dcls, dpos, a.dres);  // proj_ now holds its gradient
  patch_proj_.backward(nullptr, proj_, a.patches);
  units_->grads_done(embed_unit_, sync);
}

float Vit::forward_backward(const float* images, const int32_t* labels, float grad_scale, parallel::GradSync* sync) {
  TESSERA_CHECK(chunks_.size() == 1 && chunks_[0].embedding && chunks_[0].head,
                "Vit::forward_backward runs the whole model: on a pipeline stage use forward_chunk/backward_chunk");
  const Eval e = forward_chunk(0, 0, images, labels, true, grad_scale, sync);
  backward_chunk(0, 0, sync);
  release(0, 0);
  return training_loss(e);
}

Vit::Eval Vit::evaluate(const float* images, const int32_t* labels) {
  TESSERA_CHECK(chunks_.size() == 1 && chunks_[0].embedding && chunks_[0].head,
                "Vit::evaluate runs the whole model: on a pipeline stage use forward_chunk");
  const Eval e = forward_chunk(0, 0, images, labels, false);
  release(0, 0);
  return e;
}

}  // namespace tessera::models
