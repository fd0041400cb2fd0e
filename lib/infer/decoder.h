// Decoder: a GPT-2 or Llama model from a checkpoint's /params, run for inference over a KvCache.
// One call takes new tokens for any number of sequence slots at once (a whole prompt for a slot
// being filled, one token for a slot decoding): their rows share every GEMM; attention reads each
// slot's own cache. The maths is the trainer's (the same kernels), so a prefill of a window gives
// the training forward's logits.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "infer/kv_cache.h"
#include "infer/linear.h"
#include "io/checkpoint_file.h"
#include "kernels/cpu/quant_w8a8_packed.h"
#include "models/gpt/gpt.h"

namespace tessera::infer {

// New tokens for one slot: they take positions [cache length, cache length + count) of the slot.
struct SlotTokens {
  int64_t slot = 0;
  const int32_t* tokens = nullptr;
  int64_t count = 0;
  bool all_logits = false;  // logits for every new position, else for the last one only
};

// Mixture-of-experts blocks (moe_train's checkpoints): the router's logits, softmax and top-k
// (k = 1 or 2, the lower expert index on a tie) and the gates as the checkpoint's router normalised
// them (nn/moe_router.h); the output is the shared experts' MLP plus sum over the token's k choices
// of gate x expert(x). No capacity and no dropping: every token reaches its top-k experts. The
// trainer's capacity factor is a training-time device that bounds an expert's rows per step; a
// decoder's rows (one new token per slot, or a prompt) are not a training batch, and dropping
// would make a token's output depend on the batch beside it. So the trainer's eval loss on a
// window is reproduced (generate --score) when its capacity does not bind (--capacity-factor 0, or
// one large enough that no assignment is dropped).
//
// Tensor parallelism over the heads (Megatron's 1D): rank r of `group` holds query heads
// [r H/tp, (r+1) H/tp) and the kv heads they read (tp divides the kv heads: a share of them; the kv
// heads divide tp: the one its query heads share, so each is held by tp / K ranks), the matching rows of the
// q/k/v (gpt2: qkv) and first MLP weights and columns of the output projections (MoE blocks: every
// expert's hidden features split the same way, the router whole on each rank), and its slots'
// cache for those kv heads alone. Each output projection's partial sums are all-reduced over the
// group (forward: all-reduce(tp), twice per block); embeddings, norms and the head are whole on
// every rank, so every rank has every logit and chooses the same tokens. No group: one rank.
struct HeadSplit {
  comm::Communicator* group = nullptr;
  int rank() const { return group ? group->rank() : 0; }
  int size() const { return group ? group->size() : 1; }
};

// Pipeline parallelism: stage r of `group` holds a contiguous share of the blocks (the first
// layers % pp stages one more), the embeddings on the first stage, the final norm and head on the
// last, and the KV cache of its blocks alone. A forward's slots are cut into pp micro-batches that
// flow through the stages in turn (stage s works on micro-batch m while stage s + 1 works on
// m - 1: send/recv of [rows, hidden] activations); the last stage broadcasts the logits over the
// group, so every rank chooses the same tokens. No group: one stage.
struct StageSplit {
  comm::Communicator* group = nullptr;
  int rank() const { return group ? group->rank() : 0; }
  int size() const { return group ? group->size() : 1; }
};

class Decoder {
 public:
  // Reads every parameter the config implies from the checkpoint (this rank's slices of them under
  // a HeadSplit), refusing (naming the tensor and the file) a tensor missing or of another shape,
  // and a split that does not divide the heads, kv heads and MLP features. `weights` bf16: every
  // matrix the blocks and the head multiply by, where the checkpoint holds it in f32, is rounded to
  // bf16 once here (after slicing: each rank holds the one-rank values) and multiplied by
  // bf16_weight_matmul, and a quantised matrix's products are bf16 ones (quant_bf16_matmul);
  // embeddings, norms, biases, a MoE router and its experts stay f32. `activations` int8: each
  // quantised matrix is packed here for the integer kernels and its products take int8 activations
  // (quant_w8a8_gemm_packed, any number of rows); refused for a checkpoint without quantised
  // matrices and with bf16.
  Decoder(const io::CheckpointReader& r, const models::GptConfig& config, const HeadSplit& split = {},
          const StageSplit& stages = {}, WeightPrecision weights = WeightPrecision::f32,
          ActivationPrecision activations = ActivationPrecision::f32);
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  const models::GptConfig& config() const { return config_; }
  int64_t vocab() const { return config_.vocab; }
  int64_t head_dim() const { return config_.hidden / config_.heads; }
  int64_t local_heads() const { return config_.heads / split_.size(); }
  int64_t local_kv_heads() const { return config_.kv() % split_.size() == 0 ? config_.kv() / split_.size() : 1; }
  int64_t first_kv_head() const { return split_.rank() * config_.kv() / split_.size(); }
  int64_t local_layers() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t parameter_bytes() const { return parameter_bytes_; }
  WeightPrecision weight_precision() const { return weights_; }
  // The longest sequence the model can take: gpt2's learned positions; unbounded (rotary) for Llama.
  int64_t position_limit() const;
  // A cache for this model: `slots` sequences of up to max_len positions.
  KvCache make_cache(int64_t slots, int64_t max_len) const;

  // Runs the chunks (distinct slots) through the model, appending their keys and values to the
  // cache and advancing each slot's length. Returns the logits [rows, vocab] (a view valid until
  // the next call): each chunk's rows in chunk order, all its positions or its last. Token ids
  // outside the vocabulary, and positions past the cache or position_limit(), are refused.
  Tensor forward(const std::vector<SlotTokens>& chunks, KvCache& cache);

 private:
  struct Block {
    Tensor ln1_weight, ln1_bias, ln2_weight, ln2_bias;
    LinearWeight qkv, q, k, v, proj;  // gpt2: qkv; llama: q, k, v
    LinearWeight fc, fc_proj;         // gpt2's MLP (a MoE block: its shared experts')
    LinearWeight gate, up, down;      // llama's SwiGLU (a MoE block: its shared experts')
    int64_t mlp_features = 0;         // this rank's features of that MLP (0: none)
    // A mixture-of-experts block: the router [E, C] (whole on every rank) and each expert's MLP
    // (gpt2: fc and fc_proj; llama: gate, up and down), this rank's share of its hidden features.
    bool moe = false;
    LinearWeight router;
    std::vector<LinearWeight> expert_fc, expert_proj, expert_gate, expert_up, expert_down;
  };
  // Buffers grown to the largest call so far (a step allocates nothing once they fit).
  struct Workspace {
    Tensor tokens, x, h, qkv, q, k, v, att, branch, mlp_a, mlp_b, mlp_c, stats_a, stats_b, q_heads, out_heads,
        lse, selected, selected_norm, logits, router_logits, expert_in, expert_out;
    std::vector<int32_t> choice, slot;  // [n, k]: each token's experts, best first, and its packed row
    std::vector<float> gate;            // [n, k]
    std::vector<int64_t> expert_first;  // [E + 1]: where each expert's packed rows start
    kernels::cpu::W8A8Scratch w8a8;     // int8 activations: the products' quantised activations
  };
  // A block's dense MLP (or a MoE block's shared experts) on h [n, C]: this rank's partial sums
  // into branch [n, C].
  void mlp(Tensor& branch, const Tensor& h, const Block& b, int64_t n);
  // A MoE block's feed-forward on h [n, C]: shared experts (if any), plus each token's top-k
  // experts weighted by their gates; this rank's partial sums into branch [n, C].
  void moe(Tensor& branch, const Tensor& h, const Block& b, int64_t n);
  Tensor rows(Tensor& buffer, int64_t n, int64_t width, DType dtype = DType::f32);
  void norm(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias, int64_t n);
  void attention(int64_t layer, const std::vector<SlotTokens>& chunks, const std::vector<int64_t>& first_row,
                 const std::vector<int64_t>& start, KvCache& cache, int64_t n);
  // This stage's blocks on the rows x [n, hidden] of `chunks` (first_row relative to x).
  void run_blocks(Tensor& x, const std::vector<SlotTokens>& chunks, const std::vector<int64_t>& first_row,
                  const std::vector<int64_t>& start, KvCache& cache, int64_t n);
  bool first_stage() const { return stages_.rank() == 0; }
  bool last_stage() const { return stages_.rank() == stages_.size() - 1; }

  void reduce(Tensor& partial);  // all-reduce(tp) of an output projection's partial sums

  models::GptConfig config_;
  HeadSplit split_;
  StageSplit stages_;
  WeightPrecision weights_ = WeightPrecision::f32;
  Tensor wte_, wpe_, ln_f_weight_, ln_f_bias_;
  LinearWeight head_;  // the token table (tied) or head.weight
  std::vector<Block> blocks_;
  int64_t parameter_bytes_ = 0;
  Workspace ws_;
};

}  // namespace tessera::infer
