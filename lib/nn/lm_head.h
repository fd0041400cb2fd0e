// LmHead: the language-model head tied to the token embedding, and its softmax
// cross-entropy: logits = x wte^T over the (padded) vocabulary, per-row losses over the real ids.
// Vocab-parallel under a tensor-parallel layout: each rank holds its slice of wte's rows and
// computes only its slice of the logits; the full logits are never gathered. Communication per
// micro-batch of N rows: all-reduce-max(tp) of the row maxima (N values), all-reduce-sum(tp) of
// the row sums of exponentials and target logits (2N), and the region entry's (nn/tensor_layout.h)
// for x and its partial dx. Padding ids are masked, so the loss equals the one-rank loss.
#pragma once
#include "nn/embedding.h"

namespace tessera::nn {

class LmHead {
 public:
  LmHead() = default;
  LmHead(const Embedding& embedding, ParamStore& store, int64_t rows, Device device);

  // x: the token rows this rank holds (all N, or a share when the layout splits rows); targets
  // [N] (int32, global ids; < 0 ignored) on the device and the same on the host -> the N rows'
  // losses on the host.
  const Tensor& forward(const Tensor& x, const Tensor& targets, const int32_t* host_targets, RegionWorkspace& region);
  // dx (x's rows) = d(scale x sum of losses)/dx (overwritten); the token table's gradient
  // accumulates. Overwrites the logits.
  void backward(Tensor& dx, const Tensor& x, const Tensor& targets, float scale, RegionWorkspace& region);
  const Tensor& logits() const { return logits_; }  // [N, this rank's vocabulary rows]

 private:
  const Embedding* embedding_ = nullptr;
  ParamStore* store_ = nullptr;
  Tensor logits_, lse_, losses_, row_max_, sums_;
  Tensor table_;  // grid layouts: the gathered rows of the token table
  Tensor host_losses_, host_lse_, host_max_, host_sums_;
};

}  // namespace tessera::nn
