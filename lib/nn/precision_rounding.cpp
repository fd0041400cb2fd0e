// PrecisionRounding: the in-place rounding kernel.
#include "nn/precision_rounding.h"

#include "kernels/ops.h"

namespace tessera::nn {

void PrecisionRounding::round(Tensor values, Tensor bits) {
  if (!active() || values.numel() == 0) return;
  Tensor flat = values.reshape({values.numel()});
  ops::round_inplace(flat, storage_, bits);
}

}  // namespace tessera::nn
