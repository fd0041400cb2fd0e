// ModelLayout: how a model is split over the ranks, handed to every model (GPT, ViT, ...), with
// how it trades memory for compute on each rank (ZeRO-3, activation checkpointing); each part
// outlives the model. By default nothing is split and everything is kept.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "nn/expert_layout.h"
#include "nn/sequence_layout.h"
#include "nn/tensor_layout.h"
#include "nn/transformer_block.h"

namespace tessera::models {

// Which pipeline stage this rank is and how many model chunks (virtual stages) it holds: chunk c
// of stage s is virtual stage c x stages + s, and the blocks are split over the stages x chunks
// virtual stages in order (the embedding on the first, the final norm and head on the last):
// evenly, or as stage_layers says (--pp-layers: blocks per virtual stage, in virtual-stage order).
struct PipelinePlacement {
  int stage = 0, stages = 1, chunks = 1;
  std::vector<int64_t> stage_layers;  // empty: as even as possible (stage_blocks)
  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int chunk) const { return chunk * stages + stage; }
  bool pipelined() const { return virtual_stages() > 1; }
};

// Activation checkpointing (--activation-checkpointing none|full|selective,
// --recompute-every-k-blocks k): blocks k-1, 2k-1, ... of the whole model (every block for k = 1)
// recompute in backward what their forward did not keep (nn::Recompute: full keeps only the
// block's input, selective all but the attention core's output and statistics).
struct ActivationCheckpointing {
  nn::Recompute recompute = nn::Recompute::nothing;
  int64_t every = 1;
  bool enabled() const { return recompute != nn::Recompute::nothing; }
  nn::Recompute of_block(int64_t block) const { return (block + 1) % every == 0 ? recompute : nn::Recompute::nothing; }
};

struct ModelLayout {
  const nn::TensorLayout* tensor = &nn::TensorLayout::single();
  nn::SequenceLayout* sequence = &nn::SequenceLayout::single();
  comm::Communicator* zero3 = nullptr;  // shard the parameters over this group (ZeRO-3)
  bool offload_params = false;          // ZeRO-3: the shard (values, gradients) on the host tier
  bool zero3_overlap = true;            // ZeRO-3: gathers and reduce-scatters overlap compute
  PipelinePlacement pipeline;
  // Mixed precision: the activations kept between blocks (the residual stream, which pipeline
  // stages also send) are rounded to this storage type (f32: kept as they are).
  DType activations = DType::f32;
  // Where a mixture-of-experts model's experts live; its ranks also split the batch, like dp.
  const nn::ExpertLayout* experts = &nn::ExpertLayout::single();
  ActivationCheckpointing checkpointing;
};

// Blocks [first, end) of virtual stage v when `layers` blocks are split over `parts` virtual
// stages: as even as possible, the extra blocks going to the middle stages (the first holds the
// embedding, the last the head), or `counts[v]` blocks each when counts is given (--pp-layers).
// Throws when a stage would get no block or the counts do not fit (check_stage_layers).
std::pair<int64_t, int64_t> stage_blocks(int64_t layers, int parts, int v, const std::vector<int64_t>& counts = {});

// --pp-layers: one count per virtual stage, each >= 1, adding up to the model's layers; throws
// naming what does not fit. Empty counts are always valid (the even split).
void check_stage_layers(int64_t layers, int parts, const std::vector<int64_t>& counts);

}  // namespace tessera::models
