// GPT-2 style language model: token + position embedding, pre-LN transformer blocks, final
// LayerNorm, LM head tied to the token embedding, mean cross-entropy over all positions. Under a
// tensor-parallel layout every layer splits as its own header describes (vocab-parallel
// embedding and head, Megatron blocks); each rank's flat parameter buffers hold its slices.
#pragma once
#include <memory>
#include <vector>

#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "models/model_layout.h"
#include "nn/lm_head.h"
#include "nn/transformer_block.h"
#include "parallel/grad_sync.h"
#include "parallel/param_units.h"

namespace tessera::models {

struct GptConfig {
  int64_t vocab = 0, max_seq = 0, layers = 0, hidden = 0, heads = 0;
  int64_t pad_vocab_to = 64;  // LM-head rows are padded to this multiple (masked in the loss)
  void validate(int tp = 1) const;  // throws tessera::Error naming the first bad field
};

class Gpt {
 public:
  // seq: the whole sequence's length (a sequence-parallel rank holds seq / sp positions of it).
  Gpt(const GptConfig& config, Device device, uint64_t seed, int64_t micro_batch, int64_t seq,
      const ModelLayout& layout = {});
  // Modules point into store_: a Gpt stays where it was built.
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  // One micro-batch: rows [B, T+1] int32 (inputs = row[:T], targets = row[1:]) on the host.
  // Returns the mean loss of the micro-batch, or under sequence parallelism this rank's share of
  // it (its positions' losses / (B x T)): the shares of the sp group add up to the mean. Backward adds grad_scale * d(mean loss)/d(params)
  // into the gradient buffer (grad_scale = 1 / micro-batches per step for accumulation). With a
  // GradSync, backward tells it as each block's gradients become final, so their data-parallel
  // reduction overlaps the rest of backward. Under ZeRO-3 the model gathers each unit's
  // parameters before use and reduce-scatters its gradients itself (no GradSync).
  float forward_backward(const int32_t* rows, float grad_scale, parallel::GradSync* sync = nullptr);
  float forward(const int32_t* rows);  // loss only (evaluation)

  nn::ParamStore& params() { return store_; }
  parallel::ShardedParams* sharded() { return units_->sharded(); }
  const GptConfig& config() const { return config_; }
  // [B, T, this rank's padded vocabulary slice] of the last forward (until backward).
  Tensor logits() const { return head_.logits().reshape({batch_, local_seq_, head_.logits().dim(1)}); }
  // Training FLOPs per token: 6 x parameters + 6 x layers x seq x hidden (attention), as in PaLM.
  double flops_per_token() const;

 private:
  void load_batch(const int32_t* rows);
  float run_forward(bool training);
  // Parameter units: the embedding (also the tied head), block i, the final norm.
  static constexpr size_t kEmbedUnit = 0;
  size_t block_unit(size_t i) const { return 1 + i; }
  size_t ln_f_unit() const { return blocks_.size() + 1; }

  GptConfig config_;
  Device device_;
  int64_t batch_, seq_;
  int64_t local_seq_, first_position_;  // this rank's positions under sequence parallelism
  nn::ParamStore store_;
  nn::Embedding embed_;
  std::vector<nn::TransformerBlock> blocks_;
  nn::LayerNorm ln_f_;
  nn::LmHead head_;
  std::unique_ptr<parallel::ParamUnits> units_;  // allocation, ZeRO-3 gathers, gradient reduction

  // Activations for one micro-batch, sized at construction.
  Tensor inputs_, targets_;                 // [B, T] int32 on the device
  std::vector<Tensor> residual_;            // layers + 1 tensors [B, T, C]: block inputs, last = output
  std::vector<nn::TransformerBlock::Saved> saved_;
  nn::TransformerBlock::Scratch scratch_;
  Tensor lnf_, lnf_mean_, lnf_rstd_, dres_;
  Tensor host_rows_;
};

}  // namespace tessera::models
