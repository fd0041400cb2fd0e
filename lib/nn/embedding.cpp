// Token + position embedding: parameters (padded token table) and kernel calls.
#include "nn/embedding.h"

#include <algorithm>

#include "kernels/ops.h"

namespace tessera::nn {

Embedding::Embedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t max_seq,
                     int64_t channels, int64_t pad_to, float init_std, const TensorLayout& layout)
    : Embedding(store, name + ".tokens.weight", name + ".positions.weight", vocab, max_seq, channels, pad_to, init_std,
                layout) {}

Embedding Embedding::head_table(ParamStore& store, const std::string& name, int64_t vocab, int64_t channels,
                                int64_t pad_to, float init_std, const TensorLayout& layout) {
  return Embedding(store, name + ".weight", "", vocab, 0, channels, pad_to, init_std, layout);
}

Embedding::Embedding(ParamStore& store, const std::string& table_name, const std::string& positions_name,
                     int64_t vocab, int64_t max_seq, int64_t channels, int64_t pad_to, float init_std,
                     const TensorLayout& layout)
    : store_(&store), layout_(&layout), vocab_(vocab) {
  const int64_t multiple = pad_to * layout.size();
  padded_vocab_ = (vocab + multiple - 1) / multiple * multiple;
  vocab_start_ = layout.rank() * local_rows();
  const Shard vocab_rows{0, vocab_start_, local_rows(), 1, layout.size()};
  tokens_ = store.add(table_name, {vocab, channels}, Init::Normal(init_std), true,
                      layout.table_block(vocab_rows, channels));
  if (max_seq > 0)
    positions_ = store.add(positions_name, {max_seq, channels}, Init::Normal(init_std), true,
                           layout.feature_split(1, channels, 1, false, (positions_name + " features").c_str()));
  if (layout.splits_features()) {  // the table's feature blocks are gathered around each use
    store.set_partial(tokens_, layout.table_partial());
    if (positions_ >= 0) store.set_partial(positions_, PartialGrad::rows);
  } else {  // its lookup reads the bf16 copy, its tied head is a GEMM (not so the gathered blocks)
    store.set_rounded_on_read(tokens_);
  }
}

ops::Operand Embedding::table(Tensor& whole) const {
  if (!layout_->splits_features()) return store_->operand(tokens_);
  const Tensor& block = store_->value(tokens_);
  if (!whole.defined()) whole = Tensor::empty({block.dim(0), block.dim(1) * layout_->size()}, DType::f32, block.device());
  return layout_->gather_block_columns(block, whole);
}

void Embedding::add_table_grad(Tensor& whole_grad) const { layout_->scatter_block_columns(whole_grad, store_->grad(tokens_)); }

Tensor& Embedding::table_grad_workspace() const {
  if (!table_grad_.defined()) {
    const Tensor& block = store_->value(tokens_);
    table_grad_ = Tensor::empty({block.dim(0), block.dim(1) * layout_->size()}, DType::f32, block.device());
  }
  table_grad_.zero();
  return table_grad_;
}

int64_t Embedding::valid_rows() const { return std::clamp<int64_t>(vocab_ - vocab_start_, 0, local_rows()); }

void Embedding::add_document_positions(Tensor& out, const Tensor& doc_positions) const {
  const Tensor& table = store_->value(positions_);  // [max_seq, this rank's features]
  const int64_t rows = doc_positions.numel(), cols = table.dim(1);
  TESSERA_CHECK(out.numel() == rows * cols, "Embedding: document positions for ", rows, " tokens, but ",
                out.numel() / cols, " token rows");
  if (document_rows_.numel() != out.numel()) document_rows_ = Tensor::empty({rows, cols}, DType::f32, out.device());
  ops::embedding_forward(document_rows_, doc_positions, table, Tensor(), 0);  // a lookup of the positions' rows
  ops::add_inplace(out, document_rows_);
}

void Embedding::forward(Tensor& out, const Tensor& tokens, int64_t first_position, RegionWorkspace& region,
                        const Tensor& doc_positions) const {
  const int64_t seq = tokens.dim(1);
  const bool by_document = doc_positions.defined() && positions_ >= 0;
  const Tensor positions =
      positions_ >= 0 && !by_document ? store_->value(positions_).rows(first_position, seq) : Tensor();
  const bool grid = layout_->splits_features() && positions_ >= 0;
  const bool adds_positions = layout_->rank() == 0 && !layout_->splits_features();  // the exit sums the ranks' outputs
  Tensor& whole = layout_->vocab_whole(out, region);
  // The lookup reads the table as the step's rounding leaves it (ParamStore::lookup_operand).
  const ops::Operand wte = layout_->splits_features() ? table(table_) : store_->lookup_operand(tokens_);
  ops::embedding_forward(whole, tokens, wte, adds_positions ? positions : Tensor(), vocab_start_);
  if (by_document && adds_positions) add_document_positions(whole, doc_positions);
  layout_->vocab_exit(out, whole);
  if (grid && by_document) {
    add_document_positions(out, doc_positions);
  } else if (grid) {  // each rank adds its block of the positions' features
    for (int64_t b = 0; b < tokens.dim(0); ++b) {
      Tensor rows = out.rows(b * seq, seq);
      ops::add_inplace(rows, positions);
    }
  }
}

void Embedding::backward(const Tensor& dout, const Tensor& tokens, int64_t first_position,
                         RegionWorkspace& region, const Tensor& doc_positions) const {
  const int64_t seq = tokens.dim(1);
  const bool by_document = doc_positions.defined() && positions_ >= 0;
  Tensor dpositions =
      positions_ >= 0 && !by_document ? store_->grad(positions_).rows(first_position, seq) : Tensor();
  Tensor no_positions;
  const Tensor& whole_dout = layout_->vocab_exit_backward(dout, region.out);
  if (!layout_->splits_features()) {
    ops::embedding_backward(store_->grad(tokens_), dpositions, whole_dout, tokens, vocab_start_);
    // Document masking: the positions table's gradient as a lookup's, by each token's position.
    if (by_document) ops::embedding_backward(store_->grad(positions_), no_positions, whole_dout, doc_positions, 0);
    return;
  }
  Tensor& dtable = table_grad_workspace();
  ops::embedding_backward(dtable, no_positions, whole_dout, tokens, vocab_start_);
  add_table_grad(dtable);
  if (positions_ < 0) return;
  if (by_document) {
    ops::embedding_backward(store_->grad(positions_), no_positions, dout, doc_positions, 0);
    return;
  }
  for (int64_t b = 0; b < tokens.dim(0); ++b) ops::add_inplace(dpositions, dout.rows(b * seq, seq));
}

}  // namespace tessera::nn
