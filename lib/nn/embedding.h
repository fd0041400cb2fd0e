// Token + learned position embedding: out[b, t] = tokens_table[token] + positions_table[t].
// The token table is padded to a multiple of `pad_to` rows (a faster tied LM head); padding rows
// stay zero. Local module.
#pragma once
#include <string>

#include "nn/param_store.h"

namespace tessera::nn {

class Embedding {
 public:
  Embedding() = default;
  Embedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t max_seq, int64_t channels,
            int64_t pad_to, float init_std);

  void forward(Tensor& out, const Tensor& tokens) const;       // tokens [B, T] i32 -> out [B, T, C]
  void backward(const Tensor& dout, const Tensor& tokens) const;  // accumulates both tables' grads

  int tokens_id() const { return tokens_; }
  int64_t vocab() const { return vocab_; }
  int64_t padded_vocab() const { return padded_vocab_; }

 private:
  ParamStore* store_ = nullptr;
  int tokens_ = -1, positions_ = -1;
  int64_t vocab_ = 0, padded_vocab_ = 0;
};

}  // namespace tessera::nn
