// Linear: y = x W^T + b, W [out, in] (PyTorch layout). Under a tensor-parallel layout a linear is
//   column-split: this rank holds a slice of the output features (W rows, b) and computes its
//     slice of y from the whole x; its dx is partial (a sum over the group completes it);
//   row-split: this rank holds a slice of the input features (W columns; b whole), takes its slice
//     of x, and its y is partial (b is added by tp rank 0 only, so the sum adds it once).
//   block (the grid layouts, 2D/2.5D/3D): this rank holds a block of W (a slice of the outputs and
//     of the inputs) and of x and y; the layout communicates and multiplies (a column-split
//     option means the layer writes a branch, a row-split one that it writes the stream).
// Under 1D the layer itself never communicates: the sums happen at the edges of the region it is
// part of (nn/tensor_layout.h).
#pragma once
#include <string>

#include "nn/param_store.h"
#include "nn/tensor_layout.h"
#include "nn/weight_grads.h"

namespace tessera::nn {

enum class Split { none, columns, rows, block };

struct LinearOptions {
  bool bias = true;
  float init_std = 0.02f;
  Split split = Split::none;
  int64_t groups = 1;  // columns split inside each of `groups` blocks of the outputs (fused QKV: 3)
  // A layer at the edge of the residual stream (a ViT's patch embedding and classifier head):
  // whole under 1D; under a grid layout split like 1D over the ranks splitting the stream's
  // features (columns: its outputs are the stream's features; rows: its inputs are, and the
  // caller sums the partial outputs with TensorLayout::all_reduce).
  bool stream_edge = false;
};

class Linear {
 public:
  Linear() = default;
  Linear(ParamStore& store, const std::string& name, int64_t in, int64_t out, const LinearOptions& options,
         const TensorLayout& layout = TensorLayout::single());

  // x [N, in_local] -> y [N, out_local] (overwritten).
  void forward(Tensor& y, const Tensor& x) const;
  // out = gelu(pre), pre = x W^T + b (the MLP's first layer; pre is kept for the backward). A layer
  // that adds its whole bias (unsplit or split by output columns) does it as one fused op
  // (ops::linear_forward: one cuBLASLt GEMM with a bias + GELU epilogue on CUDA); 2D/3D block
  // splits run forward, then the GELU. Row splits are refused (their output is partial).
  void forward_gelu(Tensor& out, Tensor& pre, const Tensor& x) const;
  // dW += dy^T x, db += sum_n dy; dx = dy W (overwritten, or added when accumulate_dx). dx may be
  // null when the input needs no gradient. With `defer`, only dx now: dW and db are recorded
  // there for later (x_outlives: x stays valid until then, so it is not copied).
  void backward(Tensor* dx, const Tensor& dy, const Tensor& x, bool accumulate_dx = false,
                WeightGrads* defer = nullptr, bool x_outlives = true) const;
  void backward_weights(const Tensor& dy, const Tensor& x) const;  // dW += dy^T x, db += sum_n dy
  // The same with dy's bf16 rounding when the caller made it (ops::RoundedOperand).
  void backward_weights(const ops::Operand& dy, const Tensor& x) const;

  // This rank's feature counts (the whole layer's on one rank).
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  int weight_id() const { return weight_; }

 private:
  bool adds_bias() const;  // outside block splits: whether this rank's forward adds the bias

  ParamStore* store_ = nullptr;
  const TensorLayout* layout_ = nullptr;
  Split split_ = Split::none;
  LinearRole role_ = LinearRole::into_branch;  // grid layouts (block): where in its branch the layer is
  int weight_ = -1, bias_ = -1;
  int64_t in_ = 0, out_ = 0;
};

}  // namespace tessera::nn
