// Warmup + cosine learning-rate schedule.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace tessera::optim {

double LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step <= warmup) return peak * static_cast<double>(step) / static_cast<double>(warmup);
  const int64_t span = std::max<int64_t>(1, total - warmup);
  const double progress = std::clamp(static_cast<double>(step - warmup) / static_cast<double>(span), 0.0, 1.0);
  return min + (peak - min) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace tessera::optim
