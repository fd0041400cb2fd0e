// A GEMM operand's bf16 bits for the cuBLAS and cuBLASLt calls: its given copy (mixed precision's
// rounded weights), or its values rounded (nearest even) into stream-ordered scratch for the op.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace tessera::kernels::cuda {

class Bf16Operand {
 public:
  Bf16Operand(const float* x, const uint16_t* copy, int64_t count)
      : scratch_(copy ? 0 : static_cast<size_t>(count) * sizeof(uint16_t)), bits_(copy) {
    if (!bits_) {
      f32_to_bf16(scratch_.as<uint16_t>(), x, count);
      bits_ = scratch_.as<uint16_t>();
    }
  }
  const uint16_t* bits() const { return bits_; }

 private:
  Scratch scratch_;
  const uint16_t* bits_;
};

}  // namespace tessera::kernels::cuda
