// The activation formulas, term by term as the layers allocate (nn/transformer_block.cpp,
// nn/attention.cpp, nn/mlp.cpp, nn/moe.cpp, nn/lm_head.cpp, models/gpt/gpt.cpp,
// parallel/sequence_attention.cpp). Elements throughout; bytes at the end.
#include "plan/gpt_activations.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace tessera::plan {
namespace {

constexpr int64_t kBytes = 4;  // fp32 and int32

struct Sizes {  // the shapes the layers see
  int64_t n, rows, c, ct, ht, mlp_t;
  // Llama: the features of this rank's k (or v) projection: its kv heads (split over tp, or over a
  // grid's side q like the query heads), or all of them where they are replicated, times the head size.
  int64_t kvt;
  bool llama;
  explicit Sizes(const GptActivationShape& s)
      : n(s.tokens()),
        rows(s.rows()),
        c(s.features()),
        ct(s.model.hidden / s.tp),
        ht(s.model.heads / s.tp),
        mlp_t(s.model.mlp_hidden() / s.tp),
        kvt((s.model.kv() % s.tp == 0 ? s.model.kv() / s.tp : s.model.kv()) * (s.model.hidden / s.model.heads)),
        llama(s.model.llama()) {}
};

// Mixture of experts: the most rows this rank's experts can receive in one call (MoeFeedForward's
// max_received), the expert MLP's hidden size, and the shared experts' hidden features on this rank.
// Token shards (nn/expert_layout.h): sp, or tp under split_gather; the routing counts per sequence
// under sp (segments), else per rank; their length (MoeRouter::count_width).
struct ExpertSizes {
  int64_t k, experts, hidden, received, shared_t, shards, segments, counts;
  bool swiglu;
  explicit ExpertSizes(const GptActivationShape& s) {
    shards = s.sp > 1 ? s.sp : s.split_rows ? s.tp : 1;
    segments = s.sp > 1 ? s.batch : 1;
    const models::GptConfig& m = s.model;
    k = m.moe.router.top_k;
    experts = m.moe.experts;
    counts = k * segments * experts + 1;
    hidden = m.moe.hidden > 0 ? m.moe.hidden : m.llama() ? m.mlp_hidden() : 4 * m.hidden;
    swiglu = m.llama();
    shared_t = m.moe.shared_experts * hidden / s.tp;
    const int64_t every = s.ep * s.rows() * k;
    const float factor = m.moe.router.capacity_factor;
    if (factor == 0.0f) {
      received = every;
    } else {
      const double cap = std::ceil(static_cast<double>(factor) * static_cast<double>(s.ep * shards * s.rows()) *
                                   static_cast<double>(k) / static_cast<double>(experts));
      received = std::min(every, experts / s.ep * std::max<int64_t>(1, static_cast<int64_t>(cap)));
    }
  }
};

// The attention core's output and what the core keeps: att, lse (and, all_to_all, the
// head-sharded q, k, v and output).
int64_t attention_core(const GptActivationShape& s) {
  const Sizes z(s);
  const bool all_to_all = s.sp > 1 && !s.ring;
  return z.n * z.ct + z.n * z.ht + (all_to_all ? 4 * z.n * z.ct : 0);
}

int64_t moe_saved(const GptActivationShape& s) {
  const Sizes z(s);
  const ExpertSizes e(s);
  const int64_t counts = e.counts;
  const int64_t router = z.rows * e.experts + z.rows + 3 * z.rows * e.k + counts;  // probs, lse, choices, counts
  return router + s.ep * e.shards * counts + z.rows * e.k                          // the group's counts, slots
         + e.received * (z.c + (e.swiglu ? 3 : 2) * e.hidden)  // expert input, fc (gate, up), GELU (SwiGLU)
         + z.rows * e.k * z.c                                   // returned rows
         + (e.swiglu ? 3 : 2) * z.n * e.shared_t;               // the shared experts' MLP
}

// Everything a block's forward writes for backward (TransformerBlock::Saved).
int64_t block_saved(const GptActivationShape& s, bool moe) {
  const Sizes z(s);
  const int64_t norms = 3 * z.rows * z.c + 4 * z.rows;  // ln1, mid, ln2 and the two norms' statistics
  const int64_t attention = 3 * z.n * z.ct + attention_core(s);
  // MLP: pre-activation and GELU; SwiGLU: gate, up and their product.
  const int64_t feed_forward = moe ? moe_saved(s) : (z.llama ? 3 : 2) * z.n * z.mlp_t;
  return norms + attention + feed_forward;
}

// What block i keeps per micro-batch under its checkpointing.
int64_t block_kept(const GptActivationShape& s, int64_t i) {
  switch (s.checkpointing.of_block(i)) {
    case nn::Recompute::forward:
      return 0;
    case nn::Recompute::attention_core:
      return block_saved(s, s.model.is_moe_block(i)) - attention_core(s);
    case nn::Recompute::nothing:
      break;
  }
  return block_saved(s, s.model.is_moe_block(i));
}

}  // namespace

int64_t micro_batch_bytes(const GptActivationShape& s, int64_t first_block, int64_t end_block, bool embedding) {
  const Sizes z(s);
  int64_t floats = (end_block - first_block + 2) * z.rows * z.c;  // residual stream and its gradient
  if (embedding) floats += z.n;                                    // token ids
  for (int64_t i = first_block; i < end_block; ++i) floats += block_kept(s, i);
  return kBytes * floats;
}

int64_t deferred_weight_grad_bytes(const GptActivationShape& s, int64_t first_block, int64_t end_block,
                                   bool embedding) {
  const Sizes z(s);
  // Per block: the output gradients of QKV and the attention projection (copied), and per layer
  // norm its output gradient, a discarded input gradient and two parameter-sized discards; under
  // split rows the gathered inputs of QKV and fc (copied). Llama: q, k, v (and, rows split, gate
  // and up) each record theirs.
  const int64_t attention = z.llama ? z.ct + 2 * z.kvt : 3 * z.ct;
  const int64_t common = z.n * (attention + z.c) + 2 * (2 * z.rows * z.c + 2 * z.c) +
                         (s.split_rows ? (z.llama ? 5 : 2) * z.n * z.c : 0);
  // The dense MLP: its layers' output gradients (fc or gate and up; proj or down).
  const int64_t dense = z.n * ((z.llama ? 2 : 1) * z.mlp_t + z.c);
  int64_t floats = 0;
  for (int64_t i = first_block; i < end_block; ++i) {
    floats += common;
    if (!s.model.is_moe_block(i)) {
      floats += dense;
      continue;
    }
    // An MoE block (nn/moe.h): the shared experts' like the dense MLP's; the experts' output and
    // hidden gradients (SwiGLU: the gate's and the up projection's) in buffers of the most rows
    // they can receive; the router logits' gradient.
    const ExpertSizes e(s);
    if (e.shared_t > 0) floats += z.n * ((e.swiglu ? 2 : 1) * e.shared_t + z.c);
    floats += e.received * (z.c + (e.swiglu ? 2 : 1) * e.hidden) + z.rows * e.experts;
  }
  return kBytes * (floats + (embedding ? z.rows * z.c : 0));
}

int64_t recomputed_bytes(const GptActivationShape& s, const std::vector<int64_t>& blocks) {
  std::set<std::pair<nn::Recompute, bool>> kinds;  // as models::Gpt keys them
  for (int64_t i : blocks) {
    const nn::Recompute r = s.checkpointing.of_block(i);
    if (r != nn::Recompute::nothing) kinds.insert({r, r == nn::Recompute::forward && s.model.is_moe_block(i)});
  }
  int64_t floats = 0;
  for (const auto& [recompute, moe] : kinds)
    floats += recompute == nn::Recompute::forward ? block_saved(s, moe) : attention_core(s);
  return kBytes * floats;
}

int64_t blocks_workspace_bytes(const GptActivationShape& s, const std::vector<int64_t>& blocks) {
  const Sizes z(s);
  // TransformerBlock::Scratch: d_c, d_att, d_qkv, d_hidden, and the region's gathered rows.
  int64_t floats = z.rows * z.c + 4 * z.n * z.ct + z.n * z.mlp_t + (s.split_rows || s.grid ? 2 * z.n * s.model.hidden : 0);
  if (z.llama) floats += z.n * z.mlp_t + z.n * (z.ct + 2 * z.kvt);  // SwiGLU's d_up, the q/k/v projections
  if (std::any_of(blocks.begin(), blocks.end(), [&](int64_t i) { return s.model.is_moe_block(i); })) {
    const ExpertSizes e(s);  // MoeFeedForward::Scratch
    floats += z.rows * e.k * z.c + 2 * e.received * z.c + (e.swiglu ? 2 : 1) * e.received * e.hidden +
              z.rows * e.k + z.rows * e.experts + (s.ep > 1 ? e.received * z.c : 0) +
              (e.swiglu ? 2 : 1) * z.n * e.shared_t +  // the shared experts' d_hidden (and d_up)
              (e.shards > 1 ? e.shards * e.counts : 0);  // the shards' counts (ExpertParallel)
  }
  if (s.sp > 1) floats += (s.ring ? 12 : 6) * z.n * z.ct;  // ring: six key/value blocks; all_to_all: two
  return kBytes * floats;
}

int64_t workspace_bytes(const GptActivationShape& s, const std::vector<int64_t>& blocks, bool last_stage,
                        int64_t local_vocab) {
  const Sizes z(s);
  int64_t floats = blocks_workspace_bytes(s, blocks) / kBytes;
  floats += 2 * z.n;  // the batch's inputs and targets on the host
  if (last_stage) {
    floats += z.n + z.rows * z.c + 2 * z.rows;  // targets, final norm and its statistics
    floats += z.n * local_vocab + 3 * z.n;      // logits slice, lse, losses (device and host)
    if (s.tp > 1) floats += 7 * z.n;            // the vocab-parallel loss's row statistics
  }
  return kBytes * floats;
}

int64_t grid_workspace_bytes(const GptActivationShape& s, const std::vector<int64_t>& blocks, bool embedding,
                             bool head, bool tied, int64_t local_vocab) {
  if (!s.grid) return 0;
  const Sizes z(s);
  const int64_t q = s.tp, c = s.model.hidden, f = s.model.mlp_hidden();
  const bool vocab = embedding || head;
  // The gathered tables [V/q, C]: the embedding's and its gradient; the head's, and the gradient of
  // the table it reads (the embedding's, already counted, when tied on the same stage).
  const int64_t tables = (embedding ? 2 : 0) + (head ? 1 : 0) + (head && !(embedding && tied) ? 1 : 0);
  int64_t floats = tables * local_vocab * c;
  // The linear layers [out, in] of a block: the largest input, output and weight.
  const int64_t qkv_out = z.llama ? c : 3 * c;
  const int64_t most_in = std::max(c, f), most_out = std::max(qkv_out, f), most_weight = std::max(qkv_out, f) * c;
  int64_t staged = vocab ? std::max(z.n * c, local_vocab * c) : 0;  // gather and reduce-scatter staging, each
  if (!blocks.empty()) {
    if (s.cube) {  // gathered rows of x and dy, the partial product; gathered weights, dW's partial and piece
      floats += z.n * (most_in + std::max(most_in, most_out) + most_out) + 2 * most_weight / (q * q) +
                most_weight / (q * q * q);
      // Llama's k, v and up add their dx to q's (gate's): each reduce-scattered into a block of its own first
      if (z.llama) floats += z.n * z.c;
      staged = std::max(staged, most_weight / (q * q));
    } else {  // SUMMA: x's and W's broadcast blocks, dx's and dW's partial blocks
      floats += 2 * z.n * most_in / q + 2 * most_weight / (q * q);
    }
  }
  floats += 2 * staged + (vocab ? local_vocab * c / q : 0);  // and the table gradient's reduced block
  // Each split norm's backward sums (two per row, RMSNorm one): two per block, the final norm.
  const int64_t norms = 2 * static_cast<int64_t>(blocks.size()) + (head ? 1 : 0);
  floats += norms * (z.llama ? 1 : 2) * z.n;
  return kBytes * floats;
}

}  // namespace tessera::plan
