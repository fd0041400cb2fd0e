// Decoder-only language model, GPT-2 style (token + position embedding, pre-LN transformer blocks,
// final LayerNorm, LM head tied to the token embedding) or Llama style (--arch llama: token
// embedding, pre-RMSNorm blocks with rotary grouped-query attention and a SwiGLU MLP, no biases,
// final RMSNorm, an untied head unless tie_embeddings); mean cross-entropy over all positions. Under a
// tensor-parallel layout every layer splits as its own header describes (vocab-parallel
// embedding and head, Megatron blocks); each rank's flat parameter buffers hold its slices.
#pragma once
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "models/block_loops.h"
#include "models/model_chunks.h"
#include "models/model_layout.h"
#include "nn/lm_head.h"
#include "nn/precision_rounding.h"
#include "nn/transformer_block.h"
#include "parallel/grad_sync.h"
#include "parallel/param_units.h"

namespace tessera::models {

enum class Arch { gpt2, llama };
const char* arch_name(Arch arch);
Arch parse_arch(const std::string& name);  // throws naming the choices

struct GptConfig {
  Arch arch = Arch::gpt2;
  int64_t vocab = 0, max_seq = 0, layers = 0, hidden = 0, heads = 0;
  // Llama: kv heads (grouped-query attention; 0: as many as heads), the SwiGLU MLP's hidden
  // features (0: llama_ffn_hidden), the norms' epsilon, the rotary base, a head tied to the table.
  int64_t kv_heads = 0, ffn_hidden = 0;
  float norm_eps = 1e-5f, rope_theta = 10000.0f;
  bool tie_embeddings = true;  // gpt2 always; llama's default is an untied head
  bool llama() const { return arch == Arch::llama; }
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t mlp_hidden() const;  // gpt2: 4 x hidden (validate refuses ffn_hidden there; plan/vit_memory_plan.h sets it)
  // Llama's default: 8/3 of the hidden size rounded up to a multiple of 256.
  static int64_t llama_ffn_hidden(int64_t hidden);
  int64_t pad_vocab_to = 64;  // LM-head rows are padded to this multiple (masked in the loss)
  // Mixture of experts: every moe_every-th block (blocks moe_every-1, 2 moe_every-1, ...) has a
  // mixture-of-experts feed-forward (moe.channels is the hidden size; moe.hidden its experts'
  // hidden size, 0: 4 x hidden). 0: a dense model.
  int64_t moe_every = 0;
  nn::MoeConfig moe;
  bool is_moe_block(int64_t i) const { return moe_every > 0 && (i + 1) % moe_every == 0; }
  int64_t moe_blocks() const;  // how many blocks have experts
  void validate(int tp = 1) const;  // throws tessera::Error naming the first bad field
};

// A loss mask for one micro-batch: rows [B, T+1] of 0/1 beside the token rows (row position t + 1
// says whether predicting token t + 1 counts; the others are left out of the loss and its
// gradient), and what the summed loss of the counted positions is divided by in place of the
// micro-batch's B x T (the caller's share of the global batch's counted targets, so that every
// layout averages over the same count). denominator 0: nothing counts (loss 0, no gradient).
struct LossMask {
  const uint8_t* rows = nullptr;  // nullptr: no mask, every position counts
  double denominator = 0;
};

class Gpt {
 public:
  // This rank's parameters as the constructor registers them, nothing allocated (what the memory
  // planner counts): the stage's store, each unit's first parameter (the embedding on the first
  // stage, each block, the final norm on the last) and, on a last stage that is not also the
  // first, the tied token table's mirror (empty elsewhere).
  struct StageParams {
    nn::ParamStore store, mirror;
    std::vector<int> unit_first_param;
  };
  static StageParams stage_params(const GptConfig& config, const ModelLayout& layout);

  // seq: the whole sequence's length (a sequence-parallel rank holds seq / sp positions of it, which
  // ones and in which row order as layout.sequence says: nn::SequenceLayout::local_row).
  // Under a pipeline placement this rank builds only its chunks' blocks, the embedding on the
  // first virtual stage and the final norm and head on the last; a last stage that is not also
  // the first keeps a mirror of the tied token table (tied_mirror()).
  Gpt(const GptConfig& config, Device device, uint64_t seed, int64_t micro_batch, int64_t seq,
      const ModelLayout& layout = {});
  // Modules point into store_: a Gpt stays where it was built.
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  // One micro-batch: rows [B, T+1] int32 (inputs = row[:T], targets = row[1:]) on the host.
  // Returns the mean loss of the micro-batch, or under sequence parallelism this rank's share of
  // it (its positions' losses / (B x T)): the shares of the sp group add up to the mean. Backward
  // adds grad_scale * d(mean loss)/d(params) into the gradient buffer (grad_scale = 1 /
  // micro-batches per step for accumulation). With a GradSync, backward tells it as each block's
  // gradients become final, so their data-parallel reduction overlaps the rest of backward. Under
  // ZeRO-3 the model gathers each unit's parameters before use and reduce-scatters its gradients
  // itself (no GradSync). One rank holding the whole model (no pipeline).
  // A LossMask leaves the unmasked positions out and divides by its denominator instead.
  // segments (document masking, --document-mask): [B, T] int32 on the host, the document of every
  // input position of each row (io::TokenLoader::train_segments), or nullptr: attention over the
  // whole window. With them attention stays inside each document and positions restart at 0 at
  // each document's start (nn::DocumentMask).
  float forward_backward(const int32_t* rows, float grad_scale, parallel::GradSync* sync = nullptr,
                         const LossMask& mask = {}, const int32_t* segments = nullptr);
  // Loss only (evaluation).
  float forward(const int32_t* rows, const LossMask& mask = {}, const int32_t* segments = nullptr);

  // Mixture-of-experts statistics of the training forwards since the last call, per MoE block
  // of the whole model (zero for the blocks on other pipeline stages): the auxiliary loss terms
  // (this rank's shares, summed over calls, divided by the tp ranks holding the same share) and
  // dropped assignments (the token group's, summed, divided by the ranks holding the same count:
  // ep x token shards x tp copies), so that each adds up once over the job; and the largest expert
  // load (max / mean kept rows over the experts, max over calls).
  struct MoeStepStats {
    double aux_loss = 0, dropped = 0;
    std::vector<double> max_load;  // per MoE block of the model, in model order
  };
  MoeStepStats take_moe_stats();

  // ---- pipeline stages: the same computation, chunk by chunk and micro-batch by micro-batch ----
  // Each (chunk, micro-batch) in flight has its own activations, allocated on first use and
  // recycled by release(); under activation checkpointing (layout.checkpointing) a checkpointed
  // block's share of them is its input alone (full) or all but its attention core's (selective),
  // and its backward recomputes the rest into buffers shared by the model. chunk_input is the
  // chunk's input activation (the previous virtual stage's output, received into it),
  // chunk_output its output (sent to the next); chunk_grad is the gradient of the chunk's output
  // on entry to backward_chunk (received into it) and of its input after it (sent back).
  int chunks() const { return static_cast<int>(chunks_.size()); }
  bool has_embedding(int chunk) const { return chunks_[chunk].embedding; }
  bool has_head(int chunk) const { return chunks_[chunk].head; }
  Tensor& chunk_input(int chunk, int micro) { return slot(chunk, micro).residual.front(); }
  Tensor& chunk_output(int chunk, int micro) { return slot(chunk, micro).residual.back(); }
  Tensor& chunk_grad(int chunk, int micro) { return slot(chunk, micro).dres; }
  // Forward of the chunk's blocks; rows (as forward_backward's) are read by the chunks with the
  // embedding or the head. A chunk with the head computes the loss and, when training, the head's
  // and final norm's backward at once (into chunk_grad): returns the loss there, 0 elsewhere.
  // segments as forward_backward's, read by every chunk (its attention masks by document) and kept
  // with the micro-batch's activations for its backward.
  float forward_chunk(int chunk, int micro, const int32_t* rows, bool training, float grad_scale = 1.0f,
                      parallel::GradSync* sync = nullptr, const LossMask& mask = {},
                      const int32_t* segments = nullptr);
  // Backward of the chunk's blocks (and the embedding's on the first virtual stage). With
  // defer_weights only the input gradients (chunk_grad) now: the weight gradients are recorded and
  // computed by backward_weights_chunk, which then hands them to the data-parallel reduction
  // (zero-bubble schedules' B and W).
  void backward_chunk(int chunk, int micro, parallel::GradSync* sync, bool defer_weights = false);
  void backward_weights_chunk(int chunk, int micro, parallel::GradSync* sync);
  void release(int chunk, int micro);  // the micro-batch's activations are free for reuse

  // The tied token table on a pipeline whose last stage is not the first: the last stage's copy
  // (nullptr elsewhere), which the trainer keeps equal to the first stage's (parallel::TiedWeights).
  nn::ParamStore* tied_mirror() { return mirror_.get(); }
  int tied_param() const { return embed_.tokens_id(); }  // its id in params() (first stage) or the mirror

  nn::ParamStore& params() { return store_; }
  parallel::ParamUnits& units() { return *units_; }
  parallel::ShardedParams* sharded() { return units_->sharded(); }
  const GptConfig& config() const { return config_; }
  // [B, T, this rank's padded vocabulary slice] of the last forward (until backward).
  Tensor logits() const { return head_.logits().reshape({batch_, local_seq_, head_.logits().dim(1)}); }
  // Training FLOPs per token: 6 x parameters + 6 x layers x seq x hidden (attention), as in PaLM.
  double flops_per_token() const;
  int64_t model_numel() const { return model_numel_; }  // parameters of the whole model, all stages

 private:
  // One micro-batch's activations in one chunk.
  struct Activations : BlockActivations {  // residual rows: [rows, C]
    Tensor inputs;         // [B, T] int32 on the device (the embedding's chunk)
    float grad_scale = 0;  // of the forward: the MoE layers' auxiliary loss gradient
    // The embedding's rows' documents (the blocks' are BlockActivations::documents: the same
    // tensors, but other sequences under 3D tp, whose branches hold another share of the batch).
    nn::DocumentMask stream_documents;
    nn::WeightGrads embedding_weight_grads;
  };
  Activations& slot(int chunk, int micro) { return slots_.at(chunk, micro); }
  void record_moe_stats(int64_t block, const nn::MoeStats& stats);
  std::unique_ptr<Activations> allocate_activations(const ModelChunk& c) const;
  void load_batch(Activations& a, const int32_t* rows, const uint8_t* mask);  // masked-out targets: -1
  // a.stream_documents and a.documents (inactive: nullptr)
  void load_documents(Activations& a, const int32_t* segments) const;
  // d.positions from d.segments: each of this rank's positions' distance from its document's start.
  void document_positions(nn::DocumentMask& d) const;
  // Units: the embedding (first stage), each block, the final norm (last stage).
  StageBlocks stage_blocks() { return {blocks_, *units_, block_unit_base_, scratch_}; }

  // The modules of this rank's chunks, their parameters registered (not allocated) in `store`,
  // and the tied token table in `mirror` on a last stage that is not the first. MoE blocks point
  // at `moe`, which must outlive them.
  struct Modules {
    nn::Embedding embed, head_table;
    std::vector<nn::TransformerBlock> blocks;
    nn::LayerNorm ln_f;
    std::vector<int> unit_first_param;
  };
  static nn::MoeConfig moe_block_config(const GptConfig& config);
  static Modules register_modules(const GptConfig& config, const nn::MoeConfig& moe, const ModelLayout& layout,
                                  const std::vector<ModelChunk>& chunks, nn::ParamStore& store, nn::ParamStore& mirror);
  // Activation checkpointing: the buffers checkpointed blocks recompute into, one set per kind
  // (full: dense and MoE blocks keep different tensors; selective: every block's attention core is
  // alike), shared by the blocks and micro-batches of the model.
  using RecomputedKind = std::pair<nn::Recompute, bool>;
  static RecomputedKind recomputed_kind(const nn::TransformerBlock& block) {
    return {block.recompute(), block.recompute() == nn::Recompute::forward && block.is_moe()};
  }

  GptConfig config_;
  Device device_;
  int64_t batch_, seq_;
  int64_t local_seq_, first_position_;  // this rank's positions under sequence parallelism
  const nn::SequenceLayout* sequence_;  // which positions, in which local rows
  // 3D tp: the layout handing the blocks' branches their sequences' document segments, else null.
  const nn::TensorLayout* branch_sequences_ = nullptr;
  Tensor zigzag_positions_;             // zigzag: [B, Tl] i32 (on device_), each local row's position
  int64_t rows_;                        // token rows this rank holds between regions
  int64_t features_;                    // residual-stream features this rank holds (a grid layout splits them)
  int64_t token_share_ = 1;             // ranks splitting each micro-batch's sequences (ep, grid tp): the loss is a share
  nn::MoeConfig moe_config_;
  MoeStepStats moe_stats_;
  double aux_copies_ = 1, drop_copies_ = 1;  // ranks holding the same aux share / the same drop count
  // split_gather: the tp group's layout, over which a chunk's MoE auxiliary loss shares (each tp
  // rank's rows') are summed, so that every tp rank's loss is whole like the head's; aux_sum_ [1].
  const nn::TensorLayout* aux_shards_ = nullptr;
  Tensor aux_sum_;
  int64_t model_numel_ = 0;
  nn::ParamStore store_;
  std::unique_ptr<nn::ParamStore> mirror_;  // the tied token table on a last stage
  nn::Embedding embed_;                     // in store_ (first stage) or mirror_ (last stage)
  nn::Embedding head_table_;                // an untied head's table (last stage)
  std::vector<nn::TransformerBlock> blocks_;
  nn::LayerNorm ln_f_;
  nn::LmHead head_;
  std::vector<ModelChunk> chunks_;  // this stage's (models/model_chunks.h)
  size_t embed_unit_ = 0, block_unit_base_ = 0, ln_f_unit_ = 0;
  std::unique_ptr<parallel::ParamUnits> units_;  // allocation, ZeRO-3 gathers, gradient reduction

  ActivationSlots<Activations> slots_;
  std::map<RecomputedKind, nn::TransformerBlock::Saved> recomputed_;
  nn::TransformerBlock::Scratch scratch_;
  nn::PrecisionRounding activation_rounding_;  // mixed precision: the residual stream's storage
  Tensor targets_, lnf_, lnf_mean_, lnf_rstd_;  // the head's, used within one forward_chunk
  Tensor host_rows_;                             // [2, B, T]: inputs and targets on the host
};

}  // namespace tessera::models
