// The correspondence between Hugging Face models (model_type gpt2, llama, mistral, mixtral) and
// tessera's GPT family: config.json <-> GptConfig, and each tensor's name, shape and orientation.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "models/gpt/gpt.h"

namespace tessera::hf {

// What a model folder's config.json says, in tessera's terms.
struct HfModel {
  std::string model_type;  // gpt2, llama, mistral, mixtral (a moe_llama: every block's experts)
  models::GptConfig config;
  int64_t max_positions = 0;  // n_positions / max_position_embeddings
};

// Reads config.json's fields, refusing (naming the field, its value and `where`) a model_type or a
// setting tessera's model does not compute (another activation, biases, rope_scaling...).
HfModel model_from_config(const nlohmann::json& config, const std::string& where);

// One parameter: tessera's name and shape, the Hugging Face name, and whether the Hugging Face
// tensor is the transpose (gpt2's Conv1D weights, stored [in, out]).
struct TensorPair {
  TensorPair(std::string tessera_name, std::string hf_name, std::vector<int64_t> tessera_shape,
             bool is_transposed = false, std::vector<std::string> stacked_names = {})
      : tessera(std::move(tessera_name)), hf(std::move(hf_name)), shape(std::move(tessera_shape)),
        transposed(is_transposed), stacked(std::move(stacked_names)) {}
  std::string tessera, hf;
  std::vector<int64_t> shape;  // tessera's
  bool transposed = false;
  // Mixtral's experts: the tessera tensor [E, ...] stacks these Hugging Face tensors (hf unused),
  // expert e's of shape shape[1:].
  std::vector<std::string> stacked;
};
// Every parameter of the model, in Hugging Face's order (embeddings, blocks, final norm, head).
// prefix: gpt2's "transformer." (GPT2LMHeadModel) or "" (GPT2Model).
std::vector<TensorPair> tensor_pairs(const HfModel& m, const std::string& gpt2_prefix = "transformer.");
// Tensors a Hugging Face file may hold that are buffers, not parameters (ignored on import).
bool is_known_buffer(const HfModel& m, const std::string& hf_name);

// config.json and generation_config.json as transformers writes them for that model_type.
nlohmann::json config_json(const HfModel& m, const std::string& torch_dtype);
nlohmann::json generation_config_json(const nlohmann::json& config);

// The tessera checkpoint's model name and model.<field> attributes, as gpt_train records them.
std::string tessera_model_name(const HfModel& m);
std::vector<std::pair<std::string, int64_t>> tessera_model_fields(const HfModel& m);
// The gpt_train options that build this model (for --resume FILE).
std::string gpt_train_flags(const HfModel& m);

inline constexpr const char* kTransformersVersion = "4.40.2";  // written into the JSON files

}  // namespace tessera::hf
