// WeightGrads: the weight-gradient half of a backward, deferred. Zero-bubble pipeline schedules
// split a backward into B (the input gradients, which the previous stage waits for) and W (the
// weight gradients, run later to fill the pipeline's idle time). A layer's backward given a
// WeightGrads computes its input gradient only and records what its weight gradient needs: its
// output gradient (copied) and its input (kept by reference when it outlives W, such as a saved
// activation; else copied). run() then accumulates every recorded weight gradient, in order.
// Buffers are kept between steps: a second step allocates nothing. A layer whose weight gradient
// is not one of the kinds below (the MoE experts, nn/moe.h) keeps its own operands (keep_rows)
// and records its own step (later).
#pragma once
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace tessera::nn {

class Linear;
class LayerNorm;
class Embedding;
struct RegionWorkspace;

class WeightGrads {
 public:
  void linear(const Linear& layer, const Tensor& dy, const Tensor& x, bool x_outlives);
  void layer_norm(const LayerNorm& layer, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd);
  void embedding(const Embedding& layer, const Tensor& dout, const Tensor& tokens, int64_t first_position,
                 RegionWorkspace& region, const Tensor& doc_positions = Tensor());
  // A buffer shaped like t whose contents B throws away (a layer norm's parameter gradients).
  Tensor discard_like(const Tensor& t) { return buffer(t.shape(), t.device()); }
  // A copy of t [rows, ...] in a reused buffer of max_rows rows (its first rows a view of it): for
  // operands whose row count changes from call to call (the rows routed to experts), so that the
  // buffer is the same every step.
  Tensor keep_rows(const Tensor& t, int64_t max_rows);
  // Records a weight-gradient step; run() calls it, after the steps recorded before it.
  void later(std::function<void()> apply) { pending_.push_back(std::move(apply)); }
  void run();  // accumulates the weight gradients; then nothing is pending
  bool empty() const { return pending_.empty(); }

 private:
  Tensor keep(const Tensor& t);                  // a copy, in a reused buffer
  Tensor buffer(const Shape& shape, Device device);  // the next reused buffer of that shape

  std::vector<std::function<void()>> pending_;
  std::vector<Tensor> buffers_;
  size_t used_ = 0;
};

}  // namespace tessera::nn
