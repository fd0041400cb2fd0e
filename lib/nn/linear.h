// Linear: y = x W^T + b, W [out, in] (PyTorch layout). Local module: no communication.
#pragma once
#include <string>

#include "nn/param_store.h"

namespace tessera::nn {

class Linear {
 public:
  Linear() = default;
  Linear(ParamStore& store, const std::string& name, int64_t in, int64_t out, bool bias, float init_std);

  // x [N, in] -> y [N, out] (overwritten).
  void forward(Tensor& y, const Tensor& x) const;
  // dW += dy^T x, db += sum_n dy; dx = dy W (overwritten, or added when accumulate_dx). dx may be
  // left undefined when the input needs no gradient.
  void backward(Tensor* dx, const Tensor& dy, const Tensor& x, bool accumulate_dx = false) const;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  int weight_id() const { return weight_; }

 private:
  ParamStore* store_ = nullptr;
  int weight_ = -1, bias_ = -1;
  int64_t in_ = 0, out_ = 0;
};

}  // namespace tessera::nn
