// export-hf: a tessera checkpoint of a gpt2 or llama model to a Hugging Face folder (config.json,
// generation_config.json, safetensors sharded past a size).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "apps/common/hf_checkpoint.h"
#include "apps/common/hf_model.h"
#include "core/error.h"
#include "io/checkpoint_file.h"
#include "io/safetensors_folder.h"
#include "quant/quantized_checkpoint.h"

namespace tessera::hf {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The model the checkpoint holds, from its model.<field> attributes (and hf.* where it was imported).
// A llama value the checkpoint records (hf.<key>), else the option, else gpt_train's default.
float llama_value(const io::CheckpointReader& r, const std::string& key, float option, float fallback, const char* flag) {
  if (!r.has_attr("hf." + key)) return option > 0 ? option : fallback;
  const float recorded = static_cast<float>(r.attr_double("hf." + key));
  if (option > 0 && option != recorded)
    fail("checkpoint ", r.path(), " records ", key, " ", recorded, "; ", flag, " ", option, " contradicts it");
  return recorded;
}

HfModel model_of(const io::CheckpointReader& r, const ExportOptions& o) {
  const std::string where = "checkpoint " + r.path();
  if (!r.has_attr("model")) fail(where, " records no model");
  const std::string model = r.attr_string("model");
  if (model != "gpt" && model != "llama")
    fail(where, " holds a ", model, " model; export-hf writes gpt (gpt2) and llama models (mixture-of-experts: not yet)");
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
    g.norm_eps = llama_value(r, "norm_eps", o.norm_eps, 1e-5f, "--norm-eps");
    g.rope_theta = llama_value(r, "rope_theta", o.rope_theta, 10000.0f, "--rope-theta");
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
  } else if (m.config.llama() && (options.norm_eps <= 0 || options.rope_theta <= 0)) {
    std::cerr << "note: " << checkpoint << " does not record norm_eps or rope_theta; writing rms_norm_eps "
              << m.config.norm_eps << " and rope_theta " << m.config.rope_theta
              << " (--norm-eps and --rope-theta, else gpt_train's defaults)\n";
  }
  std::vector<io::StWriteTensor> tensors;
  for (const TensorPair& p : tensor_pairs(m)) {
    const std::string name = "/params/" + p.tessera;
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
}

}  // namespace tessera::hf
