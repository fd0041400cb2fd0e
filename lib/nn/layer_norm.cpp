// LayerNorm: parameters and the kernel calls.
#include "nn/layer_norm.h"

#include "kernels/ops.h"

namespace tessera::nn {

LayerNorm::LayerNorm(ParamStore& store, const std::string& name, int64_t channels, const TensorLayout& layout,
                     float eps, NormKind kind)
    : store_(&store), eps_(eps), kind_(kind), channels_(channels) {
  if (layout.splits_features()) layout_ = &layout;
  const Shard features = layout.feature_split(0, channels, 1, false, (name + " features").c_str());
  weight_ = store.add(name + ".weight", {channels}, Init::Ones(), false, features);
  if (kind == NormKind::layer) bias_ = store.add(name + ".bias", {channels}, Init::Zeros(), false, features);
  if (layout.splits_rows() || layout.splits_features()) {
    store.set_partial(weight_, PartialGrad::rows);
    if (bias_ >= 0) store.set_partial(bias_, PartialGrad::rows);
  }
}

void LayerNorm::forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x) const {
  if (kind_ == NormKind::rms && layout_) {
    // Features split: the rows' sums of squares, all-reduced over the feature ranks (rstd holds
    // them in between).
    ops::rmsnorm_split_squares(rstd, x);
    layout_->all_reduce(rstd);
    ops::rmsnorm_split_forward(y, rstd, x, store_->value(weight_), rstd, channels_, eps_);
    return;
  }
  if (kind_ == NormKind::rms) {
    ops::rmsnorm_forward(y, rstd, x, store_->value(weight_), eps_);
    return;
  }
  if (!layout_) {
    ops::layernorm_forward(y, mean, rstd, x, store_->value(weight_), store_->value(bias_), eps_);
    return;
  }
  // Features split: the row statistics summed over the ranks holding the other features (mean and
  // rstd hold the sums in between).
  ops::layernorm_split_row_sums(mean, x);
  layout_->all_reduce(mean);
  ops::layernorm_split_centered_squares(rstd, x, mean, channels_);
  layout_->all_reduce(rstd);
  ops::layernorm_split_forward(y, mean, rstd, x, store_->value(weight_), store_->value(bias_), mean, rstd, channels_,
                               eps_);
}

void LayerNorm::add_forward(Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& a,
                            const Tensor& b) const {
  if (kind_ == NormKind::rms && !layout_) {
    ops::add_rmsnorm_forward(sum, y, rstd, a, b, store_->value(weight_), eps_);
    return;
  }
  if (layout_) {
    ops::add(sum, a, b);
    forward(y, mean, rstd, sum);
    return;
  }
  ops::add_layernorm_forward(sum, y, mean, rstd, a, b, store_->value(weight_), store_->value(bias_), eps_);
}

void LayerNorm::split_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dy, const Tensor& x,
                               const Tensor& mean, const Tensor& rstd) const {
  const int64_t rows = x.numel() / (channels_ / layout_->size());
  const int64_t sums_per_row = kind_ == NormKind::rms ? 1 : 2;
  if (sums_.numel() != sums_per_row * rows) sums_ = Tensor::empty({sums_per_row, rows}, DType::f32, x.device());
  Tensor& sums = sums_;
  if (kind_ == NormKind::rms) {  // sum_c g xhat all-reduced over the feature ranks
    ops::rmsnorm_split_backward_sums(sums, dy, x, store_->value(weight_), rstd);
    layout_->all_reduce(sums);
    ops::rmsnorm_split_backward(dx, dweight, dy, x, store_->value(weight_), rstd, sums, channels_);
    return;
  }
  ops::layernorm_split_backward_sums(sums, dy, x, store_->value(weight_), mean, rstd);
  layout_->all_reduce(sums);
  ops::layernorm_split_backward(dx, dweight, dbias, dy, x, store_->value(weight_), mean, rstd, sums, channels_);
}

void LayerNorm::backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         WeightGrads* defer) const {
  TESSERA_CHECK(!(defer && layout_), "a grid layout's layer norm cannot defer its weight gradients (zero-bubble)");
  if (kind_ == NormKind::rms && layout_) {
    Tensor no_bias;
    split_backward(dx, store_->grad(weight_), no_bias, dy, x, mean, rstd);
    return;
  }
  if (kind_ == NormKind::rms) {
    if (!defer) {
      ops::rmsnorm_backward(dx, store_->grad(weight_), dy, x, store_->value(weight_), rstd);
      return;
    }
    Tensor dweight = defer->discard_like(store_->value(weight_));
    defer->layer_norm(*this, dy, x, mean, rstd);
    ops::rmsnorm_backward(dx, dweight, dy, x, store_->value(weight_), rstd);
    return;
  }
  if (!defer) {
    if (layout_) {
      split_backward(dx, store_->grad(weight_), store_->grad(bias_), dy, x, mean, rstd);
    } else {
      ops::layernorm_backward(dx, store_->grad(weight_), store_->grad(bias_), dy, x, store_->value(weight_), mean,
                              rstd);
    }
    return;
  }
  const Tensor& w = store_->value(weight_);
  Tensor dweight = defer->discard_like(w), dbias = defer->discard_like(w);
  defer->layer_norm(*this, dy, x, mean, rstd);
  ops::layernorm_backward(dx, dweight, dbias, dy, x, w, mean, rstd);
}

void LayerNorm::backward_weights(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                 Tensor& dx_discarded) const {
  if (kind_ == NormKind::rms) {
    ops::rmsnorm_backward(dx_discarded, store_->grad(weight_), dy, x, store_->value(weight_), rstd);
    return;
  }
  ops::layernorm_backward(dx_discarded, store_->grad(weight_), store_->grad(bias_), dy, x, store_->value(weight_),
                          mean, rstd);
}

}  // namespace tessera::nn
