// AdamW: decay ranges and the fused update.
#include "optim/adamw.h"

namespace tessera::optim {

AdamW::AdamW(nn::ParamStore& store, const AdamWConfig& config) : store_(store), config_(config) {
  for (const nn::ParamSpec& s : store.specs()) {
    const int64_t end = s.offset + s.local_shape.numel();
    if (!ranges_.empty() && ranges_.back().decay == s.weight_decay && ranges_.back().end == s.offset)
      ranges_.back().end = end;
    else
      ranges_.push_back({s.offset, end, s.weight_decay});
  }
  const Device device = store.flat_values().device();
  exp_avg_ = Tensor::zeros({store.numel()}, DType::f32, device);
  exp_avg_sq_ = Tensor::zeros({store.numel()}, DType::f32, device);
}

void AdamW::step(float lr, float grad_scale) {
  ++step_;
  ops::AdamWArgs args;
  args.lr = lr;
  args.beta1 = config_.beta1;
  args.beta2 = config_.beta2;
  args.eps = config_.eps;
  args.step = step_;
  args.grad_scale = grad_scale;
  for (const Range& r : ranges_) {
    args.weight_decay = r.decay ? config_.weight_decay : 0.0f;
    const Shape shape{r.end - r.begin};
    Tensor p = store_.flat_values().slice(r.begin, shape);
    Tensor g = store_.flat_grads().slice(r.begin, shape);
    Tensor m = exp_avg_.slice(r.begin, shape);
    Tensor v = exp_avg_sq_.slice(r.begin, shape);
    ops::adamw(p, g, m, v, args);
  }
}

}  // namespace tessera::optim
