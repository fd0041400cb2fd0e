// gpt2 / llama / mistral config.json fields and tensor names against tessera's GPT family.
#include "apps/common/hf_model.h"

#include <tuple>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "core/error.h"

namespace tessera::hf {
namespace {
using json = nlohmann::json;

int64_t int_field(const json& c, const std::string& key, const std::string& where, int64_t fallback = -1) {
  if (!c.contains(key) || c[key].is_null()) {
    if (fallback >= 0) return fallback;
    fail(where, ": config field ", key, " is missing");
  }
  if (!c[key].is_number_integer() || c[key].get<int64_t>() < 1)
    fail(where, ": config field ", key, " = ", c[key].dump(), " is not a positive integer");
  return c[key].get<int64_t>();
}

double number_field(const json& c, const std::string& key, const std::string& where, double fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!c[key].is_number()) fail(where, ": config field ", key, " = ", c[key].dump(), " is not a number");
  return c[key].get<double>();
}

// The double config.json shows for a float: its shortest decimal (1e-05, as transformers writes it),
// not the float's exact binary value widened (9.999999747378752e-06); both read back as the same float.
double as_written(float x) {
  char text[32];
  const std::to_chars_result r = std::to_chars(text, text + sizeof(text) - 1, x);
  *r.ptr = '\0';
  return std::strtod(text, nullptr);
}

bool bool_field(const json& c, const std::string& key, bool fallback, const std::string& where) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!c[key].is_boolean()) fail(where, ": config field ", key, " = ", c[key].dump(), " is not true or false");
  return c[key].get<bool>();
}

std::string string_field(const json& c, const std::string& key, const std::string& fallback, const std::string& where) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!c[key].is_string()) fail(where, ": config field ", key, " = ", c[key].dump(), " is not a string");
  return c[key].get<std::string>();
}

// A field tessera computes one way only: absent, null, or that value.
void require(const json& c, const std::string& key, const json& value, const std::string& where, const std::string& why) {
  if (c.contains(key) && !c[key].is_null() && c[key] != value)
    fail(where, ": config field ", key, " = ", c[key].dump(), " is not supported (", why, ")");
}

}  // namespace

HfModel model_from_config(const json& c, const std::string& where) {
  if (!c.is_object()) fail(where, " is not a JSON object");
  if (!c.contains("model_type") || !c["model_type"].is_string()) fail(where, ": config field model_type is missing");
  HfModel m;
  m.model_type = c["model_type"].get<std::string>();
  models::GptConfig& g = m.config;
  if (m.model_type == "gpt2") {
    g.arch = models::Arch::gpt2;
    g.vocab = int_field(c, "vocab_size", where);
    g.hidden = int_field(c, "n_embd", where);
    g.heads = int_field(c, "n_head", where);
    g.layers = int_field(c, "n_layer", where);
    m.max_positions = g.max_seq = int_field(c, "n_positions", where);
    if (c.contains("n_inner") && !c["n_inner"].is_null() && c["n_inner"] != json(4 * g.hidden))
      fail(where, ": config field n_inner = ", c["n_inner"].dump(), " is not supported (tessera's gpt2 MLP is 4 x n_embd)");
    const std::string act = string_field(c, "activation_function", "gelu_new", where);
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      fail(where, ": config field activation_function = ", act, " is not supported (tessera's gpt2 uses GELU's tanh form: gelu_new)");
    const double eps = number_field(c, "layer_norm_epsilon", where, 1e-5);
    if (static_cast<float>(eps) != 1e-5f)
      fail(where, ": config field layer_norm_epsilon = ", eps, " is not supported (tessera's gpt2 LayerNorm uses 1e-5)");
    require(c, "scale_attn_weights", true, where, "tessera scales attention by 1/sqrt(head size)");
    require(c, "scale_attn_by_inverse_layer_idx", false, where, "tessera does not scale attention by layer");
    require(c, "tie_word_embeddings", true, where, "tessera's gpt2 ties the head to the token embedding");
    g.tie_embeddings = true;
  } else if (m.model_type == "llama" || m.model_type == "mistral" || m.model_type == "mixtral") {
    g.arch = models::Arch::llama;
    g.vocab = int_field(c, "vocab_size", where);
    g.hidden = int_field(c, "hidden_size", where);
    g.heads = int_field(c, "num_attention_heads", where);
    g.layers = int_field(c, "num_hidden_layers", where);
    g.kv_heads = int_field(c, "num_key_value_heads", where, g.heads);
    g.ffn_hidden = int_field(c, "intermediate_size", where);
    m.max_positions = int_field(c, "max_position_embeddings", where, 2048);
    g.max_seq = m.max_positions;
    g.norm_eps = static_cast<float>(number_field(c, "rms_norm_eps", where, 1e-6));
    g.rope_theta = static_cast<float>(number_field(c, "rope_theta", where, 10000.0));
    g.tie_embeddings = bool_field(c, "tie_word_embeddings", false, where);
    const std::string act = string_field(c, "hidden_act", "silu", where);
    if (act != "silu") fail(where, ": config field hidden_act = ", act, " is not supported (tessera's SwiGLU uses silu)");
    require(c, "rope_scaling", nullptr, where, "tessera's rotary positions are unscaled");
    require(c, "attention_bias", false, where, "tessera's llama attention has no biases");
    require(c, "mlp_bias", false, where, "tessera's llama MLP has no biases");
    require(c, "pretraining_tp", 1, where, "a pretraining_tp above 1 changes the computation");
    if (c.contains("head_dim") && !c["head_dim"].is_null() && c["head_dim"] != json(g.hidden / g.heads))
      fail(where, ": config field head_dim = ", c["head_dim"].dump(), " is not hidden_size / num_attention_heads");
    if (m.model_type == "mixtral") {  // every block a mixture of SwiGLU experts, top-k gates renormalised
      g.moe_every = 1;
      g.moe.experts = int_field(c, "num_local_experts", where);
      g.moe.hidden = g.ffn_hidden;
      g.moe.swiglu = true;
      g.moe.router.top_k = static_cast<int>(int_field(c, "num_experts_per_tok", where, 2));
      g.moe.router.norm = nn::RouterNorm::softmax_topk;
      if (g.moe.router.top_k != 1 && g.moe.router.top_k != 2)
        fail(where, ": config field num_experts_per_tok = ", g.moe.router.top_k, " is not supported (tessera routes to 1 or 2 experts)");
      if (number_field(c, "router_jitter_noise", where, 0.0) != 0.0)
        fail(where, ": config field router_jitter_noise = ", c["router_jitter_noise"].dump(), " is not supported (tessera's router adds no noise)");
    }
  } else {
    fail(where, ": model_type ", m.model_type, " is not supported (gpt2, llama, mistral or mixtral)");
  }
  if (g.hidden % g.heads != 0) fail(where, ": hidden size ", g.hidden, " is not divisible by ", g.heads, " heads");
  if (g.heads % g.kv() != 0) fail(where, ": ", g.kv(), " key/value heads do not divide ", g.heads, " heads");
  return m;
}

std::vector<TensorPair> tensor_pairs(const HfModel& m, const std::string& prefix) {
  const models::GptConfig& g = m.config;
  const int64_t V = g.vocab, C = g.hidden, F = g.mlp_hidden(), KV = g.kv() * (C / g.heads);
  std::vector<TensorPair> p;
  if (m.model_type == "gpt2") {
    p.push_back({"embed.tokens.weight", prefix + "wte.weight", {V, C}});
    p.push_back({"embed.positions.weight", prefix + "wpe.weight", {g.max_seq, C}});
    for (int64_t i = 0; i < g.layers; ++i) {
      const std::string t = "blocks." + std::to_string(i) + ".", h = prefix + "h." + std::to_string(i) + ".";
      p.push_back({t + "ln1.weight", h + "ln_1.weight", {C}});
      p.push_back({t + "ln1.bias", h + "ln_1.bias", {C}});
      p.push_back({t + "attn.qkv.weight", h + "attn.c_attn.weight", {3 * C, C}, true});
      p.push_back({t + "attn.qkv.bias", h + "attn.c_attn.bias", {3 * C}});
      p.push_back({t + "attn.proj.weight", h + "attn.c_proj.weight", {C, C}, true});
      p.push_back({t + "attn.proj.bias", h + "attn.c_proj.bias", {C}});
      p.push_back({t + "ln2.weight", h + "ln_2.weight", {C}});
      p.push_back({t + "ln2.bias", h + "ln_2.bias", {C}});
      p.push_back({t + "mlp.fc.weight", h + "mlp.c_fc.weight", {F, C}, true});
      p.push_back({t + "mlp.fc.bias", h + "mlp.c_fc.bias", {F}});
      p.push_back({t + "mlp.proj.weight", h + "mlp.c_proj.weight", {C, F}, true});
      p.push_back({t + "mlp.proj.bias", h + "mlp.c_proj.bias", {C}});
    }
    p.push_back({"ln_f.weight", prefix + "ln_f.weight", {C}});
    p.push_back({"ln_f.bias", prefix + "ln_f.bias", {C}});
    return p;
  }
  p.push_back({"embed.tokens.weight", "model.embed_tokens.weight", {V, C}});
  for (int64_t i = 0; i < g.layers; ++i) {
    const std::string t = "blocks." + std::to_string(i) + ".", h = "model.layers." + std::to_string(i) + ".";
    p.push_back({t + "ln1.weight", h + "input_layernorm.weight", {C}});
    p.push_back({t + "attn.q.weight", h + "self_attn.q_proj.weight", {C, C}});
    p.push_back({t + "attn.k.weight", h + "self_attn.k_proj.weight", {KV, C}});
    p.push_back({t + "attn.v.weight", h + "self_attn.v_proj.weight", {KV, C}});
    p.push_back({t + "attn.proj.weight", h + "self_attn.o_proj.weight", {C, C}});
    p.push_back({t + "ln2.weight", h + "post_attention_layernorm.weight", {C}});
    if (g.moe_every > 0) {  // mixtral: the router, and each expert's w1 (gate), w3 (up), w2 (down)
      const int64_t E = g.moe.experts, H = g.moe.hidden;
      p.push_back({t + "moe.router.weight", h + "block_sparse_moe.gate.weight", {E, C}});
      for (const auto& [name, w, shape] : {std::tuple{"gate", "w1", std::vector<int64_t>{E, H, C}},
                                           std::tuple{"up", "w3", std::vector<int64_t>{E, H, C}},
                                           std::tuple{"down", "w2", std::vector<int64_t>{E, C, H}}}) {
        TensorPair pair{t + "moe.experts." + name + ".weight", "", shape};
        for (int64_t e = 0; e < E; ++e)
          pair.stacked.push_back(h + "block_sparse_moe.experts." + std::to_string(e) + "." + w + ".weight");
        p.push_back(pair);
      }
      continue;
    }
    p.push_back({t + "mlp.gate.weight", h + "mlp.gate_proj.weight", {F, C}});
    p.push_back({t + "mlp.up.weight", h + "mlp.up_proj.weight", {F, C}});
    p.push_back({t + "mlp.down.weight", h + "mlp.down_proj.weight", {C, F}});
  }
  p.push_back({"ln_f.weight", "model.norm.weight", {C}});
  if (!g.tie_embeddings) p.push_back({"head.weight", "lm_head.weight", {V, C}});
  return p;
}

bool is_known_buffer(const HfModel& m, const std::string& name) {
  static const std::regex gpt2(R"((transformer\.)?h\.[0-9]+\.attn\.(bias|masked_bias))");
  static const std::regex llama(R"(model\.layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq)");
  return std::regex_match(name, m.model_type == "gpt2" ? gpt2 : llama);
}

json config_json(const HfModel& m, const std::string& torch_dtype) {
  const models::GptConfig& g = m.config;
  json c;
  if (m.model_type == "gpt2") {
    const int64_t eos = std::min<int64_t>(50256, g.vocab - 1);
    c = {{"activation_function", "gelu_new"}, {"architectures", {"GPT2LMHeadModel"}}, {"attn_pdrop", 0.0},
         {"bos_token_id", eos}, {"embd_pdrop", 0.0}, {"eos_token_id", eos}, {"initializer_range", 0.02},
         {"layer_norm_epsilon", 1e-05}, {"model_type", "gpt2"}, {"n_embd", g.hidden}, {"n_head", g.heads},
         {"n_inner", nullptr}, {"n_layer", g.layers}, {"n_positions", g.max_seq}, {"reorder_and_upcast_attn", false},
         {"resid_pdrop", 0.0}, {"scale_attn_by_inverse_layer_idx", false}, {"scale_attn_weights", true},
         {"use_cache", true}, {"vocab_size", g.vocab}};
  } else {
    const bool mistral = m.model_type == "mistral", mixtral = m.model_type == "mixtral";
    c = {{"architectures", {mixtral ? "MixtralForCausalLM" : mistral ? "MistralForCausalLM" : "LlamaForCausalLM"}}, {"attention_dropout", 0.0},
         {"bos_token_id", 1}, {"eos_token_id", 2}, {"hidden_act", "silu"}, {"hidden_size", g.hidden},
         {"initializer_range", 0.02}, {"intermediate_size", g.mlp_hidden()},
         {"max_position_embeddings", m.max_positions}, {"model_type", m.model_type},
         {"num_attention_heads", g.heads}, {"num_hidden_layers", g.layers}, {"num_key_value_heads", g.kv()},
         {"rms_norm_eps", as_written(g.norm_eps)}, {"rope_theta", as_written(g.rope_theta)},
         {"tie_word_embeddings", g.tie_embeddings}, {"use_cache", true}, {"vocab_size", g.vocab}};
    if (mixtral) {
      c.update({{"sliding_window", nullptr}, {"num_local_experts", g.moe.experts},
                {"num_experts_per_tok", g.moe.router.top_k}, {"output_router_logits", false},
                {"router_aux_loss_coef", 0.001}, {"router_jitter_noise", 0.0}});
    } else if (mistral) {
      c["sliding_window"] = nullptr;
    } else {
      c.update({{"attention_bias", false}, {"mlp_bias", false}, {"pretraining_tp", 1}, {"rope_scaling", nullptr}});
    }
  }
  c["torch_dtype"] = torch_dtype;
  c["transformers_version"] = kTransformersVersion;
  return c;
}

json generation_config_json(const json& config) {
  json g = {{"_from_model_config", true}, {"transformers_version", kTransformersVersion}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.contains(key) && !config[key].is_null()) g[key] = config[key];
  return g;
}

std::string tessera_model_name(const HfModel& m) {
  return m.config.moe_every > 0 ? "moe_llama" : m.config.llama() ? "llama" : "gpt";
}

std::vector<std::pair<std::string, int64_t>> tessera_model_fields(const HfModel& m) {
  const models::GptConfig& g = m.config;
  std::vector<std::pair<std::string, int64_t>> c{{"layers", g.layers}, {"hidden", g.hidden}, {"heads", g.heads}, {"vocab", g.vocab}};
  if (g.llama()) c.insert(c.end(), {{"kv_heads", g.kv()}, {"ffn_hidden", g.mlp_hidden()}, {"tie_embeddings", g.tie_embeddings}});
  else c.emplace_back("max_seq", g.max_seq);
  if (g.moe_every > 0)  // as moe_train records them (Mixtral's gates are renormalised over the chosen)
    c.insert(c.end(), {{"moe_every", g.moe_every}, {"experts", g.moe.experts}, {"expert_hidden", g.moe.hidden},
                       {"top_k", g.moe.router.top_k}, {"shared_experts", 0}, {"gates_renormalised", 1}});
  return c;
}

std::string gpt_train_flags(const HfModel& m) {
  const models::GptConfig& g = m.config;
  std::ostringstream s;
  s << "--arch " << models::arch_name(g.arch) << " --layers " << g.layers << " --hidden " << g.hidden << " --heads " << g.heads;
  if (g.llama()) {
    s << " --kv-heads " << g.kv() << " --ffn-hidden " << g.mlp_hidden() << " --norm-eps " << g.norm_eps << " --rope-theta "
      << g.rope_theta << (g.tie_embeddings ? " --tie-embeddings" : "");
  } else {
    s << " --seq-len " << g.max_seq;
  }
  if (g.moe_every > 0)
    s << " --moe-every 1 --experts " << g.moe.experts << " --expert-hidden " << g.moe.hidden << " --top-k "
      << g.moe.router.top_k << " --router-norm softmax_topk --capacity-factor 0";
  return s.str();
}

}  // namespace tessera::hf
