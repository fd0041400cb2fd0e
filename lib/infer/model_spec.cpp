// model_config_of / parameter_shapes: a checkpoint's model attributes to a GptConfig, and the
// tensors it implies (the names gpt_train writes, docs/models.md).
#include "infer/model_spec.h"

#include "core/error.h"

namespace tessera::infer {

std::optional<float> recorded_llama_value(const io::CheckpointReader& r, const std::string& key) {
  for (const std::string& name : {"model." + key, "hf." + key})
    if (r.has_attr(name)) return static_cast<float>(r.attr_double(name));
  return std::nullopt;
}

float llama_value(const io::CheckpointReader& r, const std::string& key, float option, float fallback,
                  const char* flag) {
  const std::optional<float> recorded = recorded_llama_value(r, key);
  if (!recorded) return option > 0 ? option : fallback;
  TESSERA_CHECK(option <= 0 || option == *recorded, "checkpoint ", r.path(), " records ", key, " ", *recorded, "; ",
                flag, " ", option, " contradicts it");
  return *recorded;
}

models::GptConfig model_config_of(const io::CheckpointReader& r, const ModelOverrides& o) {
  const std::string& path = r.path();
  TESSERA_CHECK(r.has_attr("model"), "checkpoint ", path, " records no model (attribute `model`)");
  const std::string model = r.attr_string("model");
  if (model == "vit")
    fail("checkpoint ", path, " holds a vision transformer (model vit): generate runs language models (gpt, llama)");
  if (model == "moe_gpt" || model == "moe_llama")
    fail("checkpoint ", path, " holds a mixture-of-experts model (", model,
         "): generate does not run mixture-of-experts models yet (gpt and llama only)");
  if (model != "gpt" && model != "llama")
    fail("checkpoint ", path, " holds a ", model, " model: generate runs gpt and llama models");
  auto field = [&](const std::string& key) {
    TESSERA_CHECK(r.has_attr("model." + key), "checkpoint ", path, " does not record model.", key);
    return r.attr_int("model." + key);
  };
  models::GptConfig c;
  c.layers = field("layers");
  c.hidden = field("hidden");
  c.heads = field("heads");
  c.vocab = field("vocab");
  if (model == "gpt") {
    c.arch = models::Arch::gpt2;
    c.max_seq = field("max_seq");
    TESSERA_CHECK(o.norm_eps <= 0 && o.rope_theta <= 0, "--norm-eps and --rope-theta are for llama checkpoints; ",
                  path, " holds a gpt2 model");
  } else {
    c.arch = models::Arch::llama;
    c.kv_heads = field("kv_heads");
    c.ffn_hidden = field("ffn_hidden");
    c.tie_embeddings = field("tie_embeddings") != 0;
    c.max_seq = r.has_attr("hf.max_position_embeddings") ? r.attr_int("hf.max_position_embeddings") : 2048;
    c.norm_eps = llama_value(r, "norm_eps", o.norm_eps, 1e-5f, "--norm-eps");
    c.rope_theta = llama_value(r, "rope_theta", o.rope_theta, 10000.0f, "--rope-theta");
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("checkpoint ", path, ": its model attributes do not make a model: ", e.what());
  }
  return c;
}

std::vector<std::pair<std::string, Shape>> parameter_shapes(const models::GptConfig& c) {
  const int64_t V = c.vocab, C = c.hidden, F = c.mlp_hidden(), KV = c.kv() * (C / c.heads);
  std::vector<std::pair<std::string, Shape>> p{{"embed.tokens.weight", Shape({V, C})}};
  if (!c.llama()) p.emplace_back("embed.positions.weight", Shape({c.max_seq, C}));
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    if (!c.llama()) {
      p.insert(p.end(), {{b + "ln1.weight", Shape({C})}, {b + "ln1.bias", Shape({C})},
                         {b + "attn.qkv.weight", Shape({3 * C, C})}, {b + "attn.qkv.bias", Shape({3 * C})},
                         {b + "attn.proj.weight", Shape({C, C})}, {b + "attn.proj.bias", Shape({C})},
                         {b + "ln2.weight", Shape({C})}, {b + "ln2.bias", Shape({C})},
                         {b + "mlp.fc.weight", Shape({F, C})}, {b + "mlp.fc.bias", Shape({F})},
                         {b + "mlp.proj.weight", Shape({C, F})}, {b + "mlp.proj.bias", Shape({C})}});
    } else {
      p.insert(p.end(), {{b + "ln1.weight", Shape({C})}, {b + "attn.q.weight", Shape({C, C})},
                         {b + "attn.k.weight", Shape({KV, C})}, {b + "attn.v.weight", Shape({KV, C})},
                         {b + "attn.proj.weight", Shape({C, C})}, {b + "ln2.weight", Shape({C})},
                         {b + "mlp.gate.weight", Shape({F, C})}, {b + "mlp.up.weight", Shape({F, C})},
                         {b + "mlp.down.weight", Shape({C, F})}});
    }
  }
  p.emplace_back("ln_f.weight", Shape({C}));
  if (!c.llama()) p.emplace_back("ln_f.bias", Shape({C}));
  if (!c.tie_embeddings) p.emplace_back("head.weight", Shape({V, C}));
  return p;
}

}  // namespace tessera::infer
