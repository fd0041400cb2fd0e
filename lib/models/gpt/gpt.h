// GPT-2 style language model: token + position embedding, pre-LN transformer blocks, final
// LayerNorm, LM head tied to the token embedding, mean cross-entropy over all positions.
#pragma once
#include <memory>
#include <vector>

#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/transformer_block.h"
#include "parallel/grad_sync.h"
#include "parallel/sharded_params.h"

namespace tessera::models {

struct GptConfig {
  int64_t vocab = 0, max_seq = 0, layers = 0, hidden = 0, heads = 0;
  int64_t pad_vocab_to = 64;  // LM-head rows are padded to this multiple (masked in the loss)
  void validate() const;      // throws tessera::Error naming the first bad field
};

class Gpt {
 public:
  // zero3_dp: shard the parameters over this data-parallel group (ZeRO-3); nullptr: replicated.
  Gpt(const GptConfig& config, Device device, uint64_t seed, int64_t micro_batch, int64_t seq,
      comm::Communicator* zero3_dp = nullptr);
  // Modules point into store_: a Gpt stays where it was built.
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  // One micro-batch: rows [B, T+1] int32 (inputs = row[:T], targets = row[1:]) on the host.
  // Returns the mean loss of the micro-batch. Backward adds grad_scale * d(mean loss)/d(params)
  // into the gradient buffer (grad_scale = 1 / micro-batches per step for accumulation). With a
  // GradSync, backward tells it as each block's gradients become final, so their data-parallel
  // reduction overlaps the rest of backward. Under ZeRO-3 the model gathers each unit's
  // parameters before use and reduce-scatters its gradients itself (no GradSync).
  float forward_backward(const int32_t* rows, float grad_scale, parallel::GradSync* sync = nullptr);
  float forward(const int32_t* rows);  // loss only (evaluation)

  nn::ParamStore& params() { return store_; }
  parallel::ShardedParams* sharded() { return sharded_.get(); }
  const GptConfig& config() const { return config_; }
  const Tensor& logits() const { return logits_; }  // [B, T, Vp] of the last forward (until backward)
  // Training FLOPs per token: 6 x parameters + 6 x layers x seq x hidden (attention), as in PaLM.
  double flops_per_token() const;

 private:
  void load_batch(const int32_t* rows);
  float run_forward(bool training);
  // ZeRO-3 units: the embedding (also the tied head), block i, the final norm.
  parallel::Range embed_unit() const { return {0, block_offset_.front()}; }
  parallel::Range block_unit(size_t i) const;
  parallel::Range ln_f_unit() const { return {ln_f_offset_, store_.numel()}; }
  void gather(parallel::Range unit, bool with_grads) { if (sharded_) sharded_->gather(unit, with_grads); }
  void release(parallel::Range unit) { if (sharded_) sharded_->release(unit); }
  // After a unit's backward: reduce its gradients over dp (ZeRO-3 here, GradSync otherwise).
  void grads_done(parallel::Range unit, parallel::GradSync* sync);

  GptConfig config_;
  Device device_;
  int64_t batch_, seq_;
  nn::ParamStore store_;
  nn::Embedding embed_;
  std::vector<nn::TransformerBlock> blocks_;
  nn::LayerNorm ln_f_;
  std::vector<int64_t> block_offset_;  // flat offset of each block's first parameter
  int64_t ln_f_offset_ = 0;
  std::unique_ptr<parallel::ShardedParams> sharded_;  // ZeRO-3

  // Activations for one micro-batch, sized at construction.
  Tensor inputs_, targets_;                 // [B, T] int32 on the device
  std::vector<Tensor> residual_;            // layers + 1 tensors [B, T, C]: block inputs, last = output
  std::vector<nn::TransformerBlock::Saved> saved_;
  nn::TransformerBlock::Scratch scratch_;
  Tensor lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, lse_, dres_;
  Tensor host_rows_, host_losses_;
};

}  // namespace tessera::models
