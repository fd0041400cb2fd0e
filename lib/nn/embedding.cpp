// Token + position embedding: parameters (padded token table) and kernel calls.
#include "nn/embedding.h"

#include "kernels/ops.h"

namespace tessera::nn {

Embedding::Embedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t max_seq,
                     int64_t channels, int64_t pad_to, float init_std)
    : store_(&store), vocab_(vocab), padded_vocab_((vocab + pad_to - 1) / pad_to * pad_to) {
  tokens_ = store.add(name + ".tokens.weight", {vocab, channels}, Init::Normal(init_std), true,
                      Shard{0, 0, padded_vocab_});
  positions_ = store.add(name + ".positions.weight", {max_seq, channels}, Init::Normal(init_std), true);
}

void Embedding::forward(Tensor& out, const Tensor& tokens) const {
  ops::embedding_forward(out, tokens, store_->value(tokens_), store_->value(positions_));
}

void Embedding::backward(const Tensor& dout, const Tensor& tokens) const {
  ops::embedding_backward(store_->grad(tokens_), store_->grad(positions_), dout, tokens);
}

}  // namespace tessera::nn
