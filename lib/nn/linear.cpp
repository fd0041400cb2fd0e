// Linear forward/backward as GEMMs (bias folded in with beta = 1).
#include "nn/linear.h"

#include "kernels/ops.h"

namespace tessera::nn {

Linear::Linear(ParamStore& store, const std::string& name, int64_t in, int64_t out, bool bias, float init_std)
    : store_(&store), in_(in), out_(out) {
  weight_ = store.add(name + ".weight", {out, in}, Init::Normal(init_std), true);
  if (bias) bias_ = store.add(name + ".bias", {out}, Init::Zeros(), false);
}

void Linear::forward(Tensor& y, const Tensor& x) const {
  if (bias_ >= 0) {
    ops::broadcast_rows(y, store_->value(bias_));
    ops::matmul(x, false, store_->value(weight_), true, y, 1.0f, 1.0f);
  } else {
    ops::matmul(x, false, store_->value(weight_), true, y);
  }
}

void Linear::backward(Tensor* dx, const Tensor& dy, const Tensor& x, bool accumulate_dx) const {
  ops::matmul(dy, true, x, false, store_->grad(weight_), 1.0f, 1.0f);
  if (bias_ >= 0) ops::bias_backward(store_->grad(bias_), dy);
  if (dx) ops::matmul(dy, false, store_->value(weight_), false, *dx, 1.0f, accumulate_dx ? 1.0f : 0.0f);
}

}  // namespace tessera::nn
