// whole_model_numel: the parameter count of a whole block model (every pipeline stage) from the
// stage a rank builds, shared by Gpt and Vit.
#pragma once
#include <cstdint>

#include "models/model_layout.h"
#include "nn/param_store.h"

namespace tessera::models {

// The parameters of the whole model, all stages: those of this stage's store when nothing is
// pipelined, else counted from the model's parameter list alone (Model::stage_params unsplit).
template <class Model, class Config>
int64_t whole_model_numel(const Config& config, const ModelLayout& layout, const nn::ParamStore& stage_store) {
  if (!layout.pipeline.pipelined()) return stage_store.global_numel();
  ModelLayout whole_model = layout;
  whole_model.pipeline = {};
  return Model::stage_params(config, whole_model).store.global_numel();
}

}  // namespace tessera::models
