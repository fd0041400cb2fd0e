// Global gradient norm and the clipping factor applied inside the optimizer step.
#include "optim/grad_clip.h"

#include <cmath>

#include "kernels/ops.h"

namespace tessera::optim {

double grad_norm(nn::ParamStore& store) { return std::sqrt(ops::sum_squares(store.flat_grads())); }

float clip_factor(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

}  // namespace tessera::optim
