// Vision transformer classifier: images cut into p x p patches, a linear patch embedding, an
// optional class token, learned positions, pre-LN transformer blocks with attention to every
// token, a final LayerNorm, pooling (the class token, or the mean over tokens) and a linear head
// trained with label-smoothed cross-entropy. Under 1D tensor parallelism the blocks split as
// nn/transformer_block.h describes; everything else is replicated on every tp rank (its gradients
// come out identical there: the blocks' region edges complete the residual stream's gradient).
// Under a grid layout (2D, 2.5D, 3D) every rank holds a share of the micro-batch's images and a
// block of the stream's features: the patch embedding, class token, positions and final norm
// hold that block, the head its input block (the partial logits are all-reduced).
// On a pipeline a rank holds its chunks' blocks, the embedding on the first virtual stage and the
// final norm and head on the last (models/model_chunks.h).
// Under sequence parallelism (--sp) a rank holds a contiguous share of every image's tokens (the
// class token is token 0) through the whole model; attention sees all tokens through the sp
// layout, the pooled token is summed over the sp group, and the head runs on every sp rank, its
// gradients scaled to a 1/sp share each (the data-parallel reduction, over dp x sp, adds them up).
// Activation checkpointing (layout.checkpointing) works as in Gpt: a checkpointed block keeps its
// input and recomputes the rest, into buffers the model's blocks share.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "models/model_layout.h"
#include "models/block_loops.h"
#include "models/model_chunks.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/precision_rounding.h"
#include "nn/transformer_block.h"
#include "nn/weight_grads.h"
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
  // This rank's parameters as the constructor registers them, nothing allocated (what the memory
  // planner counts): the stage's store and each unit's first parameter (the embedding on the first
  // stage, each block, the head on the last).
  struct StageParams {
    nn::ParamStore store;
    std::vector<int> unit_first_param;
  };
  static StageParams stage_params(const VitConfig& config, const ModelLayout& layout);
  // Throws for layouts it cannot run: split_gather (rows split over tp), or an sp that does not
  // divide the tokens.
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
  // group) call it together, even with no valid row (then loss 0, gradient 0). One rank holding
  // the whole model (no pipeline).
  float forward_backward(const float* images, const int32_t* labels, float grad_scale,
                         parallel::GradSync* sync = nullptr);

  // Forward only (no gradients): the loss summed over the valid rows (the training objective,
  // label smoothing included), the rows whose top-1 class (first maximum) is the label, and the
  // number of valid rows. Collective as forward_backward.
  struct Eval {
    double loss_sum = 0;
    int64_t correct = 0, count = 0;
    float mean_loss() const { return count > 0 ? static_cast<float>(loss_sum / static_cast<double>(count)) : 0.0f; }
  };
  Eval evaluate(const float* images, const int32_t* labels);

  // ---- pipeline stages: the same computation, chunk by chunk and micro-batch by micro-batch ----
  // chunk_input is the chunk's input activation [B x Tl, C] (the previous virtual stage's output,
  // received into it), chunk_output its output (sent to the next); chunk_grad is the gradient of
  // the chunk's output on entry to backward_chunk (received into it) and of its input after it.
  int chunks() const { return static_cast<int>(chunks_.size()); }
  bool has_embedding(int chunk) const { return chunks_[chunk].embedding; }
  bool has_head(int chunk) const { return chunks_[chunk].head; }
  Tensor& chunk_input(int chunk, int micro) { return slots_.at(chunk, micro).residual.front(); }
  Tensor& chunk_output(int chunk, int micro) { return slots_.at(chunk, micro).residual.back(); }
  Tensor& chunk_grad(int chunk, int micro) { return slots_.at(chunk, micro).dres; }
  // Forward of the chunk's part of the model: the embedding's chunk reads the images, the head's
  // the labels (either may be null elsewhere). The head's chunk returns its Eval (correct rows
  // counted when not training) and, when training, runs the head's and final norm's backward at
  // once, scaled by grad_scale / valid rows, into chunk_grad; other chunks return zeros.
  Eval forward_chunk(int chunk, int micro, const float* images, const int32_t* labels, bool training,
                     float grad_scale = 1.0f, parallel::GradSync* sync = nullptr);
  // Backward of the chunk's blocks (and the embedding's on the first virtual stage). With
  // defer_weights only the input gradients now (chunk_grad): the blocks' weight gradients are
  // recorded, and the embedding's backward (it has no input gradient) waits whole, for
  // backward_weights_chunk, which then hands them to the data-parallel reduction (zero-bubble
  // schedules' B and W).
  void backward_chunk(int chunk, int micro, parallel::GradSync* sync, bool defer_weights = false);
  void backward_weights_chunk(int chunk, int micro, parallel::GradSync* sync);
  void release(int chunk, int micro) { slots_.release(chunk, micro); }  // the activations are free for reuse

  nn::ParamStore& params() { return store_; }
  parallel::ParamUnits& units() { return *units_; }
  parallel::ShardedParams* sharded() { return units_->sharded(); }
  const VitConfig& config() const { return config_; }
  int64_t micro_batch() const { return batch_; }
  int64_t model_numel() const { return model_numel_; }  // parameters of the whole model, all stages
  // [B, classes] of the last forward (until backward overwrites it with its gradient).
  const Tensor& logits() const { return logits_; }
  // Training FLOPs per image: 6 x parameters x tokens (every parameter used once per token,
  // forward + backward, as for Gpt; it slightly overcounts the head, used once per image) +
  // 12 x layers x tokens^2 x hidden (attention scores and their product with the values: 4 T^2 C
  // forward per layer, 3 x that with backward, no causal halving).
  double flops_per_sample() const;
  // A training micro-batch's loss from its Eval: this rank's share of the mean over the
  // micro-batch's valid rows (a tensor-parallel grid's ranks split the rows: the shares add up).
  // Every sp rank returns the same loss: a 1/sp share each, as Gpt's sequence shares.
  float training_loss(const Eval& e) const { return e.mean_loss() / static_cast<float>(token_share_ * sp_size()); }

 private:
  // One micro-batch's activations in one chunk.
  // Residual rows: [B x Tl, C]; on the embedding's chunk dres keeps dL/d(tokens) from a deferred
  // B to its W.
  struct Activations : BlockActivations {
    Tensor patches;  // [B, P, p*p*C] (the embedding's chunk)
  };
  std::unique_ptr<Activations> allocate_activations(int chunk) const;
  void load_labels(const int32_t* labels);  // checks them first (before any collective)
  void embed(Activations& a, const float* images, bool keep_for_backward);
  void embed_backward(Activations& a, bool gathered, parallel::GradSync* sync);  // from a.dres
  Eval head_forward(Activations& a, bool training, float grad_scale, parallel::GradSync* sync);
  void head_backward(Activations& a, float scale, parallel::GradSync* sync);
  void count_correct(Eval& e);  // from the logits and labels of the head's forward
  void pool_forward();   // lnf_ -> pooled_ (summed over the sp group)
  void pool_backward();  // dpooled_ (a 1/sp share) -> dL/d(lnf_) in scratch_.d_c
  // This rank's rows [first_token_, + local_tokens_) of a [tokens, features] positions tensor.
  Tensor positions(const Tensor& pos) const { return pos.slice(first_token_ * features_, {local_tokens_, features_}); }
  int64_t sp_size() const { return sequence_->size(); }
  // Whether token 0, the class token (with --pool cls), is among this rank's tokens.
  bool holds_cls() const { return config_.pool == "cls" && first_token_ == 0; }
  // This rank's patches of each image: the first one and how many (tokens minus the class token).
  int64_t first_patch() const { return first_token_ - (config_.pool == "cls" && first_token_ > 0 ? 1 : 0); }
  int64_t local_patches() const { return local_tokens_ - (holds_cls() ? 1 : 0); }
  ops::TokenPool pooling() const { return config_.pool == "cls" ? ops::TokenPool::first : ops::TokenPool::mean; }
  // Units: the embedding (patch projection, class token, positions; first stage), each block, the
  // head (final norm and classifier; last stage).
  StageBlocks stage_blocks() { return {blocks_, *units_, block_unit_base_, scratch_}; }
  // The modules of `chunks`, registered in `store` in unit order (what the constructor keeps and
  // stage_params counts).
  struct Modules {
    nn::Linear patch_proj;
    int cls = -1, pos = -1;
    std::vector<nn::TransformerBlock> blocks;
    nn::LayerNorm ln_f;
    nn::Linear head;
    std::vector<int> unit_first_param;
    size_t embed_unit = 0, block_unit_base = 0, head_unit = 0;
  };
  static Modules register_modules(const VitConfig& config, const ModelLayout& layout,
                                  const std::vector<ModelChunk>& chunks, nn::ParamStore& store);

  VitConfig config_;
  Device device_;
  int64_t batch_, tokens_;              // tokens_: each image's, all sp ranks together
  int64_t local_tokens_, first_token_;  // this rank's share of them under sequence parallelism
  int64_t features_;     // the residual stream's features this rank holds (a grid splits them)
  int64_t token_share_;  // the grid's ranks splitting each micro-batch's images (1 otherwise)
  const nn::TensorLayout* tensor_;
  const nn::SequenceLayout* sequence_;
  int64_t model_numel_ = 0;
  nn::ParamStore store_;
  nn::Linear patch_proj_;
  int cls_ = -1, pos_ = -1;  // parameter ids (no class token or no embedding here: -1)
  std::vector<nn::TransformerBlock> blocks_;
  nn::LayerNorm ln_f_;
  nn::Linear head_;
  std::vector<ModelChunk> chunks_;
  size_t embed_unit_ = 0, block_unit_base_ = 0, head_unit_ = 0;
  std::unique_ptr<parallel::ParamUnits> units_;  // allocation, ZeRO-3 gathers, gradient reduction

  ActivationSlots<Activations> slots_;
  nn::TransformerBlock::Scratch scratch_;
  // Activation checkpointing: the buffers checkpointed blocks recompute into, by kind.
  std::map<nn::Recompute, nn::TransformerBlock::Saved> recomputed_;
  nn::PrecisionRounding activation_rounding_;  // mixed precision: the residual stream's storage
  // The embedding's, used within one forward_chunk or backward_chunk.
  Tensor host_images_, images_;   // [B, H, W, C] f32 (the same tensor on the cpu)
  Tensor all_patches_;            // [B, P, p*p*C]: every patch, this rank's copied out (sp only)
  Tensor proj_;                   // [B, P, C] patch projections, then their gradient
  // The head's, used within one forward_chunk.
  Tensor host_labels_, labels_;   // [B] i32
  Tensor lnf_, lnf_mean_, lnf_rstd_;
  Tensor pooled_, dpooled_;       // [B, C]
  Tensor logits_, losses_, lse_;  // [B, classes], [B], [B]
  Tensor host_losses_, host_logits_;
  int64_t valid_ = 0;             // rows of the micro-batch with a label >= 0
};

}  // namespace tessera::models
