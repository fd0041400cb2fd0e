// The trainers' shared model options.
#include "apps/common/gpt_model_options.h"

#include "core/error.h"

namespace tessera::cli {

namespace po = boost::program_options;

void GptModelOptions::add_to(OptionSections& opts) {
  models::GptConfig& mc = config;
  opts.section(kModel).add_options()
      ("arch", po::value(&arch)->default_value("gpt2")->value_name("gpt2|llama"), "model family: gpt2 (learned positions, LayerNorm, GELU MLP, tied head) or llama (RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP, no biases, untied head)")
      ("kv-heads", po::value(&mc.kv_heads)->default_value(0, "--heads")->value_name("K"), "llama: key/value heads of grouped-query attention (must divide --heads; 1: multi-query)")
      ("ffn-hidden", po::value(&mc.ffn_hidden)->default_value(0, "8/3 x --hidden, rounded up to 256")->value_name("N"), "llama: hidden size of the SwiGLU MLP (moe_train: the dense blocks', and the experts' default)")
      ("norm-eps", po::value(&mc.norm_eps)->default_value(1e-5f, "1e-5")->value_name("X"), "llama: RMSNorm epsilon")
      ("rope-theta", po::value(&mc.rope_theta)->default_value(10000.0f, "10000")->value_name("X"), "llama: base of the rotary position angles")
      ("tie-embeddings", po::bool_switch(&tie_embeddings), "llama: tie the LM head to the token embedding (gpt2's always is)")
      ("layers", po::value(&mc.layers)->default_value(4)->value_name("N"), "transformer blocks")
      ("hidden", po::value(&mc.hidden)->default_value(128)->value_name("N"), "hidden size")
      ("heads", po::value(&mc.heads)->default_value(4)->value_name("N"), "attention heads (must divide --hidden)")
      ("seq-len", po::value(&seq_len)->default_value(64)->value_name("N"), "tokens per sequence");
}

void GptModelOptions::resolve_arch() {
  config.arch = models::parse_arch(arch);
  config.tie_embeddings = !config.llama() || tie_embeddings;
}

void GptModelOptions::check_llama_options(const po::variables_map& vm) const {
  if (config.llama()) return;
  for (const char* llama_only : {"kv-heads", "ffn-hidden", "norm-eps", "rope-theta", "tie-embeddings"})
    TESSERA_CHECK(!vm.count(llama_only) || vm[llama_only].defaulted(), "--", llama_only,
                  " is an option of --arch llama (this run is --arch gpt2)");
}

}  // namespace tessera::cli
