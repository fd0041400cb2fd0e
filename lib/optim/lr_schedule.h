// Learning-rate schedule: linear warmup to the peak, then cosine decay to the minimum at the last step.
#pragma once
#include <cstdint>

namespace tessera::optim {

struct LrSchedule {
  double peak = 3e-4, min = 0.0;
  int64_t warmup = 0, total = 1;
  // lr of `step` (1-based): peak * step / warmup while step <= warmup, then
  // min + (peak - min) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2.
  double at(int64_t step) const;
};

}  // namespace tessera::optim
