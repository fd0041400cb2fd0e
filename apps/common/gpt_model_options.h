// GptModelOptions: the model options gpt_train and moe_train share (--arch, the Llama options,
// --layers, --hidden, --heads, --seq-len), and MoeModelOptions moe_train's experts, declared once for
// the trainers and for the layout search, which parses the trainers' flags as they do.
#pragma once
#include <boost/program_options.hpp>

#include <cstdint>
#include <string>

#include "apps/common/cli.h"
#include "apps/common/train_cli.h"
#include "models/gpt/gpt.h"

namespace tessera::cli {

struct GptModelOptions {
  models::GptConfig config;  // the shape and the Llama fields, as parsed
  std::string arch = "gpt2";
  bool tie_embeddings = false;
  int64_t seq_len = 64;

  // The options, in the model section of --help.
  void add_to(OptionSections& opts);
  // After parsing: --arch and --tie-embeddings into config (gpt2 always ties).
  void resolve_arch();
  // Refuses a Llama option given to a gpt2 model, naming it.
  void check_llama_options(const boost::program_options::variables_map& vm) const;
};

// moe_train's expert options (--experts, --moe-every, --expert-hidden, --shared-experts,
// --router-norm, --top-k, --capacity-factor, the router's losses).
struct MoeModelOptions {
  std::string router_norm = "auto";
  void add_to(OptionSections& opts, models::GptConfig& mc);
  // After parsing (and --init-from): each value checked, the layouts the expert layers do not
  // support refused (sp, split_gather, cuda), the router's norm and the experts' hidden size resolved.
  void finish(models::GptConfig& mc, const TrainOptions& o) const;
};

}  // namespace tessera::cli
