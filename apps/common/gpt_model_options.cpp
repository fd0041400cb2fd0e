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

void MoeModelOptions::add_to(OptionSections& opts, models::GptConfig& mc) {
  nn::RouterOptions& r = mc.moe.router;
  mc.moe_every = 2;
  opts.section(kModel).add_options()
      ("experts", po::value(&mc.moe.experts)->default_value(8)->value_name("N"), "experts per MoE layer (a multiple of --ep)")
      ("moe-every", po::value(&mc.moe_every)->default_value(2)->value_name("N"), "every N-th block has a mixture-of-experts feed-forward (blocks N-1, 2N-1, ...)")
      ("expert-hidden", po::value(&mc.moe.hidden)->default_value(0)->value_name("N"), "hidden size of each expert's MLP (0: gpt2 4 x --hidden, llama the dense blocks' --ffn-hidden)")
      ("shared-experts", po::value(&mc.moe.shared_experts)->default_value(0)->value_name("N"), "always-on experts beside the routed ones (DeepSeekMoE): a dense MLP of N x --expert-hidden added to each MoE layer's output")
      ("router-norm", po::value(&router_norm)->default_value("auto")->value_name("auto|softmax|softmax_topk"), "gate weights: softmax (the chosen experts' probabilities), softmax_topk (renormalised over the chosen, i.e. a softmax over the top-k logits: GShard, Mixtral) or auto (top-1 softmax, top-2 softmax_topk)")
      ("top-k", po::value(&r.top_k)->default_value(2)->value_name("1|2"), "experts per token: 1 (Switch) or 2 (GShard)")
      ("capacity-factor", po::value(&r.capacity_factor)->default_value(1.25f, "1.25")->value_name("X"), "expert capacity = factor x tokens x top-k / experts over the ep group; tokens past it are dropped (0: no drop)")
      ("aux-loss-coef", po::value(&r.aux_loss_coef)->default_value(0.01f, "0.01")->value_name("X"), "weight of the load-balancing loss")
      ("z-loss-coef", po::value(&r.z_loss_coef)->default_value(0.001f, "0.001")->value_name("X"), "weight of the router z-loss");
}

void MoeModelOptions::finish(models::GptConfig& mc, const TrainOptions& o) const {
  nn::RouterOptions& r = mc.moe.router;
  TESSERA_CHECK(mc.moe.experts >= 1, "--experts must be >= 1, got ", mc.moe.experts);
  TESSERA_CHECK(mc.moe_every >= 1, "--moe-every must be >= 1 (every N-th block has experts), got ", mc.moe_every);
  TESSERA_CHECK(mc.moe.hidden >= 0, "--expert-hidden must be >= 0 (0: 4 x --hidden), got ", mc.moe.hidden);
  TESSERA_CHECK(r.top_k == 1 || r.top_k == 2, "--top-k ", r.top_k, ": expected 1 (Switch) or 2 (GShard)");
  TESSERA_CHECK(r.capacity_factor >= 0, "--capacity-factor must be >= 0 (0: no drop), got ", r.capacity_factor);
  TESSERA_CHECK(r.aux_loss_coef >= 0, "--aux-loss-coef must be >= 0, got ", r.aux_loss_coef);
  TESSERA_CHECK(r.z_loss_coef >= 0, "--z-loss-coef must be >= 0, got ", r.z_loss_coef);
  TESSERA_CHECK(o.mesh.sp == 1 && !o.split_gather(), "moe_train: sequence parallelism (--sp, --sp-mode split_gather) is",
                " not supported with mixture-of-experts layers yet");
  TESSERA_CHECK(o.device() == Device::cpu, "moe_train --device cuda: the mixture-of-experts layers have no CUDA",
                " kernels yet; run on cpu");
  TESSERA_CHECK(mc.moe.shared_experts >= 0, "--shared-experts must be >= 0, got ", mc.moe.shared_experts);
  r.norm = nn::parse_router_norm(router_norm);
  if (mc.moe.hidden == 0) mc.moe.hidden = mc.llama() ? mc.mlp_hidden() : 4 * mc.hidden;
}

}  // namespace tessera::cli
