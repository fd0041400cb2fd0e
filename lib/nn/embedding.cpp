// Token + position embedding: parameters (padded token table) and kernel calls.
#include "nn/embedding.h"

#include <algorithm>

#include "kernels/ops.h"

namespace tessera::nn {

Embedding::Embedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t max_seq,
                     int64_t channels, int64_t pad_to, float init_std, const TensorLayout& layout)
    : store_(&store), layout_(&layout), vocab_(vocab) {
  const int64_t multiple = pad_to * layout.size();
  padded_vocab_ = (vocab + multiple - 1) / multiple * multiple;
  vocab_start_ = layout.rank() * local_rows();
  tokens_ = store.add(name + ".tokens.weight", {vocab, channels}, Init::Normal(init_std), true,
                      Shard{0, vocab_start_, local_rows(), 1, layout.size()});
  positions_ = store.add(name + ".positions.weight", {max_seq, channels}, Init::Normal(init_std), true);
}

int64_t Embedding::valid_rows() const { return std::clamp<int64_t>(vocab_ - vocab_start_, 0, local_rows()); }

void Embedding::forward(Tensor& out, const Tensor& tokens, int64_t first_position, RegionWorkspace& region) const {
  const bool adds_positions = layout_->rank() == 0;  // the exit sums the ranks' outputs
  const int64_t seq = tokens.dim(1);
  Tensor& whole = layout_->whole(out, region);
  ops::embedding_forward(whole, tokens, store_->value(tokens_),
                         adds_positions ? store_->value(positions_).rows(first_position, seq) : Tensor(), vocab_start_);
  layout_->exit(out, whole);
}

void Embedding::backward(const Tensor& dout, const Tensor& tokens, int64_t first_position,
                         RegionWorkspace& region) const {
  Tensor dpositions = store_->grad(positions_).rows(first_position, tokens.dim(1));
  ops::embedding_backward(store_->grad(tokens_), dpositions, layout_->exit_backward(dout, region.out), tokens,
                          vocab_start_);
}

}  // namespace tessera::nn
