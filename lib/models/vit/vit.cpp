// Vit: construction (parameters, activations) and the forward/backward of one micro-batch.
#include "models/vit/vit.h"

#include <algorithm>
#include <cmath>

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

Vit::Vit(const VitConfig& config, Device device, uint64_t seed, int64_t micro_batch, const ModelLayout& layout)
    : config_(config), device_(device), batch_(micro_batch), tokens_(config.tokens()) {
  config.validate(layout.tensor->size());
  TESSERA_CHECK(!layout.tensor->splits_rows() && layout.sequence->size() == 1,
                "vit: --sp-mode split_gather / --sp are not supported for ViT yet");
  TESSERA_CHECK(micro_batch >= 1, "vit: the micro-batch must be at least 1, got ", micro_batch);
  const int64_t c = config.hidden;
  const float std = 0.02f, proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config.layers));
  // Replicated over tp: the patch embedding, class token and positions (unit 0) ...
  patch_proj_ = nn::Linear(store_, "patch.proj", config.patch_features(), c, {true, std});
  if (config.pool == "cls") cls_ = store_.add("cls_token", {c}, nn::Init::Normal(std), false);
  pos_ = store_.add("pos.weight", {tokens_, c}, nn::Init::Normal(std), false);
  // ... the blocks, split over tp ...
  const nn::BlockConfig block{c, config.heads, config.mlp_ratio * c, std, proj_std, /*causal=*/false};
  std::vector<int> first_param{0};
  blocks_.reserve(config.layers);
  for (int64_t i = 0; i < config.layers; ++i) {
    first_param.push_back(store_.size());
    blocks_.emplace_back(store_, "blocks." + std::to_string(i), block, *layout.tensor, *layout.sequence);
  }
  // ... and the final norm and classifier head, replicated again (the last unit).
  first_param.push_back(store_.size());
  ln_f_ = nn::LayerNorm(store_, "ln_f", c, *layout.tensor);
  head_ = nn::Linear(store_, "head", c, config.classes, {true, std});
  units_ = std::make_unique<parallel::ParamUnits>(store_, first_param, device, seed, layout.zero3);

  auto act = [&](Shape s, DType t = DType::f32) { return Tensor::empty(std::move(s), t, device); };
  const int64_t b = micro_batch, n = b * tokens_, p = config.patches();
  host_images_ = Tensor::empty({b, config.image, config.image, config.channels});
  host_labels_ = Tensor::empty({b}, DType::i32);
  images_ = device == Device::cpu ? host_images_ : act(host_images_.shape());
  labels_ = device == Device::cpu ? host_labels_ : act({b}, DType::i32);
  patches_ = act({b, p, config.patch_features()});
  proj_ = act({b, p, c});
  for (int64_t i = 0; i <= config.layers; ++i) residual_.push_back(act({n, c}));
  for (const auto& blk : blocks_) saved_.push_back(blk.allocate(b, tokens_, device));
  scratch_ = blocks_.front().allocate_scratch(b, tokens_, device);
  lnf_ = act({n, c});
  lnf_mean_ = act({n});
  lnf_rstd_ = act({n});
  dres_ = act({n, c});
  pooled_ = act({b, c});
  dpooled_ = act({b, c});
  logits_ = act({b, config.classes});
  losses_ = act({b});
  lse_ = act({b});
  host_losses_ = Tensor::empty({b});
  host_logits_ = Tensor::empty({b, config.classes});
}

double Vit::flops_per_sample() const {
  const double t = static_cast<double>(tokens_);
  return 6.0 * static_cast<double>(store_.global_numel()) * t +
         12.0 * static_cast<double>(config_.layers) * t * t * static_cast<double>(config_.hidden);
}

// Labels are checked here, before any collective of the step (a bad one fails on its rank alone).
void Vit::load_batch(const float* images, const int32_t* labels) {
  for (int64_t r = 0; r < batch_; ++r)
    TESSERA_CHECK(labels[r] < config_.classes, "vit: label ", labels[r], " at row ", r,
                  " of the micro-batch is not below the number of classes ", config_.classes);
  std::copy_n(images, host_images_.numel(), host_images_.data<float>());
  std::copy_n(labels, batch_, host_labels_.data<int32_t>());
  valid_ = std::count_if(labels, labels + batch_, [](int32_t l) { return l >= 0; });
  if (device_ != Device::cpu) {
    images_.copy_from(host_images_);
    labels_.copy_from(host_labels_);
  }
}

// Under ZeRO-3 the embedding and head units stay gathered from their forward to their backward
// (training); the blocks are gathered for forward and again for backward.
double Vit::run_forward(bool training) {
  const int64_t c = config_.hidden;
  units_->gather(kEmbedUnit, training);
  ops::image_to_patches(patches_, images_, config_.patch);
  patch_proj_.forward(proj_, patches_);
  Tensor tokens = residual_[0].reshape({batch_, tokens_, c});
  ops::image_tokens_forward(tokens, proj_, cls_ >= 0 ? store_.value(cls_) : Tensor(), store_.value(pos_));
  if (!training) units_->release(kEmbedUnit);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    units_->gather(block_unit(i), false);
    blocks_[i].forward(residual_[i + 1], residual_[i], saved_[i], scratch_);
    units_->release(block_unit(i));
  }
  units_->gather(head_unit(), training);
  ln_f_.forward(lnf_, lnf_mean_, lnf_rstd_, residual_.back());
  ops::token_pool_forward(pooled_, lnf_.reshape({batch_, tokens_, c}), pooling());
  head_.forward(logits_, pooled_);
  ops::classifier_xent_forward(losses_, lse_, logits_, labels_, config_.label_smoothing);
  if (!training) units_->release(head_unit());
  host_losses_.copy_from(losses_);
  const float* l = host_losses_.data<float>();
  double sum = 0.0;  // ignored rows hold 0
  for (int64_t r = 0; r < batch_; ++r) sum += l[r];
  return sum;
}

void Vit::backward(float scale, parallel::GradSync* sync) {
  ops::classifier_xent_backward(logits_, logits_, labels_, lse_, config_.label_smoothing, scale);
  head_.backward(&dpooled_, logits_, pooled_);
  Tensor dlnf = scratch_.d_c.reshape({batch_, tokens_, config_.hidden});
  ops::token_pool_backward(dlnf, dpooled_, pooling());
  dres_.zero();
  ln_f_.backward(dres_, scratch_.d_c, residual_.back(), lnf_mean_, lnf_rstd_);
  units_->grads_done(head_unit(), sync);
  for (size_t i = blocks_.size(); i-- > 0;) {
    units_->gather(block_unit(i), true);
    blocks_[i].backward(dres_, residual_[i], saved_[i], scratch_);
    units_->grads_done(block_unit(i), sync);
  }
  Tensor dcls = cls_ >= 0 ? store_.grad(cls_) : Tensor();
  ops::image_tokens_backward(proj_, dcls, store_.grad(pos_), dres_);  // proj_ now holds its gradient
  patch_proj_.backward(nullptr, proj_, patches_);
  units_->grads_done(kEmbedUnit, sync);
}

float Vit::forward_backward(const float* images, const int32_t* labels, float grad_scale, parallel::GradSync* sync) {
  load_batch(images, labels);
  const double sum = run_forward(true);
  // Even without a valid row backward runs (scale 0): the collectives inside it must match the
  // other ranks'.
  const double valid = static_cast<double>(valid_);
  backward(valid_ > 0 ? static_cast<float>(grad_scale / valid) : 0.0f, sync);
  return valid_ > 0 ? static_cast<float>(sum / valid) : 0.0f;
}

Vit::Eval Vit::evaluate(const float* images, const int32_t* labels) {
  load_batch(images, labels);
  Eval e;
  e.loss_sum = run_forward(false);
  e.count = valid_;
  host_logits_.copy_from(logits_);
  const int64_t k = config_.classes;
  for (int64_t r = 0; r < batch_; ++r) {
    const float* z = host_logits_.data<float>() + r * k;
    if (labels[r] >= 0 && std::max_element(z, z + k) - z == labels[r]) ++e.correct;
  }
  return e;
}

}  // namespace tessera::models
