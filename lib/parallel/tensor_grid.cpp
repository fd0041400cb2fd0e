// TensorParallelGrid: shards, the 2D/2.5D SUMMA products and the feature-block gathers (the 3D
// products are in tensor_grid_3d.cpp).
#include "parallel/tensor_grid.h"

#include <cstring>

#include "kernels/ops.h"

namespace tessera::parallel {
namespace {

// blocks [q, rows, w] <-> whole [rows, q x w] (host tensors).
void blocks_to_columns(const Tensor& blocks, Tensor& whole, int q) {
  const int64_t rows = whole.dim(0), w = whole.dim(1) / q;
  const float* src = blocks.data<float>();
  float* dst = whole.data<float>();
  for (int b = 0; b < q; ++b)
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + (r * q + b) * w, src + (b * rows + r) * w, w * sizeof(float));
}

void columns_to_blocks(const Tensor& whole, Tensor& blocks, int q) {
  const int64_t rows = whole.dim(0), w = whole.dim(1) / q;
  const float* src = whole.data<float>();
  float* dst = blocks.data<float>();
  for (int b = 0; b < q; ++b)
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + (b * rows + r) * w, src + (r * q + b) * w, w * sizeof(float));
}
}  // namespace

Tensor TensorParallelGrid::as_matrix(const Tensor& t) {
  const int64_t c = t.dim(t.shape().rank() - 1);
  return t.reshape({t.numel() / c, c});
}

Tensor TensorParallelGrid::work(Slot s, const Shape& shape) const {
  Tensor& buffer = work_[s];
  if (!buffer.defined() || buffer.numel() < shape.numel()) {
    buffer = Tensor();  // freed before the larger one is made: the peak holds one of them
    buffer = Tensor::empty({shape.numel()});
  }
  return buffer.slice(0, shape);
}

TensorParallelGrid::TensorParallelGrid(comm::ProcessMesh& mesh)
    : GridShards(mesh.tp_grid()),
      row_(mesh.grid_group(comm::ProcessMesh::GridGroup::row)),
      col_(mesh.grid_group(comm::ProcessMesh::GridGroup::col)),
      depth_(mesh.grid_group(comm::ProcessMesh::GridGroup::depth)),
      features_(grid_.cube ? depth_ : row_) {}

nn::Shard GridShards::feature_split(int dim, int64_t extent, int64_t groups, bool branch,
                                            const char* what) const {
  const int64_t block = extent / groups, q = grid_.q;
  TESSERA_CHECK(block % q == 0, what, " ", block, " is not divisible by the tensor-parallel grid's side ", q);
  // 3D: a branch's features over the columns (replicated over rows and layers), the stream's over
  // the layers (replicated over rows and columns); 2D/2.5D: both over the columns.
  const bool over_columns = !grid_.cube || branch;
  const int index = over_columns ? grid_.col : grid_.layer;
  const int replica = grid_.cube && branch ? grid_.row * grid_.q + grid_.layer : grid_.batch_part();
  return {dim, index * (block / q), block / q, groups, grid_.q, -1, 0, 0, replica};
}

nn::Shard GridShards::linear_weight(nn::Shard s, int64_t in, nn::LinearRole role) const {
  const int64_t q = grid_.q;
  s.dim2 = 1;
  if (!grid_.cube) {  // block (out col, in row), copied on every layer
    TESSERA_CHECK(in % q == 0, "input features ", in, " are not divisible by the tensor-parallel grid's side ", q);
    s.local_extent2 = in / q;
    s.start2 = grid_.row * s.local_extent2;
    s.parts = grid_.q * grid_.q;
    s.replica = grid_.layer;
    return s;
  }
  // 3D: the inputs' block (the stream's features l, or the branch's j), split over the rows i.
  TESSERA_CHECK(in % (q * q) == 0, "input features ", in, " are not divisible by q^2 = ", q * q,
                " (--tp-mode 3d splits a weight's input block over the grid's rows)");
  const int in_block = role == nn::LinearRole::into_branch ? grid_.layer : grid_.col;
  s.local_extent2 = in / (q * q);
  s.start2 = in_block * (in / q) + grid_.row * s.local_extent2;
  s.parts = grid_.q * grid_.q * grid_.q;
  s.replica = 0;
  return s;
}

nn::Shard GridShards::table_block(nn::Shard s, int64_t channels) const {
  TESSERA_CHECK(channels % grid_.q == 0, "hidden size ", channels, " is not divisible by the tensor-parallel grid's side ",
                grid_.q);
  s.dim2 = 1;
  s.local_extent2 = channels / grid_.q;
  s.start2 = grid_.row * s.local_extent2;
  s.parts = grid_.q * grid_.q;
  s.replica = grid_.cube ? grid_.col : grid_.layer;  // copies: over the columns (3D), the layers (2.5D)
  return s;
}

nn::PartialGrad GridShards::weight_partial() const {
  return !grid_.cube && grid_.depth > 1 ? nn::PartialGrad::replicas : nn::PartialGrad::complete;
}

nn::PartialGrad GridShards::table_partial() const {
  return grid_.cube || grid_.depth > 1 ? nn::PartialGrad::replicas : nn::PartialGrad::complete;
}

void TensorParallelGrid::linear_forward(Tensor& y, const Tensor& x, const ops::Operand& w, const Tensor* b,
                                        nn::LinearRole role, ops::MatmulInputs inputs) const {
  if (grid_.cube) {
    cube_forward(y, x, w.values, b, role, inputs);  // multiplies gathered weights: no copy to read
  } else {
    summa_forward(y, x, w, b, inputs);
  }
}

void TensorParallelGrid::linear_backward(Tensor* dx, const Tensor& dy, const Tensor& x, const ops::Operand& w,
                                         Tensor* dw, Tensor* db, bool accumulate_dx, nn::LinearRole role,
                                         ops::MatmulInputs inputs) const {
  if (grid_.cube) {
    cube_backward(dx, dy, x, w.values, dw, db, accumulate_dx, role, inputs);
  } else {
    summa_backward(dx, dy, x, w, dw, db, accumulate_dx, inputs);
  }
}

// y[row, col] = b[col] + sum_k x[row, k] W[col, k]^T: step k broadcasts x's block k along the grid
// row (from column k) and W's block (col, k) along the grid column (from row k). The root sends
// its own block in place (and multiplies it with its bf16 copy); the others receive into the workspace.
void TensorParallelGrid::summa_forward(Tensor& y, const Tensor& x, const ops::Operand& w, const Tensor* b,
                                       ops::MatmulInputs inputs) const {
  Tensor xm = as_matrix(x), ym = as_matrix(y);
  Tensor xk = work(x_block, xm.shape()), wk = work(w_block, w.values.shape());
  if (b) {
    ops::broadcast_rows(ym, *b);
  } else {
    ym.zero();
  }
  for (int k = 0; k < grid_.q; ++k) {
    Tensor x_step = grid_.col == k ? xm : xk;
    ops::Operand w_step = grid_.row == k ? w : ops::Operand(wk);
    row_.broadcast(x_step, k);
    col_.broadcast(w_step.values, k);
    ops::matmul(x_step, false, w_step, true, ym, 1.0f, 1.0f, inputs);
  }
}

// dx[row, k] = sum_col dy[row, col] W[col, k]: W's block (col, k) broadcast along the column, the
// partial products reduced along the row to column k. dW[col, k] = sum_row dy[row, col]^T x[row, k]:
// x's block k broadcast along the row, the partial products reduced along the column to row k.
void TensorParallelGrid::summa_backward(Tensor* dx, const Tensor& dy, const Tensor& x, const ops::Operand& w,
                                        Tensor* dw, Tensor* db, bool accumulate_dx, ops::MatmulInputs inputs) const {
  Tensor dym = as_matrix(dy), xm = as_matrix(x);
  if (db) ops::bias_backward(*db, dym);
  if (!dx && !dw) return;
  const ops::RoundedOperand rounded_dy(dym, inputs);  // every step's products read it: rounded once under bf16
  Tensor wk = work(w_block, w.values.shape()), xk = work(x_block, xm.shape());
  Tensor dx_part = work(Slot::dx_part, xm.shape()), dw_part = work(Slot::dw_part, w.values.shape());
  for (int k = 0; k < grid_.q; ++k) {
    if (dx) {
      ops::Operand w_step = grid_.row == k ? w : ops::Operand(wk);
      col_.broadcast(w_step.values, k);
      ops::matmul(rounded_dy, false, w_step, false, dx_part, 1.0f, 0.0f, inputs);
      row_.reduce_sum(dx_part, k);
      if (grid_.col == k) {
        Tensor dxm = as_matrix(*dx);
        if (accumulate_dx) {
          ops::add_inplace(dxm, dx_part);
        } else {
          dxm.copy_from(dx_part);
        }
      }
    }
    if (dw) {
      Tensor x_step = grid_.col == k ? xm : xk;
      row_.broadcast(x_step, k);
      ops::matmul(rounded_dy, true, x_step, false, dw_part, 1.0f, 0.0f, inputs);
      col_.reduce_sum(dw_part, k);
      if (grid_.row == k) ops::add_inplace(*dw, dw_part);
    }
  }
}

const Tensor& TensorParallelGrid::gather_columns(comm::Communicator& group, const Tensor& part, Tensor& whole) const {
  Tensor blocks = work(gathered, {static_cast<int64_t>(grid_.q) * part.numel()});
  group.all_gather(part.reshape({part.numel()}), blocks);
  Tensor wm = as_matrix(whole);
  blocks_to_columns(blocks, wm, grid_.q);
  return whole;
}

void TensorParallelGrid::reduce_scatter_columns(comm::Communicator& group, const Tensor& whole, Tensor& part) const {
  Tensor blocks = work(scattered, {whole.numel()});
  columns_to_blocks(as_matrix(whole), blocks, grid_.q);
  Tensor flat = part.reshape({part.numel()});
  group.reduce_scatter(blocks, flat);
}

const Tensor& TensorParallelGrid::gather_block_columns(const Tensor& block, Tensor& whole) const {
  return gather_columns(col_, block, whole);
}

void TensorParallelGrid::scatter_block_columns(Tensor& whole_grad, Tensor& block_grad) const {
  Tensor part = work(scatter_part, block_grad.shape());
  reduce_scatter_columns(col_, whole_grad, part);
  ops::add_inplace(block_grad, part);
}

const Tensor& TensorParallelGrid::vocab_enter(const Tensor& x, Tensor& whole) const {
  return gather_columns(features_, x, whole);
}

void TensorParallelGrid::vocab_enter_backward(Tensor& dx, Tensor& whole_dx) const {
  reduce_scatter_columns(features_, whole_dx, dx);
}

void TensorParallelGrid::vocab_exit(Tensor& y, Tensor& whole_y) const {
  reduce_scatter_columns(features_, whole_y, y);
}

const Tensor& TensorParallelGrid::vocab_exit_backward(const Tensor& dy, Tensor& whole) const {
  return gather_columns(features_, dy, whole);
}

void TensorParallelGrid::all_reduce(Tensor& t) const {
  if (grid_.q > 1) features_.all_reduce_sum(t);
}

void TensorParallelGrid::all_reduce_max(Tensor& t) const {
  if (grid_.q > 1) features_.all_reduce_max(t);
}

}  // namespace tessera::parallel
