// TensorParallel1D: the Megatron layout over the tp group. Column-parallel layers (QKV, MLP up)
// hold a slice of the output features, row-parallel ones (attention output, MLP down) a slice of
// the input features; attention heads are split with the QKV columns. Communication, one
// collective kind: all-reduce(tp) of a row-parallel layer's partial output in forward and of a
// column-parallel layer's partial input gradient in backward, batch x seq x hidden values each, so
// 2 per block forward and 2 backward; plus the vocab-parallel embedding's output and the
// vocab-parallel loss's row statistics (see models).
#pragma once
#include "comm/communicator.h"
#include "nn/tensor_layout.h"

namespace tessera::parallel {

class TensorParallel1D final : public nn::TensorLayout {
 public:
  explicit TensorParallel1D(comm::Communicator& group) : group_(group) {}
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  void all_reduce(Tensor& t) const override {
    if (group_.size() > 1) group_.all_reduce_sum(t);
  }
  void all_reduce_max(Tensor& t) const override {
    if (group_.size() > 1) group_.all_reduce_max(t);
  }
  comm::Communicator& group() const { return group_; }

 private:
  comm::Communicator& group_;
};

}  // namespace tessera::parallel
