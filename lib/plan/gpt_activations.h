// Activation memory of a GPT (dense or mixture-of-experts) on one rank, as models::Gpt and its
// layers allocate it, from the shapes alone: what one in-flight micro-batch keeps in a chunk of
// blocks (under its activation checkpointing), the buffers checkpointed blocks recompute into,
// and the workspace every micro-batch shares. Bytes (fp32 and int32 alike: 4 per element); the
// formulas are docs/memory.md's, written out in gpt_activations.cpp term by term.
#pragma once
#include <cstdint>
#include <vector>

#include "models/gpt/gpt.h"

namespace tessera::plan {

struct GptActivationShape {
  models::GptConfig model;
  int64_t batch = 0, seq = 0;  // sequences per micro-batch; the whole sequence's length
  int tp = 1, sp = 1, ep = 1;
  bool split_rows = false;  // --sp-mode split_gather: the residual stream holds rows / tp
  bool ring = false;        // sequence-parallel attention by ring (else all_to_all when sp > 1)
  models::ActivationCheckpointing checkpointing;
  // --tp-mode 2d, 2.5d, 3d (parallel/tensor_grid.h): tp is then the grid's side q, which splits the
  // residual stream's features as well as the branches'; batch is the rank's own sequences.
  bool grid = false;
  bool cube = false;  // 3d

  int64_t tokens() const { return batch * (seq / sp); }  // N: this rank's token rows inside regions
  int64_t rows() const { return split_rows ? tokens() / tp : tokens(); }  // outside regions
  int64_t features() const { return grid ? model.hidden / tp : model.hidden; }  // of the residual stream
};

// One micro-batch in flight in a chunk of blocks [first_block, end_block): the residual stream
// (the blocks' inputs and the output), its gradient, what each block keeps, the token ids on the
// embedding's chunk.
int64_t micro_batch_bytes(const GptActivationShape& s, int64_t first_block, int64_t end_block, bool embedding);
// The zero-bubble schedule's deferred weight-gradient inputs of such a micro-batch (kept between
// its B and W steps; MoE blocks: their experts' and router's too): approximate.
int64_t deferred_weight_grad_bytes(const GptActivationShape& s, int64_t first_block, int64_t end_block,
                                   bool embedding);
// The buffers this rank's checkpointed blocks recompute into (one set per kind of block).
int64_t recomputed_bytes(const GptActivationShape& s, const std::vector<int64_t>& blocks);
// The blocks' share of the workspace: their backward scratch (and the experts') and
// sequence-parallel attention's staging (what every model built of these blocks has: ViT too).
int64_t blocks_workspace_bytes(const GptActivationShape& s, const std::vector<int64_t>& blocks);
// Workspace shared by the micro-batches: the blocks' backward scratch (and the experts'), the
// host copy of the batch, sequence-parallel attention's staging, and on the last stage the final
// norm, the LM head's logits slice (local_vocab rows of the padded vocabulary) and the loss rows.
int64_t workspace_bytes(const GptActivationShape& s, const std::vector<int64_t>& blocks, bool last_stage,
                        int64_t local_vocab);

// Grid tensor parallelism's own buffers on a stage holding `blocks` (and the embedding's and the
// head's vocabulary regions when `embedding`, `head`): the regions' whole rows, the gathered token
// tables and their gradients, the grid's gather and reduce-scatter staging, the linear layers'
// blocks (SUMMA's, or 3D's gathered rows and weights), the split norms' backward sums. `tied`: the
// head reads the embedding's table on the same stage. docs/parallelism.md's grid formula.
int64_t grid_workspace_bytes(const GptActivationShape& s, const std::vector<int64_t>& blocks, bool embedding,
                             bool head, bool tied, int64_t local_vocab);

}  // namespace tessera::plan
