// TensorLayout: slices of split dimensions and of token rows.
#include "nn/tensor_layout.h"

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

RegionWorkspace TensorLayout::workspace(int64_t n, int64_t channels, Device device) const {
  if (!splits_rows()) return {};
  return {Tensor::empty({n, channels}, DType::f32, device), Tensor::empty({n, channels}, DType::f32, device)};
}

const TensorLayout& TensorLayout::single() {
  static const TensorLayout layout;
  return layout;
}

}  // namespace tessera::nn
