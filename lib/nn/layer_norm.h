// LayerNorm over the last dimension with learned weight and bias, or RMSNorm (NormKind::rms:
// Llama's, no centring and no bias; mean is then left untouched). Local: under a layout that
// splits token rows each rank normalises its rows, and its weight and bias gradients are partial
// (PartialGrad::rows; summed over tp once per step). Under a grid layout (2D, 2.5D, 3D) each
// rank holds a block of the features: the row statistics are all-reduced over the ranks holding
// the rest (LayerNorm: two all-reduces of N values forward, one of 2N backward; RMSNorm: the sums
// of squares, one all-reduce of N forward, and one of N backward).
#pragma once
#include <string>

#include "nn/param_store.h"
#include "nn/tensor_layout.h"
#include "nn/weight_grads.h"

namespace tessera::nn {

enum class NormKind { layer, rms };

class LayerNorm {
 public:
  LayerNorm() = default;
  LayerNorm(ParamStore& store, const std::string& name, int64_t channels,
            const TensorLayout& layout = TensorLayout::single(), float eps = 1e-5f, NormKind kind = NormKind::layer);

  // x [N, C] -> y [N, C]; saves mean [N] and rstd [N] for backward.
  void forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x) const;
  // sum = a + b (the residual stream), then forward(y, mean, rstd, sum): ops::add_layernorm_forward
  // (one kernel on CUDA) unless the features are split.
  void add_forward(Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& a, const Tensor& b) const;
  // dx += d/dx; dweight, dbias accumulate (with `defer`: recorded there for later).
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                WeightGrads* defer = nullptr) const;
  // dweight, dbias accumulate; dx_discarded [N, C] is workspace (the kernel computes dx as well).
  void backward_weights(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        Tensor& dx_discarded) const;

 private:
  // RMSNorm: dbias unused.
  void split_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dy, const Tensor& x,
                      const Tensor& mean, const Tensor& rstd) const;

  ParamStore* store_ = nullptr;
  const TensorLayout* layout_ = nullptr;  // a layout splitting the features; null otherwise
  int weight_ = -1, bias_ = -1;  // RMSNorm: no bias
  float eps_ = 1e-5f;
  NormKind kind_ = NormKind::layer;
  int64_t channels_ = 0;  // all ranks' features
  mutable Tensor sums_;   // a split norm's backward row sums ([2, N]; RMSNorm [1, N]), kept between calls
};

}  // namespace tessera::nn
