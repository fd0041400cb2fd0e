// TensorParallelGrid: the 2D (Optimus, SUMMA) and 2.5D (Tesseract) tensor-parallel layouts over
// the tp group arranged as d layers of q x q grids (2D: d = 1). Rank (layer, row, col) holds
//   activations: the token rows of batch share (layer, row) -- whole sequences, so attention
//     stays local -- and feature columns block col of the residual stream (heads block col);
//   weights W [out, in]: block (out block col, in block row), the same on every layer;
//   biases, layer norms, positions: feature block col (replicated over rows and layers).
// Communication (N: this rank's token rows, per linear layer of in -> out features, q steps):
//   forward   y = x W^T:  broadcast x's block along the grid row, W's block along the grid column;
//   backward  dx = dy W:  broadcast W's block along the column, reduce dx's partial block along the
//             row to its owner; dW = dy^T x: broadcast x's block along the row, reduce dW's block
//             along the column to its owner.
//   vocabulary regions (embedding, tied head; the table is vocab rows over the grid row's columns x
//   feature blocks over its column): the table's blocks all-gathered (column) and its gradient
//   reduce-scattered; the features all-gathered (row) into the head and reduce-scattered out of the
//   embedding.
//   layer norm: two all-reduces (row) of N values forward, one of 2N backward.
// Gradients: biases, norms and positions sum over the batch group (layer x row) once per step,
// weight blocks over the depth (2.5D). The loss sums over the batch group.
#pragma once
#include "comm/process_mesh.h"
#include "nn/tensor_layout.h"

namespace tessera::parallel {

class TensorParallelGrid final : public nn::TensorLayout {
 public:
  explicit TensorParallelGrid(comm::ProcessMesh& mesh);

  int rank() const override { return grid_.col; }
  int size() const override { return grid_.q; }
  bool splits_features() const override { return true; }
  int batch_parts() const override { return grid_.batch_parts(); }
  int batch_part() const override { return grid_.batch_part(); }
  nn::Shard weight_block(nn::Shard out_split, int64_t in) const override;
  bool layer_partial_weights() const override { return grid_.depth > 1; }

  void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b) const override;
  void linear_backward(Tensor* dx, const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dw, Tensor* db,
                       bool accumulate_dx) const override;

  const Tensor& gather_block_columns(const Tensor& block, Tensor& whole) const override;
  void scatter_block_columns(Tensor& whole_grad, Tensor& block_grad) const override;
  const Tensor& vocab_enter(const Tensor& x, Tensor& whole) const override;
  void vocab_enter_backward(Tensor& dx, Tensor& whole_dx) const override;
  void vocab_exit(Tensor& y, Tensor& whole_y) const override;
  const Tensor& vocab_exit_backward(const Tensor& dy, Tensor& whole) const override;

  void all_reduce(Tensor& t) const override;
  void all_reduce_max(Tensor& t) const override;

 private:
  // whole [rows, q x w] <-> the group's blocks in rank order [q, rows, w].
  const Tensor& gather_columns(comm::Communicator& group, const Tensor& part, Tensor& whole) const;
  void reduce_scatter_columns(comm::Communicator& group, const Tensor& whole, Tensor& part) const;

  comm::TpGrid grid_;
  comm::Communicator& row_;  // same token rows, the grid row's feature blocks (ordered by col)
  comm::Communicator& col_;  // same feature blocks, the layer's row shares (ordered by row)
};

}  // namespace tessera::parallel
