// LayerNorm: parameters and the kernel calls.
#include "nn/layer_norm.h"

#include "kernels/ops.h"

namespace tessera::nn {

LayerNorm::LayerNorm(ParamStore& store, const std::string& name, int64_t channels, const TensorLayout& layout,
                     float eps)
    : store_(&store), eps_(eps) {
  weight_ = store.add(name + ".weight", {channels}, Init::Ones(), false);
  bias_ = store.add(name + ".bias", {channels}, Init::Zeros(), false);
  if (layout.splits_rows()) {
    store.set_row_partial_grad(weight_);
    store.set_row_partial_grad(bias_);
  }
}

void LayerNorm::forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x) const {
  ops::layernorm_forward(y, mean, rstd, x, store_->value(weight_), store_->value(bias_), eps_);
}

void LayerNorm::backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         WeightGrads* defer) const {
  if (!defer) {
    ops::layernorm_backward(dx, store_->grad(weight_), store_->grad(bias_), dy, x, store_->value(weight_), mean, rstd);
    return;
  }
  const Tensor& w = store_->value(weight_);
  Tensor dweight = defer->discard_like(w), dbias = defer->discard_like(w);
  defer->layer_norm(*this, dy, x, mean, rstd);
  ops::layernorm_backward(dx, dweight, dbias, dy, x, w, mean, rstd);
}

void LayerNorm::backward_weights(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 Tensor& dx_discarded) const {
  ops::layernorm_backward(dx_discarded, store_->grad(weight_), store_->grad(bias_), dy, x, store_->value(weight_),
                          mean, rstd);
}

}  // namespace tessera::nn
