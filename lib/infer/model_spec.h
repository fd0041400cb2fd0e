// The model a checkpoint holds, as inference needs it: the GptConfig its root attributes record
// (model, model.<field>, hf.*), refusing the models generate cannot run yet, and the parameter
// tensors (name and shape) that config implies.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/shape.h"
#include "io/checkpoint_file.h"
#include "models/gpt/gpt.h"

namespace tessera::infer {

// Llama's norm epsilon and rotary base for a checkpoint that may not record them (one written
// before the trainers recorded model.norm_eps and model.rope_theta): 0 takes the recorded value,
// else gpt_train's default (1e-5, 10000). A value given here that contradicts a recorded one is
// refused.
struct ModelOverrides {
  float norm_eps = 0, rope_theta = 0;
};

// A Llama value ("norm_eps", "rope_theta") as the checkpoint records it: model.<key> (the
// trainers), else hf.<key> (import-hf, and runs started from an import); nullopt if neither.
std::optional<float> recorded_llama_value(const io::CheckpointReader& r, const std::string& key);
// The recorded value, else `option` when given (> 0), else `fallback`; an option that contradicts
// the recorded value is refused naming both and the flag.
float llama_value(const io::CheckpointReader& r, const std::string& key, float option, float fallback,
                  const char* flag);

// The config of the checkpoint's model (`model` gpt or llama). Refused, naming the file and the
// model: a vision transformer (vit), mixture-of-experts models (not yet), anything else, and a
// checkpoint missing a model.<field> the family needs.
models::GptConfig model_config_of(const io::CheckpointReader& r, const ModelOverrides& overrides = {});

// Every parameter tensor of the model (without the /params/ prefix) with its global shape, in
// model order: the embeddings, each block, the final norm, an untied head.
std::vector<std::pair<std::string, Shape>> parameter_shapes(const models::GptConfig& c);

}  // namespace tessera::infer
