// TensorLayout: slices of split dimensions and of token rows.
#include "nn/tensor_layout.h"

#include "kernels/ops.h"

namespace tessera::nn {

Shard TensorLayout::split(int dim, int64_t extent, int64_t groups, const char* what) const {
  if (size() == 1) return {};
  const int64_t block = extent / groups;
  TESSERA_CHECK(block % size() == 0, what, " ", block, " is not divisible by --tp ", size());
  const int64_t local = block / size();
  return {dim, rank() * local, local, groups, size()};
}

int64_t TensorLayout::local_rows(int64_t n) const {
  if (!splits_rows()) return n;
  TESSERA_CHECK(n % size() == 0, "--sp-mode split_gather: micro-batch x seq-len = ", n,
                " token rows do not split over --tp ", size());
  return n / size();
}

int64_t TensorLayout::local_features(int64_t c) const {
  if (!splits_features()) return c;
  TESSERA_CHECK(c % size() == 0, "hidden size ", c, " is not divisible by the tensor-parallel grid's side ", size());
  return c / size();
}

Shard TensorLayout::feature_split(int dim, int64_t extent, int64_t groups, bool branch, const char* what) const {
  (void)dim, (void)extent, (void)groups, (void)branch, (void)what;
  return {};
}

void TensorLayout::linear_forward(Tensor&, const Tensor&, const ops::Operand&, const Tensor*, LinearRole,
                                  ops::MatmulInputs) const {
  throw Error("linear_forward: this tensor-parallel layout does not split a linear layer's input features");
}

void TensorLayout::linear_backward(Tensor*, const Tensor&, const Tensor&, const ops::Operand&, Tensor*, Tensor*, bool,
                                   LinearRole, ops::MatmulInputs) const {
  throw Error("linear_backward: this tensor-parallel layout does not split a linear layer's input features");
}

void TensorLayout::scatter_block_columns(Tensor& whole_grad, Tensor& block_grad) const {
  if (&whole_grad != &block_grad) ops::add_inplace(block_grad, whole_grad);
}

RegionWorkspace TensorLayout::workspace(int64_t n, int64_t channels, Device device) const {
  if (!splits_rows() && !splits_features()) return {};
  return {Tensor::empty({n, channels}, DType::f32, device), Tensor::empty({n, channels}, DType::f32, device)};
}

const TensorLayout& TensorLayout::single() {
  static const TensorLayout layout;
  return layout;
}

}  // namespace tessera::nn
