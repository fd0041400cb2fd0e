// TensorLayout: how a model's layers are split over the tensor-parallel group, as the layers see
// it: which slice of a split dimension this rank holds, and the communication at the edges of a
// tensor-parallel region (a column-split layer ... a row-split layer: an attention or MLP branch,
// the vocab-parallel embedding and head). The base class is the one-rank layout (whole tensors,
// no communication); lib/parallel implements the parallel modes, so the layers are written once.
//
// A region is entered with the token rows this rank holds and left with them; inside, every rank
// works on all N rows. Whether a rank holds all rows outside regions (1D) or a 1/tp share of them
// (sequence-split, Megatron's sequence parallelism) is the layout's business:
//                      enter (forward / backward)          exit (forward / backward)
//   1D:                identity / all-reduce dx            all-reduce y / identity
//   sequence-split:    all-gather x / reduce-scatter dx    reduce-scatter y / all-gather dy
//
// The grid layouts (2D, 2.5D, 3D: parallel/tensor_grid.h) split the residual stream's features as
// well: each rank holds a block of token rows (a share of the micro-batch's sequences) and of
// feature columns. Their linear layers communicate themselves (linear_forward/backward: SUMMA, or
// 3D's gathers), attention and MLP regions have no edges, and the vocabulary regions (embedding,
// head) gather the features:
//   grid vocab region: all-gather x's features / reduce-scatter dx; reduce-scatter y / all-gather dy.
#pragma once
#include "core/tensor.h"
#include "nn/param_store.h"

namespace tessera::nn {

// All-row workspace of a region's edges, shared by the regions of a model (undefined, and unused,
// when the layout does not split rows): the gathered input, and the whole output or gradient.
struct RegionWorkspace {
  Tensor in, out;
};

// A linear layer's place in a branch: into_branch reads the residual stream's layout and writes
// the branch's (QKV, MLP up: column-split under 1D), out_of_branch the reverse (the output
// projections: row-split under 1D). Only 3D tells them apart.
enum class LinearRole { into_branch, out_of_branch };

class TensorLayout {
 public:
  virtual ~TensorLayout() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  // This rank's slice of dimension `dim` (extent, in `groups` equal blocks, each divisible by
  // size()); `what` names the dimension in the error when it does not divide.
  Shard split(int dim, int64_t extent, int64_t groups, const char* what) const;

  // Rows this rank holds outside regions, of n token rows.
  virtual bool splits_rows() const { return false; }
  int64_t local_rows(int64_t n) const;

  // --- grid layouts (2D, 2.5D, 3D); the defaults are 1D's --------------------------------------
  // The residual stream's features are split over the size() ranks sharing this rank's token rows.
  virtual bool splits_features() const { return false; }
  int64_t local_features(int64_t c) const;
  // How many ways the tensor-parallel group splits the micro-batch's sequences, and which share
  // this rank holds (every rank of the group sees the model's micro-batch of B sequences; the
  // group's is batch_parts() x B, like expert parallelism's).
  virtual int batch_parts() const { return 1; }
  virtual int batch_part() const { return 0; }
  // Whether an attention or MLP branch holds other sequences than the residual stream's rows (3D:
  // share (row, layer) instead of (row, col)), and a per-sequence value of the stream's B sequences
  // ([B, ...] on the host, e.g. their document segments) as the branch's rows hold it: 1D, 2D and
  // 2.5D copy it; 3D broadcasts it along the grid row (parallel/tensor_grid.h).
  virtual bool branch_moves_sequences() const { return false; }
  virtual void branch_sequences(const Tensor& stream, Tensor& branch) const { branch.copy_from(stream); }
  // The shards of the grid layouts' tensors (1D: whole, see split()):
  // a vector of features (bias, layer-norm weight, the position table's columns along `dim`),
  // split like the residual stream's features, or a branch's (branch: the features an attention
  // or MLP branch works on; 3D splits them over another axis than the stream's);
  virtual Shard feature_split(int dim, int64_t extent, int64_t groups, bool branch, const char* what) const;
  // a linear layer's weight [out, in] whose outputs are split as `outputs` (from feature_split);
  virtual Shard linear_weight(Shard outputs, int64_t in, LinearRole role) const { (void)in, (void)role; return outputs; }
  // the token table [V, C] whose vocabulary rows are split as `vocab_rows` (from split()).
  virtual Shard table_block(Shard vocab_rows, int64_t channels) const { (void)channels; return vocab_rows; }
  // Which ranks' gradients complete those of weight blocks and of the table (nn::PartialGrad).
  virtual PartialGrad weight_partial() const { return PartialGrad::complete; }
  virtual PartialGrad table_partial() const { return PartialGrad::complete; }
  // y = x W^T (+ b) for a weight block, x and y the rows' feature blocks (grid layouts only); the
  // products multiply `inputs` (w: the block with the store's bf16 copy of it, if any).
  virtual void linear_forward(Tensor& y, const Tensor& x, const ops::Operand& w, const Tensor* b, LinearRole role,
                              ops::MatmulInputs inputs) const;
  // dx = dy W (overwritten, or added when accumulate_dx; skipped when dx is null); dw += dy^T x
  // and db += the rows' sums of dy, when given.
  virtual void linear_backward(Tensor* dx, const Tensor& dy, const Tensor& x, const ops::Operand& w, Tensor* dw,
                               Tensor* db, bool accumulate_dx, LinearRole role, ops::MatmulInputs inputs) const;
  // The token table's rows over all features (its feature blocks gathered over the grid column),
  // and the gradient back: block_grad += this rank's block of whole_grad summed over the column.
  // Identity / accumulate under 1D.
  virtual const Tensor& gather_block_columns(const Tensor& block, Tensor& whole) const { (void)whole; return block; }
  virtual void scatter_block_columns(Tensor& whole_grad, Tensor& block_grad) const;
  // The vocabulary regions' edges (embedding, head; see the table above): 1D's region edges.
  virtual const Tensor& vocab_enter(const Tensor& x, Tensor& whole) const { return enter(x, whole); }
  virtual void vocab_enter_backward(Tensor& dx, Tensor& whole_dx) const { enter_backward(dx, whole_dx); }
  virtual void vocab_exit(Tensor& y, Tensor& whole_y) const { exit(y, whole_y); }
  virtual const Tensor& vocab_exit_backward(const Tensor& dy, Tensor& whole) const { return exit_backward(dy, whole); }
  Tensor& vocab_whole(Tensor& rows, RegionWorkspace& w) const {
    return splits_rows() || splits_features() ? w.out : rows;
  }

  // Region edges. `whole` is [N, ...] workspace (it may be the rows tensor itself when the layout
  // does not split rows). enter returns the tensor the region reads: x, or whole filled from x.
  virtual const Tensor& enter(const Tensor& x, Tensor& whole) const { (void)whole; return x; }
  // dx (this rank's rows) from the region's partial input gradient whole_dx (all rows).
  virtual void enter_backward(Tensor& dx, Tensor& whole_dx) const { if (&dx != &whole_dx) dx.copy_from(whole_dx); }
  // y (this rank's rows) from the region's partial output whole_y (all rows).
  virtual void exit(Tensor& y, Tensor& whole_y) const { if (&y != &whole_y) y.copy_from(whole_y); }
  // The region's output gradient over all rows, from dy (this rank's rows): dy, or whole from dy.
  virtual const Tensor& exit_backward(const Tensor& dy, Tensor& whole) const { (void)whole; return dy; }
  // Where a region writes its whole output (or input gradient) before exit (enter_backward): the
  // workspace when rows are split, else the rows tensor itself.
  Tensor& whole(Tensor& rows, RegionWorkspace& w) const { return splits_rows() ? w.out : rows; }
  // The workspace for regions of n rows and `channels` features.
  RegionWorkspace workspace(int64_t n, int64_t channels, Device device) const;

  // Sums over the ranks splitting the features or vocabulary (the tp group under 1D, the stream's
  // feature ranks of a grid), in place: the vocab-parallel loss's and the split layer norm's row
  // statistics.
  virtual void all_reduce(Tensor& t) const { (void)t; }
  virtual void all_reduce_max(Tensor& t) const { (void)t; }

  static const TensorLayout& single();  // the one-rank layout
};

}  // namespace tessera::nn
