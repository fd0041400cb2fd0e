// WeightGrads: recording and running deferred weight gradients.
#include "nn/weight_grads.h"

#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"

namespace tessera::nn {

Tensor WeightGrads::buffer(const Shape& shape, Device device) {
  if (used_ < buffers_.size() && buffers_[used_].shape() == shape && buffers_[used_].device() == device)
    return buffers_[used_++];
  Tensor t = Tensor::empty(shape, DType::f32, device);
  if (used_ < buffers_.size()) {
    buffers_[used_++] = t;
  } else {
    buffers_.push_back(t);
    ++used_;
  }
  return t;
}

Tensor WeightGrads::keep(const Tensor& t) {
  Tensor copy = buffer(t.shape(), t.device());
  copy.copy_from(t);
  return copy;
}

Tensor WeightGrads::keep_rows(const Tensor& t, int64_t max_rows) {
  TESSERA_CHECK(t.dim(0) <= max_rows, "WeightGrads::keep_rows: ", t.shape().str(), " has more than ", max_rows,
                " rows");
  std::vector<int64_t> dims = t.shape().dims();
  dims[0] = max_rows;
  Tensor copy = buffer(Shape(std::move(dims)), t.device()).rows(0, t.dim(0));
  copy.copy_from(t);
  return copy;
}

void WeightGrads::linear(const Linear& layer, const Tensor& dy, const Tensor& x, bool x_outlives) {
  Tensor dy_kept = keep(dy), x_kept = x_outlives ? x : keep(x);
  pending_.push_back([&layer, dy_kept, x_kept] { layer.backward_weights(dy_kept, x_kept); });
}

void WeightGrads::layer_norm(const LayerNorm& layer, const Tensor& dy, const Tensor& x, const Tensor& mean,
                             const Tensor& rstd) {
  Tensor dy_kept = keep(dy), dx_discarded = buffer(x.shape(), x.device());
  pending_.push_back([&layer, dy_kept, x, mean, rstd, dx_discarded]() mutable {
    layer.backward_weights(dy_kept, x, mean, rstd, dx_discarded);
  });
}

void WeightGrads::embedding(const Embedding& layer, const Tensor& dout, const Tensor& tokens, int64_t first_position,
                            RegionWorkspace& region, const Tensor& doc_positions) {
  Tensor dout_kept = keep(dout);
  pending_.push_back([&layer, dout_kept, tokens, first_position, &region, doc_positions] {
    layer.backward(dout_kept, tokens, first_position, region, doc_positions);
  });
}

void WeightGrads::run() {
  for (auto& apply : pending_) apply();
  pending_.clear();
  used_ = 0;
}

}  // namespace tessera::nn
