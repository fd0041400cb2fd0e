// TensorParallelGrid: the 2D (Optimus, SUMMA), 2.5D (Tesseract) and 3D tensor-parallel layouts
// over the tp group arranged as layers x q x q (2D: one layer; 2.5D: d; 3D: q, a cube).
//
// 2D / 2.5D: rank (layer, row, col) holds
//   activations: the token rows of sequence share (layer, row) of the micro-batch -- whole
//     sequences, so attention stays local -- and feature block col (heads block col);
//   weights W [out, in]: block (out block col, in block row), the same on every layer;
//   biases, layer norms, positions: feature block col (replicated over rows and layers).
//   A linear layer is SUMMA over q steps: step k broadcasts x's block k along the grid row (from
//   column k) and W's block (col, k) along the grid column (from row k); backward broadcasts W's
//   block along the column and reduces dx's partial block along the row to column k, and
//   broadcasts x's block along the row and reduces dW's partial block along the column to row k.
// 3D: rank (layer l, row i, col j). The residual stream holds rows of share (i, j) and features
//   block l; a branch (attention, MLP hidden) rows of share (i, l) and features block j. A layer
//   writing a branch (QKV, MLP up) holds W's block (out j, in l) split over i along its inputs:
//   forward all-gathers x's rows over j, W's pieces over i, multiplies, and reduce-scatters the
//   rows of the partial product over l; backward all-gathers dy over l and reduce-scatters dx
//   over j and dW's pieces over i. A layer writing the stream (the projections) swaps j and l.
//   A branch's per-sequence values (document segments: nn::DocumentMask) are those of the stream's
//   share (i, l), which rank (l, i, j = l) holds: broadcast along the grid row (branch_sequences).
//
// Vocabulary regions (embedding, tied head; all modes): the table's vocabulary rows are split
// over the ranks splitting the stream's features, its features over the grid column's ranks (i);
// the blocks are all-gathered around each use and the gradient reduce-scattered back; the
// lookup's [N, C] output is reduce-scattered to the rank's feature block, the head's input
// all-gathered, and the loss is vocab-parallel over the feature ranks (an untied head: the same
// over its own table). Layer norms all-reduce their row statistics over the feature ranks (two
// all-reduces of N values forward, one of 2N backward; Llama's RMSNorm one of its rows' sums of
// squares forward, one of N backward). Llama's attention splits the kv heads over the branch's
// feature ranks like the query heads (q must divide them: nn/attention.cpp refuses fewer), and
// rotates each rank's heads at their positions (every rank holds whole sequences). Gradients of vectors and replicated blocks are completed once per step over the
// groups nn::PartialGrad names (train/trainer.cpp). The loss sums over the ranks splitting rows.
#pragma once
#include "comm/process_mesh.h"
#include "nn/tensor_layout.h"

namespace tessera::parallel {

// The grid's shards as one rank's coordinates see them, with no communicator: what
// TensorParallelGrid holds, and what the memory planner registers a rank's parameters under
// (plan/planning_layouts.h) without running it.
class GridShards : public nn::TensorLayout {
 public:
  explicit GridShards(const comm::TpGrid& grid) : grid_(grid) {}

  // The ranks splitting the stream's features and the vocabulary: the grid row (2D, 2.5D) or
  // the layers (3D).
  int rank() const override { return grid_.cube ? grid_.layer : grid_.col; }
  int size() const override { return grid_.q; }
  bool splits_features() const override { return true; }
  int batch_parts() const override { return grid_.batch_parts(); }
  int batch_part() const override { return grid_.batch_part(); }
  bool branch_moves_sequences() const override { return grid_.cube; }

  nn::Shard feature_split(int dim, int64_t extent, int64_t groups, bool branch, const char* what) const override;
  nn::Shard linear_weight(nn::Shard outputs, int64_t in, nn::LinearRole role) const override;
  nn::Shard table_block(nn::Shard vocab_rows, int64_t channels) const override;
  nn::PartialGrad weight_partial() const override;
  nn::PartialGrad table_partial() const override;

 protected:
  comm::TpGrid grid_;
};

class TensorParallelGrid final : public GridShards {
 public:
  explicit TensorParallelGrid(comm::ProcessMesh& mesh);

  void branch_sequences(const Tensor& stream, Tensor& branch) const override;

  void linear_forward(Tensor& y, const Tensor& x, const ops::Operand& w, const Tensor* b, nn::LinearRole role,
                      ops::MatmulInputs inputs) const override;
  void linear_backward(Tensor* dx, const Tensor& dy, const Tensor& x, const ops::Operand& w, Tensor* dw, Tensor* db,
                       bool accumulate_dx, nn::LinearRole role, ops::MatmulInputs inputs) const override;

  const Tensor& gather_block_columns(const Tensor& block, Tensor& whole) const override;
  void scatter_block_columns(Tensor& whole_grad, Tensor& block_grad) const override;
  const Tensor& vocab_enter(const Tensor& x, Tensor& whole) const override;
  void vocab_enter_backward(Tensor& dx, Tensor& whole_dx) const override;
  void vocab_exit(Tensor& y, Tensor& whole_y) const override;
  const Tensor& vocab_exit_backward(const Tensor& dy, Tensor& whole) const override;

  void all_reduce(Tensor& t) const override;
  void all_reduce_max(Tensor& t) const override;

 private:
  void summa_forward(Tensor& y, const Tensor& x, const ops::Operand& w, const Tensor* b,
                     ops::MatmulInputs inputs) const;
  void summa_backward(Tensor* dx, const Tensor& dy, const Tensor& x, const ops::Operand& w, Tensor* dw, Tensor* db,
                      bool accumulate_dx, ops::MatmulInputs inputs) const;
  void cube_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b, nn::LinearRole role,
                    ops::MatmulInputs inputs) const;
  void cube_backward(Tensor* dx, const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dw, Tensor* db,
                     bool accumulate_dx, nn::LinearRole role, ops::MatmulInputs inputs) const;
  static Tensor as_matrix(const Tensor& t);  // [..., c] as [rows, c]
  // Workspace kept between calls (a step allocates nothing once every layer has run): a view of
  // slot s's buffer, which grows (freed first) to the largest shape asked of it.
  enum Slot { x_block, w_block, dx_part, dw_part, dy_whole, dw_piece, dx_sum, gathered, scattered, scatter_part, kSlots };
  Tensor work(Slot s, const Shape& shape) const;
  // whole [rows, q x w] <-> the group's blocks in rank order [q, rows, w].
  const Tensor& gather_columns(comm::Communicator& group, const Tensor& part, Tensor& whole) const;
  void reduce_scatter_columns(comm::Communicator& group, const Tensor& whole, Tensor& part) const;

  comm::Communicator& row_;       // varies col (ordered by col)
  comm::Communicator& col_;       // varies row
  comm::Communicator& depth_;     // varies layer
  comm::Communicator& features_;  // the stream's feature ranks: row_ (2D, 2.5D), depth_ (3D)
  mutable Tensor work_[kSlots];
};

}  // namespace tessera::parallel
