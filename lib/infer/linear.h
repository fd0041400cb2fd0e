// The one seam through which inference multiplies by a weight: y = x w^T (+ bias). Today the
// weight is fp32; a quantised weight (int8/int4 with group scales) becomes another kind of
// LinearWeight here, and no caller changes.
#pragma once
#include "core/tensor.h"

namespace tessera::infer {

struct LinearWeight {
  Tensor weight;  // [out, in] f32
  Tensor bias;    // [out], or undefined
  int64_t out_features() const { return weight.dim(0); }
  int64_t in_features() const { return weight.dim(1); }
};

// y [N, out] = x [N, in] w^T + bias. With gelu_pre, gelu_pre = that and y = gelu(gelu_pre) (GPT-2's
// first MLP layer).
void linear(Tensor& y, const Tensor& x, const LinearWeight& w, Tensor* gelu_pre = nullptr);

}  // namespace tessera::infer
