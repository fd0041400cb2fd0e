// export-hf: a tessera checkpoint of a gpt2 or llama model to a Hugging Face folder (config.json,
// generation_config.json, safetensors sharded past a size).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "apps/common/hf_checkpoint.h"
#include "apps/common/hf_model.h"
#include "core/error.h"
#include "io/checkpoint_file.h"
#include "infer/model_spec.h"
#include "io/safetensors_folder.h"
#include "quant/quantized_checkpoint.h"
#include "text/stored_tokenizer.h"

namespace tessera::hf {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The model the checkpoint holds, from its model.<field> attributes (and hf.* where it was imported).
// A llama value the checkpoint records (hf.<key>), else the option, else gpt_train's default.
HfModel model_of(const io::CheckpointReader& r, const ExportOptions& o) {
  const std::string where = "checkpoint " + r.path();
  if (!r.has_attr("model")) fail(where, " records no model");
  const std::string model = r.attr_string("model");
  if (model != "gpt" && model != "llama" && model != "moe_llama")
    fail(where, " holds a ", model, " model; export-hf writes gpt (gpt2), llama and moe_llama (mixtral) models");
  auto field = [&](const std::string& key) {
    if (!r.has_attr("model." + key)) fail(where, " does not record model.", key);
    return r.attr_int("model." + key);
  };
  HfModel m;
  models::GptConfig& g = m.config;
  g.layers = field("layers");
  g.hidden = field("hidden");
  g.heads = field("heads");
  g.vocab = field("vocab");
  if (model == "gpt") {
    m.model_type = "gpt2";
    g.arch = models::Arch::gpt2;
    m.max_positions = g.max_seq = field("max_seq");
  } else {
    m.model_type = r.has_attr("hf.model_type") ? r.attr_string("hf.model_type") : "llama";
    g.arch = models::Arch::llama;
    g.kv_heads = field("kv_heads");
    g.ffn_hidden = field("ffn_hidden");
    g.tie_embeddings = field("tie_embeddings") != 0;
    m.max_positions = r.has_attr("hf.max_position_embeddings") ? r.attr_int("hf.max_position_embeddings") : 2048;
    g.max_seq = m.max_positions;
    g.norm_eps = infer::llama_value(r, "norm_eps", o.norm_eps, 1e-5f, "--norm-eps");
    g.rope_theta = infer::llama_value(r, "rope_theta", o.rope_theta, 10000.0f, "--rope-theta");
  }
  if (model == "moe_llama") {  // Mixtral: experts in every block, no shared ones, top-k gates renormalised
    m.model_type = "mixtral";
    const int64_t every = field("moe_every"), shared = field("shared_experts"), renormalised = field("gates_renormalised");
    if (every != 1 || shared != 0 || renormalised != 1)
      fail(where, " is a moe_llama model Mixtral cannot express (moe_every ", every, ", shared_experts ", shared,
           ", gates_renormalised ", renormalised, "; Mixtral has experts in every block, none shared, and renormalises",
           " the chosen experts' gates)");
    g.moe_every = 1;
    g.moe.experts = field("experts");
    g.moe.hidden = field("expert_hidden");
    g.moe.swiglu = true;
    g.moe.router.top_k = static_cast<int>(field("top_k"));
    g.moe.router.norm = nn::RouterNorm::softmax_topk;
    if (g.moe.hidden != g.mlp_hidden())
      fail(where, ": expert_hidden ", g.moe.hidden, " differs from ffn_hidden ", g.mlp_hidden(),
           " (Mixtral's intermediate_size is both)");
  }
  if (!g.llama() && (o.norm_eps > 0 || o.rope_theta > 0))
    fail("--norm-eps and --rope-theta are for llama checkpoints; ", r.path(), " holds a gpt2 model");
  return m;
}

const char* torch_dtype(io::StDtype d) {
  return d == io::StDtype::f32 ? "float32" : d == io::StDtype::bf16 ? "bfloat16" : "float16";
}

void write_json(const fs::path& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) fail("cannot write ", path.string());
}

}  // namespace

void export_hf(const std::string& checkpoint, const std::string& dir, const ExportOptions& options) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    fail("--output ", dir, " exists and is not an empty folder: nothing is overwritten");
  const io::CheckpointReader r(checkpoint, MPI_COMM_NULL);
  if (quant::is_quantized(r))
    fail(checkpoint, " is quantised for inference (", quant::quantization_text(r),
         "): export the f32 checkpoint it was made from");
  r.verify();
  const HfModel m = model_of(r, options);
  const io::StDtype dtype = io::parse_st_dtype(
      !options.dtype.empty() ? options.dtype : r.has_attr("hf.dtype") ? r.attr_string("hf.dtype") : "f32", "--dtype");
  json config = config_json(m, torch_dtype(dtype));
  if (r.has_attr("hf.config")) {  // imported: its own config.json, with the dtype written now
    config = json::parse(r.attr_string("hf.config"));
    config["torch_dtype"] = torch_dtype(dtype);
    const HfModel same = model_from_config(config, checkpoint + "'s hf.config");
    if (tessera_model_fields(same) != tessera_model_fields(m))
      fail("checkpoint ", checkpoint, ": its hf.config disagrees with its model.* attributes");
  } else if (m.config.llama() && ((options.norm_eps <= 0 && !infer::recorded_llama_value(r, "norm_eps")) ||
                                   (options.rope_theta <= 0 && !infer::recorded_llama_value(r, "rope_theta")))) {
    std::cerr << "note: " << checkpoint << " does not record norm_eps or rope_theta; writing rms_norm_eps "
              << m.config.norm_eps << " and rope_theta " << m.config.rope_theta
              << " (--norm-eps and --rope-theta, else gpt_train's defaults)\n";
  }
  std::vector<io::StWriteTensor> tensors;
  for (const TensorPair& p : tensor_pairs(m)) {
    const std::string name = "/params/" + p.tessera;
    if (!p.stacked.empty()) {  // mixtral's experts: one Hugging Face tensor each
      if (!r.has(name) || r.shape(name).dims() != p.shape)
        fail("checkpoint ", checkpoint, " lacks tensor ", p.tessera, " ", Shape(p.shape).str());
      const Shape stack(p.shape);
      const std::vector<int64_t> one(stack.dims().begin() + 1, stack.dims().end());
      const int64_t n = stack.numel() / p.shape[0];
      std::vector<float> v(static_cast<size_t>(n));
      for (size_t e = 0; e < p.stacked.size(); ++e) {
        r.read_range(name, static_cast<int64_t>(e) * n, static_cast<int64_t>(e + 1) * n, v.data());
        tensors.push_back({p.stacked[e], dtype, one, io::st_encode(v.data(), n, dtype)});
      }
      continue;
    }
    if (!r.has(name)) fail("checkpoint ", checkpoint, " lacks tensor ", p.tessera);
    const Shape shape = r.shape(name);
    if (shape.dims() != p.shape) fail("checkpoint ", checkpoint, ", tensor ", p.tessera, ": shape ", shape.str(), " disagrees with its model attributes");
    std::vector<float> v(static_cast<size_t>(shape.numel()));
    r.read_range(name, 0, shape.numel(), v.data());
    std::vector<int64_t> hf_shape = p.shape;
    if (p.transposed) {  // [out, in] -> [in, out]
      const int64_t rows = p.shape[0], cols = p.shape[1];
      std::vector<float> t(v.size());
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = v[i * cols + j];
      v.swap(t);
      hf_shape = {cols, rows};
    }
    tensors.push_back({p.hf, dtype, hf_shape, io::st_encode(v.data(), shape.numel(), dtype)});
  }
  fs::create_directories(dir);
  io::write_safetensors_folder(dir, tensors, options.max_shard_bytes, {{"format", "pt"}});
  write_json(fs::path(dir) / "config.json", config);
  write_json(fs::path(dir) / "generation_config.json", generation_config_json(config));
  const text::StoredTokenizerFile tokenizer = text::read_stored_tokenizer_file(r);
  auto write_file = [&](const std::string& name, const std::string& bytes) {
    std::ofstream out(fs::path(dir) / name, std::ios::binary);
    out << bytes;
    out.close();
    if (!out) fail("cannot write ", (fs::path(dir) / name).string());
  };
  if (tokenizer.kind == "hf-byte-level-bpe" || tokenizer.kind == "sentencepiece") {
    write_file(tokenizer.kind == "sentencepiece" ? "tokenizer.model" : "tokenizer.json", tokenizer.bytes);
    for (const std::string& path : r.byte_datasets())
      if (path.starts_with(kHfFiles)) write_file(path.substr(std::string(kHfFiles).size()), r.read_bytes(path));
  } else if (tokenizer.recorded() && tokenizer.kind != "bytes") {
    std::cerr << "note: " << checkpoint << " was trained on ids of '" << tokenizer.kind
              << "', which have no tokenizer file: none written\n";
  }
}

}  // namespace tessera::hf
