// The loops every block model runs over one pipeline chunk of its transformer blocks: forward,
// backward (each block gathered around its use under ZeRO-3, the next block's gather posted as
// it starts so that it runs while this one computes; recomputed first under activation
// checkpointing) and the deferred weight gradients of a zero-bubble schedule. Gpt and Vit share
// them; what differs between the models (embedding, head) stays in each model.
#pragma once
#include <functional>
#include <vector>

#include "models/model_chunks.h"
#include "nn/precision_rounding.h"
#include "nn/transformer_block.h"
#include "parallel/grad_sync.h"
#include "parallel/param_units.h"

namespace tessera::models {

// One micro-batch's block activations in one chunk; a model's own Activations adds its embedding's
// and head's.
struct BlockActivations {
  std::vector<Tensor> residual;  // the chunk's block inputs, then its output: [rows, features] each
  std::vector<nn::TransformerBlock::Saved> saved;
  std::vector<nn::WeightGrads> block_weight_grads;  // deferred W, per block
  Tensor dres;                                      // dL/d(residual), carried from block to block
  nn::DocumentMask documents;                       // the micro-batch's (--document-mask), else inactive
};

// What the loops borrow from the model: this stage's blocks, their units (block i is unit
// first_unit + i) and the blocks' shared workspace.
struct StageBlocks {
  const std::vector<nn::TransformerBlock>& blocks;
  parallel::ParamUnits& units;
  size_t first_unit;
  nn::TransformerBlock::Scratch& scratch;
};

// Allocates a's buffers for chunk c of this stage's blocks: residuals of rows x features, each block's saved tensors for
// batch x tokens (sharing recomputed(block)'s buffers where a checkpointed block recomputes into
// them).
void allocate_block_activations(BlockActivations& a, const ModelChunk& c, const std::vector<nn::TransformerBlock>& blocks,
                                int64_t batch,
                                int64_t tokens, int64_t rows, int64_t features, Device device,
                                const std::function<nn::TransformerBlock::Saved(const nn::TransformerBlock&)>& recomputed);

// Forward through chunk c's blocks from a.residual[0]; each output is rounded to the activations'
// storage precision, and after_block(j) runs after block j (e.g. to record MoE statistics).
// Returns the blocks' summed auxiliary loss.
float forward_blocks(const StageBlocks& s, const ModelChunk& c, BlockActivations& a, nn::PrecisionRounding& rounding,
                     const std::function<void(int64_t j)>& after_block = {});

// Backward through chunk c's blocks, last first, from a.dres (left holding dL/d(chunk input)).
// defer_weights: the input gradients only, the weights' kept in a.block_weight_grads for
// backward_block_weights (ZeRO-3 gathers the values alone then). aux_loss_scale: the weight of
// the blocks' auxiliary loss (TransformerBlock::backward's).
void backward_blocks(const StageBlocks& s, const ModelChunk& c, BlockActivations& a, parallel::GradSync* sync,
                     bool defer_weights, float aux_loss_scale);

// The weight gradients backward_blocks deferred, each block's handed to the gradient reduction.
void backward_block_weights(const StageBlocks& s, const ModelChunk& c, BlockActivations& a, parallel::GradSync* sync);

}  // namespace tessera::models
