// import-hf: reads config.json and the safetensors, checks every tensor against the config (none
// missing, none unexpected, shapes), and writes a step-0 tessera checkpoint.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>

#include "apps/common/hf_checkpoint.h"
#include "apps/common/hf_model.h"
#include "core/error.h"
#include "io/checkpoint_file.h"
#include "io/safetensors_folder.h"
#include "optim/loss_scaler.h"
#include "text/stored_tokenizer.h"

namespace tessera::hf {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read ", path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(path.string(), " is not valid JSON (", e.what(), ")");
  }
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ", path.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The folder's tokenizer, as tessera stores one: tokenizer.json (byte-level BPE), else
// tokenizer.model (SentencePiece); none when the folder has neither. One tessera cannot read is
// refused, as is one with more ids than the model's vocabulary.
text::StoredTokenizerFile folder_tokenizer(const fs::path& dir, int64_t model_vocab) {
  text::StoredTokenizerFile t;
  for (const auto& [file, kind] : {std::pair{"tokenizer.json", "hf-byte-level-bpe"}, std::pair{"tokenizer.model", "sentencepiece"}}) {
    const fs::path path = dir / file;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) continue;
    t.kind = kind;
    t.name = file;
    t.bytes = read_file(path);
    t.checksum = text::tokenizer_checksum(t.bytes);
    int64_t vocab = 0;
    try {
      vocab = text::make_tokenizer(kind, t.bytes, path.string())->vocab_size();
    } catch (const Error& e) {
      fail("model folder ", dir.string(), ": its ", file, " cannot be read as a tokenizer (", e.what(),
           "); move it out of the folder to import the weights alone");
    }
    if (vocab > model_vocab)
      fail("model folder ", dir.string(), ": its ", file, " has ", vocab, " ids, more than the model's vocabulary of ",
           model_vocab, " (config.json vocab_size)");
    return t;
  }
  return t;
}

}  // namespace

std::string import_hf(const std::string& dir, const std::string& output) {
  std::error_code ec;
  if (fs::exists(output, ec)) fail("--output ", output, " exists: nothing is overwritten (choose another name)");
  const fs::path config_path = fs::path(dir) / "config.json";
  const json config = read_json(config_path);
  const HfModel m = model_from_config(config, config_path.string());
  m.config.validate();
  const io::SafetensorsFolder folder(dir);

  const std::string prefix = m.model_type == "gpt2" && !folder.has("transformer.wte.weight") && folder.has("wte.weight") ? "" : "transformer.";
  const std::vector<TensorPair> pairs = tensor_pairs(m, prefix);
  std::set<std::string> used;
  std::set<io::StDtype> dtypes;
  for (const TensorPair& p : pairs) {
    for (const std::string& part : p.stacked) {  // mixtral's experts, one tensor each
      if (!folder.has(part)) fail("model folder ", dir, " lacks tensor ", part, ", which its config (", m.model_type, ", ",
                                  m.config.moe.experts, " experts) needs");
      const io::StTensor& t = folder.tensor(part);
      const std::vector<int64_t> want(p.shape.begin() + 1, p.shape.end());
      if (t.shape != want)
        fail(folder.file_of(part).path(), ", tensor ", part, ": shape ", shape_text(t.shape), ", the config needs ", shape_text(want));
      used.insert(part);
      dtypes.insert(t.dtype);
    }
    if (!p.stacked.empty()) continue;
    if (!folder.has(p.hf)) fail("model folder ", dir, " lacks tensor ", p.hf, ", which its config (", m.model_type, ", ",
                                m.config.layers, " layers) needs");
    const io::StTensor& t = folder.tensor(p.hf);
    const std::vector<int64_t> want = p.transposed ? std::vector<int64_t>{p.shape[1], p.shape[0]} : p.shape;
    if (t.shape != want)
      fail(folder.file_of(p.hf).path(), ", tensor ", p.hf, ": shape ", shape_text(t.shape), ", the config needs ", shape_text(want));
    used.insert(p.hf);
    dtypes.insert(t.dtype);
  }
  // A tied head stored anyway must be the token table itself.
  const bool tied = m.config.tie_embeddings;
  if (tied && folder.has("lm_head.weight")) {
    const std::string table = pairs.front().hf;
    if (folder.tensor("lm_head.weight").shape != folder.tensor(table).shape || folder.read_f32("lm_head.weight") != folder.read_f32(table))
      fail("model folder ", dir, ": lm_head.weight differs from ", table, ", but the config ties them");
    used.insert("lm_head.weight");
  }
  for (const std::string& name : folder.names())
    if (!used.count(name) && !is_known_buffer(m, name))
      fail("model folder ", dir, ": tensor ", name, " (in ", folder.file_of(name).path(), ") is unexpected for a ", m.model_type,
           " model of ", m.config.layers, " layers", tied ? " with a tied head" : "");

  const text::StoredTokenizerFile tokenizer = folder_tokenizer(dir, m.config.vocab);

  io::CheckpointWriter w(output, MPI_COMM_NULL);
  text::store_tokenizer(w, tokenizer);
  // The tokenizer's Hugging Face settings, kept as they are for export-hf.
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"})
    if (tokenizer.recorded() && fs::is_regular_file(fs::path(dir) / file, ec))
      w.write_bytes(std::string(kHfFiles) + file, read_file(fs::path(dir) / file));
  w.set_attr("step", int64_t{0});
  w.set_attr("consumed_samples", int64_t{0});
  w.set_attr("model", tessera_model_name(m));
  w.set_attr("layout", "imported from Hugging Face");
  w.set_attr("optimizer_steps", int64_t{0});
  w.set_attr("seed", int64_t{1234});  // gpt_train's default, so resuming does not warn of another run
  for (const auto& [key, value] : tessera_model_fields(m)) w.set_attr("model." + key, value);
  w.set_attr("precision", "fp32");
  const optim::LossScalerState ls;
  w.set_attr("loss_scaler.scale", ls.scale);
  w.set_attr("loss_scaler.good_steps", ls.good_steps);
  w.set_attr("loss_scaler.hysteresis_left", ls.hysteresis_left);
  w.set_attr("loss_scaler.consecutive_overflows", ls.consecutive_overflows);
  w.set_attr("loss_scaler.skipped_steps", ls.skipped_steps);
  w.set_attr("hf.model_type", m.model_type);
  w.set_attr("hf.dtype", dtypes.size() == 1 ? io::st_dtype_name(*dtypes.begin()) : "F32");
  w.set_attr("hf.norm_eps", static_cast<double>(m.config.norm_eps));
  w.set_attr("hf.rope_theta", static_cast<double>(m.config.rope_theta));
  w.set_attr("hf.max_position_embeddings", m.max_positions);
  w.set_attr("hf.config", config.dump());
  for (const TensorPair& p : pairs) {
    std::vector<float> v;
    if (p.stacked.empty()) v = folder.read_f32(p.hf);
    for (const std::string& part : p.stacked) {
      const std::vector<float> one = folder.read_f32(part);
      v.insert(v.end(), one.begin(), one.end());
    }
    if (p.transposed) {  // [in, out] -> [out, in]
      const int64_t rows = p.shape[0], cols = p.shape[1];
      std::vector<float> t(v.size());
      for (int64_t i = 0; i < cols; ++i)
        for (int64_t j = 0; j < rows; ++j) t[j * cols + i] = v[i * rows + j];
      v.swap(t);
    }
    const Shape shape(p.shape);
    const int64_t n = shape.numel();
    const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    w.create("/params/" + p.tessera, shape);
    w.write_range("/params/" + p.tessera, 0, n, v.data());
    for (const char* moment : {"/exp_avg", "/exp_avg_sq"}) {
      w.create("/optim/" + p.tessera + moment, shape);
      w.write_range("/optim/" + p.tessera + moment, 0, n, zeros.data());
    }
  }
  w.commit();
  if (config.contains("sliding_window") && config["sliding_window"].is_number_integer())
    std::cerr << "note: " << config_path.string() << " has sliding_window " << config["sliding_window"].dump()
              << "; tessera attends to every earlier position, which is the same for a --seq-len up to it\n";
  return gpt_train_flags(m);
}

}  // namespace tessera::hf
