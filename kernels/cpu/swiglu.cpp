// SwiGLU on the CPU (Llama's MLP activation): out = silu(gate) * up, and its backward.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {
namespace {
constexpr int64_t kParallelMin = 1 << 14;
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

// silu'(g) = s (1 + g (1 - s)), s = sigmoid(g). dgate may alias dout (each element is read first).
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], s = sigmoid(g), dy = dout[i];
    dup[i] = dy * g * s;
    dgate[i] = dy * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

}  // namespace tessera::kernels::cpu
