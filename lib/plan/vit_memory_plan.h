// The memory plan of a vit_train run: its per-rank peak by category and pipeline stage, as
// plan/memory_plan.h plans gpt_train's (the same items, report and guarantees), from the ViT's
// parameters as models::Vit registers them, its blocks' activations (plan/gpt_activations.h: the
// same transformer blocks, without the causal mask) and its own edges: the patch embedding, the
// class token and positions on the first stage, the final norm, pooling and classifier head on the
// last. Tensor parallelism 1D and on a grid (2D, 2.5D, 3D: the blocks' grid workspace as the
// GPT's, the edges on the rank's block of the stream's features), sequence parallelism (all_to_all,
// ring), pipelines, ZeRO 0-3, activation checkpointing and offload.
#pragma once
#include <string>

#include "models/vit/vit.h"
#include "plan/memory_plan.h"

namespace tessera::plan {

struct VitRun : RunLayout {
  models::VitConfig model;  // with the images' size, channels and classes
  int64_t tokens() const { return model.tokens(); }
};

// The ViT's blocks as the GPT formulas take them: GPT-2 blocks (LayerNorm, multi-head attention,
// a GELU MLP of mlp_ratio x hidden features) of the ViT's width, depth and heads.
models::GptConfig vit_blocks(const models::VitConfig& vit);

MemoryPlan plan_memory(const VitRun& run);
std::string describe(const MemoryPlan& plan, const VitRun& run);

}  // namespace tessera::plan
