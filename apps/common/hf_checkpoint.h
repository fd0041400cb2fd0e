// ckpt_tool's import-hf and export-hf: a Hugging Face model folder (config.json and safetensors)
// to a tessera checkpoint at step 0, and a tessera checkpoint back to such a folder.
#pragma once
#include <cstdint>
#include <string>

namespace tessera::hf {

// Where a checkpoint keeps a model folder's tokenizer files beside the tokenizer itself (byte
// datasets): /hf_files/tokenizer_config.json, /hf_files/special_tokens_map.json.
inline constexpr const char* kHfFiles = "/hf_files/";

// Writes `output` (refused if it exists): the parameters, zero AdamW moments, step 0, and the
// model attributes gpt_train records, plus hf.* attributes (model_type, dtype, norm_eps,
// rope_theta, max_position_embeddings, the config.json text) for export; the folder's tokenizer
// (tokenizer.json, else tokenizer.model) as a data set stores it (text/stored_tokenizer.h), with
// its tokenizer_config.json and special_tokens_map.json under kHfFiles. Returns the gpt_train
// options that build the model.
std::string import_hf(const std::string& dir, const std::string& output);

// Writes config.json, generation_config.json and the weights into `dir` (created; refused if it
// exists and is not empty), and the checkpoint's tokenizer: tokenizer.json (byte-level BPE) or
// tokenizer.model (SentencePiece), with the tokenizer_config.json and special_tokens_map.json an
// import kept. dtype: "f32", "bf16", "f16", or "" (the imported dtype, else f32).
// max_shard_bytes: 0 for one file. norm_eps / rope_theta (llama; 0: not given): the values a
// checkpoint gpt_train wrote does not record (else its hf.* values, else gpt_train's defaults);
// refused where the checkpoint records another.
struct ExportOptions {
  std::string dtype;
  uint64_t max_shard_bytes = 0;
  float norm_eps = 0, rope_theta = 0;
};
void export_hf(const std::string& checkpoint, const std::string& dir, const ExportOptions& options);

}  // namespace tessera::hf
