// TensorParallel1D: the Megatron layout over the tp group. Column-split layers (QKV, MLP up)
// hold a slice of the output features, row-split ones (attention output, MLP down) a slice of the
// input features; attention heads are split with the QKV columns; the embedding and LM head are
// vocab-parallel. Communication at each region's edges (nn/tensor_layout.h), N x C values each:
//   1D:             all-reduce(tp) of the exit's output forward and of the entry's dx backward.
//   sequence split: (Megatron sequence parallelism, --sp-mode split_gather) the residual stream,
//                   norms and residual adds hold N / tp rows; entry all-gathers(tp) the rows
//                   forward and reduce-scatters(tp) dx backward; exit reduce-scatters(tp) forward
//                   and all-gathers(tp) dy backward: the same bytes as 1D's all-reduces, and a
//                   1/tp share of the activations outside the regions.
#pragma once
#include "comm/communicator.h"
#include "nn/tensor_layout.h"

namespace tessera::parallel {

class TensorParallel1D final : public nn::TensorLayout {
 public:
  TensorParallel1D(comm::Communicator& group, bool split_rows = false) : group_(group), split_rows_(split_rows) {}
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  bool splits_rows() const override { return split_rows_ && group_.size() > 1; }

  const Tensor& enter(const Tensor& x, Tensor& whole) const override;
  void enter_backward(Tensor& dx, Tensor& whole_dx) const override;
  void exit(Tensor& y, Tensor& whole_y) const override;
  const Tensor& exit_backward(const Tensor& dy, Tensor& whole) const override;

  void all_reduce(Tensor& t) const override;
  void all_reduce_max(Tensor& t) const override;

 private:
  comm::Communicator& group_;
  bool split_rows_;
};

}  // namespace tessera::parallel
