// AdamW: decay ranges and the fused update.
#include "optim/adamw.h"

#include <algorithm>

namespace tessera::optim {

AdamW::AdamW(nn::ParamStore& store, const AdamWConfig& config) : AdamW(store, config, {0, store.numel()}) {}

AdamW::AdamW(nn::ParamStore& store, const AdamWConfig& config, parallel::Range shard)
    : store_(store), config_(config), shard_(shard) {
  // Decay ranges, clipped to the shard and made relative to its start.
  for (const nn::ParamSpec& s : store.specs()) {
    const int64_t begin = std::max(s.offset, shard.begin) - shard.begin;
    const int64_t end = std::min(s.offset + s.local_shape.numel(), shard.end) - shard.begin;
    if (begin >= end) continue;
    if (!ranges_.empty() && ranges_.back().decay == s.weight_decay && ranges_.back().end == begin)
      ranges_.back().end = end;
    else
      ranges_.push_back({begin, end, s.weight_decay});
  }
  const Device device = store.device();
  exp_avg_ = Tensor::zeros({shard.size()}, DType::f32, device);
  exp_avg_sq_ = Tensor::zeros({shard.size()}, DType::f32, device);
}

void AdamW::step(float lr, float grad_scale) {
  Tensor params = store_.flat_values().slice(shard_.begin, {shard_.size()});
  const Tensor grads = store_.flat_grads().slice(shard_.begin, {shard_.size()});
  step(lr, grad_scale, params, grads);
}

void AdamW::step(float lr, float grad_scale, Tensor& params, const Tensor& grads) {
  TESSERA_CHECK(params.numel() == shard_.size() && grads.numel() == shard_.size(),
                "AdamW::step: buffers of ", params.numel(), " and ", grads.numel(), " elements for a shard of ",
                shard_.size());
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
    Tensor p = params.slice(r.begin, shape);
    Tensor g = grads.slice(r.begin, shape);
    Tensor m = exp_avg_.slice(r.begin, shape);
    Tensor v = exp_avg_sq_.slice(r.begin, shape);
    ops::adamw(p, g, m, v, args);
  }
}

}  // namespace tessera::optim
