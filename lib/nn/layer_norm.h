// LayerNorm over the last dimension with learned weight and bias. Local module.
#pragma once
#include <string>

#include "nn/param_store.h"

namespace tessera::nn {

class LayerNorm {
 public:
  LayerNorm() = default;
  LayerNorm(ParamStore& store, const std::string& name, int64_t channels, float eps = 1e-5f);

  // x [N, C] -> y [N, C]; saves mean [N] and rstd [N] for backward.
  void forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x) const;
  // dx += d/dx; dweight, dbias accumulate.
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd) const;

 private:
  ParamStore* store_ = nullptr;
  int weight_ = -1, bias_ = -1;
  float eps_ = 1e-5f;
};

}  // namespace tessera::nn
