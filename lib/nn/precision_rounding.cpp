// PrecisionRounding: a cast to the storage type and back.
#include "nn/precision_rounding.h"

#include "kernels/ops.h"

namespace tessera::nn {

void PrecisionRounding::round(Tensor values) {
  if (!active() || values.numel() == 0) return;
  if (!staging_.defined() || staging_.numel() < values.numel() || staging_.device() != values.device())
    staging_ = Tensor::empty({values.numel()}, storage_, values.device());
  Tensor low = staging_.slice(0, {values.numel()});
  Tensor flat = values.reshape({values.numel()});
  ops::cast(low, flat);
  ops::cast(flat, low);
}

}  // namespace tessera::nn
