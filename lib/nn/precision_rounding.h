// PrecisionRounding: rounds f32 tensors in place to what a lower precision (bf16, f16) stores,
// through the cast kernels and a reused low-precision staging buffer. Mixed precision on the CPU
// keeps fp32 arithmetic and emulates low-precision storage with it: the models round the
// activations they keep between blocks, the trainer the weights and gradients.
#pragma once
#include "core/tensor.h"

namespace tessera::nn {

class PrecisionRounding {
 public:
  PrecisionRounding() = default;
  explicit PrecisionRounding(DType storage) : storage_(storage) {}  // f32: no rounding
  bool active() const { return storage_ != DType::f32; }
  DType storage() const { return storage_; }
  void round(Tensor values);  // f32 values, any shape; rounded to nearest, ties to even
  // The low-precision bits of the last tensor rounded (its first numel elements), until the next round.
  const Tensor& last_rounded() const { return staging_; }

 private:
  DType storage_ = DType::f32;
  Tensor staging_;  // grown to the largest tensor rounded
};

}  // namespace tessera::nn
