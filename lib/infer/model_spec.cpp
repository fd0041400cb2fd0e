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
  if (model != "gpt" && model != "llama" && model != "moe_gpt" && model != "moe_llama")
    fail("checkpoint ", path, " holds a ", model, " model: generate runs gpt, llama, moe_gpt and moe_llama models");
  auto field = [&](const std::string& key) {
    TESSERA_CHECK(r.has_attr("model." + key), "checkpoint ", path, " does not record model.", key);
    return r.attr_int("model." + key);
  };
  models::GptConfig c;
  c.layers = field("layers");
  c.hidden = field("hidden");
  c.heads = field("heads");
  c.vocab = field("vocab");
  if (model == "gpt" || model == "moe_gpt") {
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
  if (model == "moe_gpt" || model == "moe_llama") {
    // moe_train's blocks every moe_every-th; the gates as the router normalised them. The capacity
    // factor is not read: inference sends every token to its top-k experts (decoder.h).
    c.moe_every = field("moe_every");
    c.moe.experts = field("experts");
    c.moe.hidden = field("expert_hidden");
    c.moe.router.top_k = static_cast<int>(field("top_k"));
    c.moe.shared_experts = field("shared_experts");
    c.moe.router.norm = field("gates_renormalised") != 0 ? nn::RouterNorm::softmax_topk : nn::RouterNorm::softmax;
    c.moe.router.capacity_factor = 0.0f;
    c.moe.channels = c.hidden;
    if (c.moe.hidden == 0) c.moe.hidden = c.llama() ? c.mlp_hidden() : 4 * c.hidden;
    c.moe.swiglu = c.llama();
    TESSERA_CHECK(c.moe_every >= 1 && c.moe.experts >= 1 && c.moe.hidden >= 1 && c.moe.shared_experts >= 0 &&
                      (c.moe.router.top_k == 1 || c.moe.router.top_k == 2) && c.moe.router.top_k <= c.moe.experts,
                  "checkpoint ", path, ": its mixture-of-experts attributes do not make a model (moe_every ",
                  c.moe_every, ", experts ", c.moe.experts, ", expert_hidden ", c.moe.hidden, ", top_k ",
                  c.moe.router.top_k, ", shared_experts ", c.moe.shared_experts, ")");
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
    if (c.is_moe_block(i)) {
      const int64_t E = c.moe.experts, H = c.moe.hidden, S = c.moe.shared_experts * H;
      const std::string m = b + "moe.";
      if (!c.llama()) {
        p.insert(p.end(), {{b + "ln1.weight", Shape({C})}, {b + "ln1.bias", Shape({C})},
                           {b + "attn.qkv.weight", Shape({3 * C, C})}, {b + "attn.qkv.bias", Shape({3 * C})},
                           {b + "attn.proj.weight", Shape({C, C})}, {b + "attn.proj.bias", Shape({C})},
                           {b + "ln2.weight", Shape({C})}, {b + "ln2.bias", Shape({C})}, {m + "router.weight", Shape({E, C})},
                           {m + "experts.fc.weight", Shape({E, H, C})}, {m + "experts.fc.bias", Shape({E, H})},
                           {m + "experts.proj.weight", Shape({E, C, H})}, {m + "experts.proj.bias", Shape({E, C})}});
        if (S > 0)
          p.insert(p.end(), {{m + "shared.fc.weight", Shape({S, C})}, {m + "shared.fc.bias", Shape({S})},
                             {m + "shared.proj.weight", Shape({C, S})}, {m + "shared.proj.bias", Shape({C})}});
      } else {
        p.insert(p.end(), {{b + "ln1.weight", Shape({C})}, {b + "attn.q.weight", Shape({C, C})},
                           {b + "attn.k.weight", Shape({KV, C})}, {b + "attn.v.weight", Shape({KV, C})},
                           {b + "attn.proj.weight", Shape({C, C})}, {b + "ln2.weight", Shape({C})},
                           {m + "router.weight", Shape({E, C})}, {m + "experts.gate.weight", Shape({E, H, C})},
                           {m + "experts.up.weight", Shape({E, H, C})}, {m + "experts.down.weight", Shape({E, C, H})}});
        if (S > 0)
          p.insert(p.end(), {{m + "shared.gate.weight", Shape({S, C})}, {m + "shared.up.weight", Shape({S, C})},
                             {m + "shared.down.weight", Shape({C, S})}});
      }
      continue;
    }
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
