// The model a checkpoint holds, as inference needs it: the GptConfig its root attributes record
// (model, model.<field>, hf.*), refusing the models generate cannot run yet, and the parameter
// tensors (name and shape) that config implies.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/shape.h"
#include "io/checkpoint_file.h"
#include "models/gpt/gpt.h"

namespace tessera::infer {

// Values a gpt_train checkpoint does not record (Llama's norm epsilon and rotary base): 0 takes
// the checkpoint's hf.* value if it was imported, else gpt_train's default (1e-5, 10000). A value
// given here that contradicts a recorded one is refused.
struct ModelOverrides {
  float norm_eps = 0, rope_theta = 0;
};

// The config of the checkpoint's model (`model` gpt, llama, or moe_train's moe_gpt and moe_llama,
// whose model.moe_every, experts, expert_hidden, top_k, shared_experts and gates_renormalised fill
// GptConfig::moe; its capacity factor is left 0: inference drops no token). Refused, naming the
// file and the model: a vision transformer (vit), anything else, and a checkpoint missing a
// model.<field> the family needs.
models::GptConfig model_config_of(const io::CheckpointReader& r, const ModelOverrides& overrides = {});

// Every parameter tensor of the model (without the /params/ prefix) with its global shape, in
// model order: the embeddings, each block (a MoE block: its router, stacked experts [E, out, in]
// and shared experts' MLP in place of the MLP), the final norm, an untied head.
std::vector<std::pair<std::string, Shape>> parameter_shapes(const models::GptConfig& c);

}  // namespace tessera::infer
