// Linear forward/backward as GEMMs (bias folded in with beta = 1), in the store's precision: the
// weight is passed with the store's bf16 copy of it.
#include "nn/linear.h"

#include "kernels/ops.h"

namespace tessera::nn {

Linear::Linear(ParamStore& store, const std::string& name, int64_t in, int64_t out, const LinearOptions& o,
               const TensorLayout& layout)
    : store_(&store), layout_(&layout), split_(layout.size() > 1 ? o.split : Split::none), in_(in), out_(out) {
  Shard weight_shard, bias_shard;
  if (o.stream_edge && !layout.splits_features()) split_ = Split::none;
  if (o.stream_edge && layout.splits_features()) {
    // The stream's feature ranks split it like 1D; its gradients cover this rank's rows.
    const std::string what = name + (split_ == Split::columns ? " output features" : " input features");
    if (split_ == Split::columns) {
      weight_shard = bias_shard = layout.feature_split(0, out, 1, false, what.c_str());
      out_ = layout.local_features(out);
    } else {
      weight_shard = layout.feature_split(1, in, 1, false, what.c_str());
      in_ = layout.local_features(in);
    }
  } else if (layout.splits_features()) {
    // A grid layout: a block of W and the outputs' slice of b; the layout does the GEMMs and
    // their communication (2D/2.5D: SUMMA; 3D: gathers and a reduce-scatter).
    split_ = Split::block;
    role_ = o.split == Split::rows ? LinearRole::out_of_branch : LinearRole::into_branch;
    bias_shard = layout.feature_split(0, out, o.groups, role_ == LinearRole::into_branch,
                                      (name + " output features").c_str());
    weight_shard = layout.linear_weight(bias_shard, in, role_);
    out_ = layout.local_features(out);
    in_ = layout.local_features(in);
  } else if (split_ == Split::columns) {
    weight_shard = bias_shard = layout.split(0, out, o.groups, (name + " output features").c_str());
    out_ = out / layout.size();
  } else if (split_ == Split::rows) {
    weight_shard = layout.split(1, in, 1, (name + " input features").c_str());
    in_ = in / layout.size();
  }
  weight_ = store.add(name + ".weight", {out, in}, Init::Normal(o.init_std), true, weight_shard);
  store.set_rounded_on_read(weight_);  // forward and backward read it only in products
  if (o.bias) bias_ = store.add(name + ".bias", {out}, Init::Zeros(), false, bias_shard);
  if (o.stream_edge && layout.splits_features()) {
    store.set_partial(weight_, PartialGrad::rows);
    if (bias_ >= 0) store.set_partial(bias_, PartialGrad::rows);
  }
  if (split_ == Split::block) {
    if (bias_ >= 0)
      store.set_partial(bias_, role_ == LinearRole::into_branch ? PartialGrad::branch_rows : PartialGrad::rows);
    store.set_partial(weight_, layout.weight_partial());
  }
}

void Linear::forward(Tensor& y, const Tensor& x) const {
  const ops::MatmulInputs inputs = store_->matmul_inputs();
  if (split_ == Split::block) {
    layout_->linear_forward(y, x, store_->operand(weight_), bias_ >= 0 ? &store_->value(bias_) : nullptr, role_,
                            inputs);
    return;
  }
  if (adds_bias())
    ops::linear_forward(y, x, store_->operand(weight_), store_->value(bias_), nullptr, inputs);
  else
    ops::matmul(x, false, store_->operand(weight_), true, y, 1.0f, 0.0f, inputs);
}

void Linear::forward_gelu(Tensor& out, Tensor& pre, const Tensor& x) const {
  TESSERA_CHECK(split_ != Split::rows, "Linear::forward_gelu: a row-split layer's output is partial until its ",
                "all-reduce; the GELU cannot follow it here");
  if (split_ == Split::block || !adds_bias()) {
    forward(pre, x);
    ops::gelu_forward(out, pre);
    return;
  }
  ops::linear_forward(out, x, store_->operand(weight_), store_->value(bias_), &pre, store_->matmul_inputs());
}

// A row-split layer's bias is added by one rank only: the all-reduce sums the partial outputs.
bool Linear::adds_bias() const { return bias_ >= 0 && (split_ != Split::rows || layout_->rank() == 0); }

void Linear::backward_weights(const Tensor& dy, const Tensor& x) const { backward_weights(ops::Operand(dy), x); }

void Linear::backward_weights(const ops::Operand& dy, const Tensor& x) const {
  const ops::MatmulInputs inputs = store_->matmul_inputs();
  if (split_ == Split::block) {
    layout_->linear_backward(nullptr, dy.values, x, store_->operand(weight_), &store_->grad(weight_),
                             bias_ >= 0 ? &store_->grad(bias_) : nullptr, false, role_, inputs);
    return;
  }
  ops::matmul(dy, true, x, false, store_->grad(weight_), 1.0f, 1.0f, inputs);
  if (bias_ >= 0) ops::bias_backward(store_->grad(bias_), dy.values);
}

void Linear::backward(Tensor* dx, const Tensor& dy, const Tensor& x, bool accumulate_dx, WeightGrads* defer,
                      bool x_outlives) const {
  const ops::MatmulInputs inputs = store_->matmul_inputs();
  if (split_ == Split::block && !defer) {  // one pass: dx's and dW's products share the broadcasts
    layout_->linear_backward(dx, dy, x, store_->operand(weight_), &store_->grad(weight_),
                             bias_ >= 0 ? &store_->grad(bias_) : nullptr, accumulate_dx, role_, inputs);
    return;
  }
  // Both products here read dy: under bf16 GEMM inputs it is rounded once for the two.
  const bool both = !defer && dx;  // (a grid layout without defer returned above)
  const ops::RoundedOperand rounded_dy(dy, both ? inputs : ops::MatmulInputs::f32);
  if (defer) {
    defer->linear(*this, dy, x, x_outlives);
  } else {
    backward_weights(rounded_dy.operand(), x);
  }
  if (dx && split_ == Split::block) {
    layout_->linear_backward(dx, dy, x, store_->operand(weight_), nullptr, nullptr, accumulate_dx, role_, inputs);
  } else if (dx) {
    ops::matmul(rounded_dy, false, store_->operand(weight_), false, *dx, 1.0f, accumulate_dx ? 1.0f : 0.0f, inputs);
  }
}

}  // namespace tessera::nn
