// Vision transformer classifier: images cut into p x p patches, a linear patch embedding, an
// optional class token, learned positions, pre-LN transformer blocks with attention to every
// token, a final LayerNorm, pooling (the class token, or the mean over tokens) and a linear head
// trained with label-smoothed cross-entropy. Under 1D tensor parallelism the blocks split as
// nn/transformer_block.h describes; everything else is replicated on every tp rank (its gradients
// come out identical there: the blocks' region edges complete the residual stream's gradient).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "models/model_layout.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/transformer_block.h"
#include "parallel/grad_sync.h"
#include "parallel/param_units.h"

namespace tessera::models {

struct VitConfig {
  int64_t image = 32, channels = 3, patch = 4, hidden = 256, layers = 7, heads = 4, mlp_ratio = 2, classes = 10;
  std::string pool = "cls";      // "cls": a class token, pooled by its row; "mean": the mean over the patches
  float label_smoothing = 0.1f;  // eps: the target is (1 - eps) one-hot + eps / classes
  void validate(int tp = 1) const;  // throws tessera::Error naming the first bad field

  int64_t patches() const { return (image / patch) * (image / patch); }
  int64_t tokens() const { return patches() + (pool == "cls" ? 1 : 0); }
  int64_t patch_features() const { return patch * patch * channels; }
};

class Vit {
 public:
  // Throws for layouts it cannot run yet: split_gather (rows split over tp) or sequence parallelism.
  Vit(const VitConfig& config, Device device, uint64_t seed, int64_t micro_batch, const ModelLayout& layout = {});
  // Modules point into store_: a Vit stays where it was built.
  Vit(const Vit&) = delete;
  Vit& operator=(const Vit&) = delete;

  // One micro-batch on the host: images [B, H, W, C] float (normalised, channels last, as
  // io::ImageLoader writes them), labels [B] int32 (< 0: ignored, e.g. padding rows). Returns the
  // mean loss over the valid rows (0 if none); backward adds grad_scale * d(mean loss)/d(params)
  // into the gradient buffer (grad_scale = 1 / micro-batches per step for accumulation). With a
  // GradSync, backward tells it as each unit's gradients become final (the head, each block from
  // the last, the embedding), so their data-parallel reduction overlaps the rest of backward.
  // Under ZeRO-3 the model gathers each unit's parameters before use and reduce-scatters its
  // gradients itself (no GradSync). Collective: the ranks of the tp group (and of the ZeRO-3
  // group) call it together, even with no valid row (then loss 0, gradient 0).
  float forward_backward(const float* images, const int32_t* labels, float grad_scale,
                         parallel::GradSync* sync = nullptr);

  // Forward only (no gradients): the loss summed over the valid rows (the training objective,
  // label smoothing included), the rows whose top-1 class (first maximum) is the label, and the
  // number of valid rows. Collective as forward_backward.
  struct Eval {
    double loss_sum = 0;
    int64_t correct = 0, count = 0;
  };
  Eval evaluate(const float* images, const int32_t* labels);

  nn::ParamStore& params() { return store_; }
  parallel::ShardedParams* sharded() { return units_->sharded(); }
  const VitConfig& config() const { return config_; }
  int64_t micro_batch() const { return batch_; }
  // [B, classes] of the last forward (until backward overwrites it with its gradient).
  const Tensor& logits() const { return logits_; }
  // Training FLOPs per image: 6 x parameters x tokens (every parameter used once per token,
  // forward + backward, as for Gpt; it slightly overcounts the head, used once per image) +
  // 12 x layers x tokens^2 x hidden (attention scores and their product with the values: 4 T^2 C
  // forward per layer, 3 x that with backward, no causal halving).
  double flops_per_sample() const;

 private:
  void load_batch(const float* images, const int32_t* labels);
  double run_forward(bool training);  // the loss summed over the valid rows
  void backward(float scale, parallel::GradSync* sync);
  // Parameter units: the embedding (patch projection, class token, positions), block i, the head
  // (final norm and classifier).
  static constexpr size_t kEmbedUnit = 0;
  size_t block_unit(size_t i) const { return 1 + i; }
  size_t head_unit() const { return blocks_.size() + 1; }
  ops::TokenPool pooling() const { return cls_ >= 0 ? ops::TokenPool::first : ops::TokenPool::mean; }

  VitConfig config_;
  Device device_;
  int64_t batch_, tokens_;
  nn::ParamStore store_;
  nn::Linear patch_proj_;
  int cls_ = -1, pos_ = -1;  // parameter ids (no class token: cls_ = -1)
  std::vector<nn::TransformerBlock> blocks_;
  nn::LayerNorm ln_f_;
  nn::Linear head_;
  std::unique_ptr<parallel::ParamUnits> units_;  // allocation, ZeRO-3 gathers, gradient reduction

  // Activations for one micro-batch, sized at construction.
  Tensor images_, labels_;        // [B, H, W, C] f32, [B] i32 on the device
  Tensor patches_;                // [B, P, p*p*C]
  Tensor proj_;                   // [B, P, C] patch projections (their gradient during backward)
  std::vector<Tensor> residual_;  // layers + 1 tensors [B x T, C]: block inputs, last = output
  std::vector<nn::TransformerBlock::Saved> saved_;
  nn::TransformerBlock::Scratch scratch_;
  Tensor lnf_, lnf_mean_, lnf_rstd_, dres_;
  Tensor pooled_, dpooled_;       // [B, C]
  Tensor logits_, losses_, lse_;  // [B, classes], [B], [B]
  Tensor host_images_, host_labels_, host_losses_, host_logits_;
  int64_t valid_ = 0;             // rows of the batch with a label >= 0
};

}  // namespace tessera::models
