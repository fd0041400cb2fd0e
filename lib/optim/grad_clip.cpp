// Global gradient norm and the clipping factor applied inside the optimizer step.
#include "optim/grad_clip.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace tessera::optim {

double grad_norm(nn::ParamStore& store) { return std::sqrt(ops::sum_squares(store.flat_grads())); }

double squared_norm_share(const nn::ParamStore& store, const Tensor& grads, int64_t begin, int tp, int ep) {
  if (tp == 1 && ep == 1) return ops::sum_squares(grads);
  const int64_t end = begin + grads.numel();
  double share = 0.0;
  for (const nn::ParamSpec& s : store.specs()) {
    const int64_t b = std::max(s.offset, begin), e = std::min(s.offset + s.local_shape.numel(), end);
    if (b >= e) continue;
    // Copies held by several ranks of a group count once over it (tp / parts ranks hold each slice).
    const double copies = static_cast<double>(tp / s.shard.parts) * (s.expert ? 1.0 : ep);
    share += ops::sum_squares(grads.slice(b - begin, {e - b})) / copies;
  }
  return share;
}

float clip_factor(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

}  // namespace tessera::optim
