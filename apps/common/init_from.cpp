// take_model_from_checkpoint: the model options of gpt_train / moe_train from a checkpoint's
// model and model.<field> attributes (and hf.norm_eps, hf.rope_theta where it was imported).
#include "apps/common/init_from.h"

#include <optional>
#include <sstream>

#include "core/error.h"
#include "infer/model_spec.h"
#include "io/checkpoint_file.h"

namespace tessera::cli {
namespace po = boost::program_options;

namespace {

bool given(const po::variables_map& vm, const std::string& flag) { return vm.count(flag) && !vm[flag].defaulted(); }

template <typename T>
std::string text(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

InitFromModel take_model_from_checkpoint(const std::string& path, bool moe, const po::variables_map& vm,
                                         models::GptConfig& mc, std::string& arch, std::string& router_norm,
                                         int64_t& seq_len) {
  const io::CheckpointReader r(path, MPI_COMM_NULL);
  const std::string where = "--init-from " + path;
  TESSERA_CHECK(r.has_attr("model"), where, ": the checkpoint records no model");
  const std::string model = r.attr_string("model");
  TESSERA_CHECK(model == "gpt" || model == "llama" || model == "moe_gpt" || model == "moe_llama", where, " holds a ",
                model, " model, not a language model of gpt_train or moe_train");
  const bool moe_model = model.starts_with("moe_");
  TESSERA_CHECK(moe_model == moe, where, " holds a ", model, " model: ",
                moe_model ? "train it with moe_train" : "train it with gpt_train (moe_train starts mixture-of-experts models)");
  // The checkpoint's value of a field, refusing a flag the user gave that says otherwise.
  auto take = [&](const char* flag, const std::string& field, auto& target, auto value) {
    if (given(vm, flag) && target != value)
      fail("--", flag, " ", text(target), " contradicts ", where, ", whose model has ", field, " ", text(value),
           " (leave the option out: the checkpoint sets it)");
    target = value;
  };
  auto field = [&](const std::string& key) {
    TESSERA_CHECK(r.has_attr("model." + key), where, ": the checkpoint does not record model.", key);
    return r.attr_int("model." + key);
  };
  const std::string ckpt_arch = model.ends_with("llama") ? "llama" : "gpt2";
  take("arch", "arch", arch, ckpt_arch);
  mc.arch = models::parse_arch(arch);
  take("layers", "layers", mc.layers, field("layers"));
  take("hidden", "hidden", mc.hidden, field("hidden"));
  take("heads", "heads", mc.heads, field("heads"));
  InitFromModel got;
  got.vocab = field("vocab");
  if (mc.llama()) {
    take("kv-heads", "kv_heads", mc.kv_heads, field("kv_heads"));
    take("ffn-hidden", "ffn_hidden", mc.ffn_hidden, field("ffn_hidden"));
    const bool tied = field("tie_embeddings") != 0;
    TESSERA_CHECK(!given(vm, "tie-embeddings") || tied, "--tie-embeddings contradicts ", where,
                  ", whose model has an untied head (tie_embeddings 0)");
    mc.tie_embeddings = tied;
    // Recorded by the trainers (model.*) or an import (hf.*); a checkpoint from before either
    // leaves the options' values.
    if (const std::optional<float> eps = infer::recorded_llama_value(r, "norm_eps")) take("norm-eps", "norm_eps", mc.norm_eps, *eps);
    if (const std::optional<float> theta = infer::recorded_llama_value(r, "rope_theta"))
      take("rope-theta", "rope_theta", mc.rope_theta, *theta);
  } else {
    got.positions = field("max_seq");
    if (given(vm, "seq-len"))
      TESSERA_CHECK(seq_len <= got.positions, "--seq-len ", seq_len, " is longer than the learned position table of ",
                    where, " (", got.positions, " positions): give --seq-len ", got.positions, " or less");
    else
      seq_len = std::min(seq_len, got.positions);
  }
  if (moe) {
    take("moe-every", "moe_every", mc.moe_every, field("moe_every"));
    take("experts", "experts", mc.moe.experts, field("experts"));
    take("expert-hidden", "expert_hidden", mc.moe.hidden, field("expert_hidden"));
    take("top-k", "top_k", mc.moe.router.top_k, static_cast<int>(field("top_k")));
    take("shared-experts", "shared_experts", mc.moe.shared_experts, field("shared_experts"));
    // gates_renormalised: what --router-norm computes (auto: renormalised under top-2).
    const bool renormalised = field("gates_renormalised") != 0;
    const std::string norm = renormalised ? "softmax_topk" : "softmax";
    if (given(vm, "router-norm")) {
      const nn::RouterNorm n = nn::parse_router_norm(router_norm);
      const bool says = n == nn::RouterNorm::softmax_topk || (n == nn::RouterNorm::auto_ && mc.moe.router.top_k == 2);
      TESSERA_CHECK(says == renormalised, "--router-norm ", router_norm, " contradicts ", where, ", whose gates are ",
                    renormalised ? "" : "not ", "renormalised over the chosen experts (router norm ", norm, ")");
    }
    router_norm = norm;
  }
  return got;
}

}  // namespace tessera::cli
