// SwiGLU on the CPU (Llama's MLP activation): out = silu(gate) * up, and its backward.
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_math.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)
namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread does it all

// sigmoid(g) and 1 - sigmoid(g) without branches (a branch next to the simd_exp call stops
// vectorisation), overflow or cancellation: t = exp(-|g|) is in [0, 1], and
//   sigmoid(g) = (g < 0 ? t : 1) / (1 + t),   1 - sigmoid(g) = (g < 0 ? 1 : t) / (1 + t).
// Below exp(-87) simd_exp gives 0, so the far tail's sigmoid is 0, not a subnormal.
struct Sigmoid {
  float s, one_minus_s;
};
inline Sigmoid sigmoid(float g) {
  const float t = simd_exp(-std::fabs(g));
  const float negative = static_cast<float>(std::bit_cast<uint32_t>(g) >> 31);  // 1 if g < 0, else 0
  const float inv = 1.0f / (1.0f + t);
  return {(negative * t + (1.0f - negative)) * inv, (negative + (1.0f - negative) * t) * inv};
}
}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid(gate[i]).s * up[i];
}

// silu'(g) = s (1 + g (1 - s)), s = sigmoid(g). dgate may alias dout (each element is read first).
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], dy = dout[i];
    const Sigmoid sg = sigmoid(g);
    dup[i] = dy * g * sg.s;
    dgate[i] = dy * up[i] * sg.s * (1.0f + g * sg.one_minus_s);
  }
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(swiglu_forward)
TESSERA_ISA_DECLARE(swiglu_backward)

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  TESSERA_ISA_CALL(swiglu_forward, out, gate, up, n);
}
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
  TESSERA_ISA_CALL(swiglu_backward, dgate, dup, dout, gate, up, n);
}
#endif

}  // namespace tessera::kernels::cpu
