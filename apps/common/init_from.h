// gpt_train / moe_train --init-from FILE.h5: the model a checkpoint holds becomes the run's model.
// Its recorded fields (arch, layers, hidden, heads, vocab, positions, llama and MoE fields, and an
// imported model's norm epsilon and rotary base) set the model options; an option given on the
// command line that contradicts them is refused naming both values.
#pragma once
#include <boost/program_options.hpp>

#include <string>

#include "models/gpt/gpt.h"

namespace tessera::cli {

struct InitFromModel {
  int64_t vocab = 0;      // the checkpoint's vocabulary (>= the data's, checked by the app)
  int64_t positions = 0;  // gpt2: its learned position table's length (the longest --seq-len); llama: 0
};

// Reads `path`'s root attributes (every rank, serially: no communication) into mc, arch, router_norm
// and seq_len (a --seq-len not given becomes min(64, positions)); moe: the app is moe_train.
InitFromModel take_model_from_checkpoint(const std::string& path, bool moe, const boost::program_options::variables_map& vm,
                                         models::GptConfig& mc, std::string& arch, std::string& router_norm,
                                         int64_t& seq_len);

}  // namespace tessera::cli
