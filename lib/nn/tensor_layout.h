// TensorLayout: how a model's layers are split over the tensor-parallel group, as the layers see
// it: which slice of a split dimension this rank holds, and the sum over the group that completes
// a partial product. The base class is the one-rank layout (whole tensors, no communication);
// lib/parallel implements the parallel modes, so the layers are written once for all of them.
#pragma once
#include "core/tensor.h"
#include "nn/param_store.h"

namespace tessera::nn {

class TensorLayout {
 public:
  virtual ~TensorLayout() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  // This rank's slice of dimension `dim` (extent, in `groups` equal blocks, each divisible by
  // size()); `what` names the dimension in the error when it does not divide.
  Shard split(int dim, int64_t extent, int64_t groups, const char* what) const;
  // Sums t over the group in place: a row-parallel layer's partial output, a column-parallel
  // layer's partial input gradient.
  virtual void all_reduce(Tensor& t) const { (void)t; }
  virtual void all_reduce_max(Tensor& t) const { (void)t; }

  static const TensorLayout& single();  // the one-rank layout
};

}  // namespace tessera::nn
