// TensorLayout: slices of split dimensions.
#include "nn/tensor_layout.h"

namespace tessera::nn {

Shard TensorLayout::split(int dim, int64_t extent, int64_t groups, const char* what) const {
  if (size() == 1) return {};
  const int64_t block = extent / groups;
  TESSERA_CHECK(block % size() == 0, what, " ", block, " is not divisible by --tp ", size());
  const int64_t local = block / size();
  return {dim, rank() * local, local, groups, size()};
}

const TensorLayout& TensorLayout::single() {
  static const TensorLayout layout;
  return layout;
}

}  // namespace tessera::nn
