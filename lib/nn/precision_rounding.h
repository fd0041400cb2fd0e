// PrecisionRounding: rounds f32 tensors in place to what a lower precision (bf16, f16) stores.
// Mixed precision emulates low-precision storage with it (the arithmetic stays fp32, bf16's GEMM
// products aside): the models round the activations they keep between blocks, the trainer the
// weights and gradients.
#pragma once
#include "core/tensor.h"

namespace tessera::nn {

class PrecisionRounding {
 public:
  PrecisionRounding() = default;
  explicit PrecisionRounding(DType storage) : storage_(storage) {}  // f32: no rounding
  bool active() const { return storage_ != DType::f32; }
  DType storage() const { return storage_; }
  // f32 values, any shape, rounded in place to nearest, ties to even; bits, when defined, also
  // receives the low-precision bit patterns (ops::round_inplace).
  void round(Tensor values, Tensor bits = Tensor());

 private:
  DType storage_ = DType::f32;
};

}  // namespace tessera::nn
