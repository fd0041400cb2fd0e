// Token + learned position embedding: out[b, t] = tokens_table[token] + positions_table[t].
// The token table is padded to a multiple of `pad_to` x tp rows (a faster tied LM head); padding
// rows stay zero. Under a tensor-parallel layout the token table is vocab-parallel: each rank
// holds a contiguous slice of the rows and looks up the tokens inside it (zero for the others;
// rank 0 adds the positions): a region whose exit (nn/tensor_layout.h) sums the ranks' outputs.
// Under a grid layout (2D, 2.5D, 3D) the table's vocabulary rows are split like that over the
// ranks splitting the stream's features, and its features over the grid column: the blocks are gathered around each use (the
// lookup, the head), the lookup's output reduce-scattered to the rank's feature block, and each
// rank adds its block of the positions.
#pragma once
#include <string>

#include "nn/param_store.h"
#include "nn/tensor_layout.h"

namespace tessera::nn {

class Embedding {
 public:
  Embedding() = default;
  // max_seq 0: no position table (Llama's positions are rotary, inside attention).
  Embedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t max_seq, int64_t channels,
            int64_t pad_to, float init_std, const TensorLayout& layout = TensorLayout::single());
  // An untied LM head's table (Llama's head.weight): the token table's vocab-parallel rows and
  // padding, registered as `name`.weight; only table() and its gradient are used.
  static Embedding head_table(ParamStore& store, const std::string& name, int64_t vocab, int64_t channels,
                              int64_t pad_to, float init_std, const TensorLayout& layout = TensorLayout::single());

  // tokens [B, T] i32 at positions [first_position, first_position + T) -> out: the token rows
  // this rank holds ([B x T, C], or a share of them when the layout splits rows). doc_positions
  // (document masking, nn::DocumentMask::positions: [B, T] i32, each token's index inside its
  // document) replace first_position + t when given.
  void forward(Tensor& out, const Tensor& tokens, int64_t first_position, RegionWorkspace& region,
               const Tensor& doc_positions = Tensor()) const;
  // Accumulates both tables' gradients.
  void backward(const Tensor& dout, const Tensor& tokens, int64_t first_position, RegionWorkspace& region,
                const Tensor& doc_positions = Tensor()) const;

  int tokens_id() const { return tokens_; }
  int64_t vocab() const { return vocab_; }
  int64_t padded_vocab() const { return padded_vocab_; }
  // This rank's rows of the token table: ids [vocab_start(), vocab_start() + local_rows()), of
  // which the first valid_rows() are real (the rest is padding).
  int64_t vocab_start() const { return vocab_start_; }
  int64_t local_rows() const { return padded_vocab_ / layout_->size(); }
  int64_t valid_rows() const;
  const TensorLayout& layout() const { return *layout_; }
  // This rank's rows of the table over all features: the value (with the store's bf16 copy of it,
  // if any; gathered into `whole` under a grid layout, without a copy), and the gradient:
  // table_grad_workspace() zeroed, then add_table_grad() adds this rank's block of it (summed over
  // the ranks sharing the rows).
  ops::Operand table(Tensor& whole) const;
  Tensor& table_grad_workspace() const;
  void add_table_grad(Tensor& whole_grad) const;

 private:
  Embedding(ParamStore& store, const std::string& table_name, const std::string& positions_name, int64_t vocab,
            int64_t max_seq, int64_t channels, int64_t pad_to, float init_std, const TensorLayout& layout);

  ParamStore* store_ = nullptr;
  int tokens_ = -1, positions_ = -1;  // positions_ -1: none
  const TensorLayout* layout_ = nullptr;
  int64_t vocab_ = 0, padded_vocab_ = 0, vocab_start_ = 0;
  mutable Tensor table_, table_grad_;  // grid layouts: the gathered rows and their gradient
  mutable Tensor document_rows_;       // document masking: the position rows each token reads
  // Document masking: out += the positions table's rows at doc_positions (this rank's features).
  void add_document_positions(Tensor& out, const Tensor& doc_positions) const;
};

}  // namespace tessera::nn
