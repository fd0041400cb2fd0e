// TensorParallelGrid: the 3D linear layer (parallel/tensor_grid.h). For a layer writing a branch
// the input's rows are gathered over the columns (j) and the output's rows reduce-scattered over
// the layers (l); a layer writing the stream swaps the two. Its weight pieces are always gathered
// over the rows (i). A branch's per-sequence values come from the rank whose stream holds its rows.
#include "kernels/ops.h"
#include "parallel/tensor_grid.h"

namespace tessera::parallel {

void TensorParallelGrid::cube_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b,
                                      nn::LinearRole role, ops::MatmulInputs inputs) const {
  const bool into = role == nn::LinearRole::into_branch;
  comm::Communicator& gather = into ? row_ : depth_;
  comm::Communicator& scatter = into ? depth_ : row_;
  const Tensor xm = as_matrix(x);
  Tensor ym = as_matrix(y);
  const int64_t q = grid_.q, rows = xm.dim(0);
  Tensor whole_x = work(x_block, {q * rows, xm.dim(1)});
  gather.all_gather(xm.reshape({xm.numel()}), whole_x);
  Tensor whole_w = work(w_block, {w.dim(0), w.dim(1) * q});
  gather_columns(col_, w, whole_w);
  // The partial product over the inputs' blocks; the bias enters once, from the first of them.
  Tensor partial = work(dx_part, {q * rows, ym.dim(1)});
  const bool with_bias = b && scatter.rank() == 0;
  if (with_bias) ops::broadcast_rows(partial, *b);
  ops::matmul(whole_x, false, whole_w, true, partial, 1.0f, with_bias ? 1.0f : 0.0f, inputs);
  Tensor flat = ym.reshape({ym.numel()});
  scatter.reduce_scatter(partial.reshape({partial.numel()}), flat);
}

void TensorParallelGrid::cube_backward(Tensor* dx, const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dw,
                                       Tensor* db, bool accumulate_dx, nn::LinearRole role,
                                       ops::MatmulInputs inputs) const {
  const bool into = role == nn::LinearRole::into_branch;
  comm::Communicator& gather = into ? row_ : depth_;  // forward's: x's rows; backward: dx's reduce-scatter
  comm::Communicator& scatter = into ? depth_ : row_; // forward's: y's rows; backward: dy's gather
  const Tensor dym = as_matrix(dy);
  if (db) ops::bias_backward(*db, dym);
  if (!dx && !dw) return;
  const int64_t q = grid_.q, rows = dym.dim(0);
  Tensor whole_dy = work(dy_whole, {q * rows, dym.dim(1)});
  scatter.all_gather(dym.reshape({dym.numel()}), whole_dy);
  const ops::RoundedOperand rounded_dy(whole_dy, inputs);  // both products read it: rounded once under bf16
  if (dx) {
    Tensor whole_w = work(w_block, {w.dim(0), w.dim(1) * q});
    gather_columns(col_, w, whole_w);
    Tensor partial = work(dx_part, {q * rows, whole_w.dim(1)});
    ops::matmul(rounded_dy, false, whole_w, false, partial, 1.0f, 0.0f, inputs);
    Tensor dxm = as_matrix(*dx);
    Tensor out = accumulate_dx ? work(dx_sum, dxm.shape()) : dxm;
    Tensor flat = out.reshape({out.numel()});
    gather.reduce_scatter(partial.reshape({partial.numel()}), flat);
    if (accumulate_dx) ops::add_inplace(dxm, out);
  }
  if (dw) {
    const Tensor xm = as_matrix(x);
    Tensor whole_x = work(x_block, {q * xm.dim(0), xm.dim(1)});
    gather.all_gather(xm.reshape({xm.numel()}), whole_x);
    Tensor partial = work(dw_part, {w.dim(0), w.dim(1) * q});
    ops::matmul(rounded_dy, true, whole_x, false, partial, 1.0f, 0.0f, inputs);
    Tensor piece = work(dw_piece, w.shape());
    reduce_scatter_columns(col_, partial, piece);
    ops::add_inplace(*dw, piece);
  }
}

// The branch of rank (l, i, j) holds the rows of the stream's share (i, l) (cube_forward's gather
// over j, then its scatter over l hands layer l the gathered block l): member j = l of the grid
// row, which holds that share in its stream, sends its values along the row. 2D/2.5D: a copy.
void TensorParallelGrid::branch_sequences(const Tensor& stream, Tensor& branch) const {
  if (!grid_.cube || grid_.col == grid_.layer) branch.copy_from(stream);
  if (grid_.cube) row_.broadcast(branch, grid_.layer);
}

}  // namespace tessera::parallel
