// The shared chunk loops of block models (see block_loops.h).
#include "models/block_loops.h"

namespace tessera::models {

void allocate_block_activations(BlockActivations& a, const ModelChunk& c, const std::vector<nn::TransformerBlock>& blocks,
                                int64_t batch,
                                int64_t tokens, int64_t rows, int64_t features, Device device,
                                const std::function<nn::TransformerBlock::Saved(const nn::TransformerBlock&)>& recomputed) {
  for (int64_t i = 0; i <= c.blocks(); ++i) a.residual.push_back(Tensor::empty({rows, features}, DType::f32, device));
  for (int64_t i = 0; i < c.blocks(); ++i) {
    const nn::TransformerBlock& blk = blocks[c.block_base + static_cast<size_t>(i)];
    a.saved.push_back(blk.allocate(batch, tokens, device, recomputed(blk)));
  }
  a.block_weight_grads.resize(static_cast<size_t>(c.blocks()));
  a.dres = Tensor::empty({rows, features}, DType::f32, device);
}

float forward_blocks(const StageBlocks& s, const ModelChunk& c, BlockActivations& a, nn::PrecisionRounding& rounding,
                     const std::function<void(int64_t j)>& after_block) {
  float aux = 0.0f;
  for (int64_t j = 0; j < c.blocks(); ++j) {
    const size_t b = c.block_base + static_cast<size_t>(j);
    s.units.gather(s.first_unit + b, false);
    if (j + 1 < c.blocks()) s.units.prefetch(s.first_unit + b + 1);  // ZeRO-3: gathered while this block computes
    aux += s.blocks[b].forward(a.residual[j + 1], a.residual[j], a.saved[j], s.scratch, a.documents);
    rounding.round(a.residual[j + 1]);
    s.units.release(s.first_unit + b);
    if (after_block) after_block(j);
  }
  return aux;
}

void backward_blocks(const StageBlocks& s, const ModelChunk& c, BlockActivations& a, parallel::GradSync* sync,
                     bool defer_weights, float aux_loss_scale) {
  for (int64_t j = c.blocks(); j-- > 0;) {
    const size_t b = c.block_base + static_cast<size_t>(j);
    const size_t unit = s.first_unit + b;
    if (defer_weights) {  // the parameters' values only (ZeRO-3): their gradients wait for W
      s.units.gather(unit, false);
      if (j > 0) s.units.prefetch(unit - 1);  // ZeRO-3: gathered while this block computes
      s.blocks[b].backward(a.dres, a.residual[j], a.saved[j], s.scratch, &a.block_weight_grads[j], aux_loss_scale,
                           a.documents);
      s.units.release(unit);
      continue;
    }
    s.units.gather(unit, true);
    if (j > 0) s.units.prefetch(unit - 1);  // ZeRO-3: gathered while this block computes
    s.blocks[b].recompute(a.residual[j], a.saved[j], s.scratch, a.documents);  // activation checkpointing
    s.blocks[b].backward(a.dres, a.residual[j], a.saved[j], s.scratch, nullptr, aux_loss_scale, a.documents);
    s.units.grads_done(unit, sync);
  }
}

void backward_block_weights(const StageBlocks& s, const ModelChunk& c, BlockActivations& a, parallel::GradSync* sync) {
  for (int64_t j = c.blocks(); j-- > 0;) {
    const size_t unit = s.first_unit + c.block_base + static_cast<size_t>(j);
    s.units.gather(unit, true);
    if (j > 0) s.units.prefetch(unit - 1);  // ZeRO-3: gathered while this block computes
    a.block_weight_grads[static_cast<size_t>(j)].run();
    s.units.grads_done(unit, sync);
  }
}

}  // namespace tessera::models
