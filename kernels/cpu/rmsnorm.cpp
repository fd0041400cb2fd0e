// RMSNorm on the CPU (Llama's norm: no centring, no bias): forward saving rstd per row, and
// backward, parallel over rows.
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)
namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread does it all
}  // namespace

// rstd = 1 / sqrt(mean_c x^2 + eps); y = x rstd weight.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t rows, int64_t cols,
                     float eps) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    float* y = out + r * cols;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < cols; ++c) sq += x[c] * x[c];
    const float rs = 1.0f / std::sqrt(sq * inv_cols + eps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] = x[c] * rs * weight[c];
    rstd[r] = rs;
  }
}

// With xhat = x rstd and g = weight * dout: dinp += rstd (g - xhat mean_c(g xhat)), dweight += dout
// xhat. dweight: each thread sums its rows into a private vector (kept between calls), added up at
// the end, as layernorm_backward does.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t rows, int64_t cols) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int threads = rows * cols > kParallelMin ? omp_get_max_threads() : 1;
  thread_local std::vector<float> scratch;
  if (threads > 1) scratch.assign(static_cast<size_t>(threads) * cols, 0.0f);
  float* const partial = scratch.data();
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int nt = omp_get_num_threads();
    float* dw = nt > 1 ? partial + static_cast<size_t>(omp_get_thread_num()) * cols : dweight;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = inp + r * cols;
      const float* dy = dout + r * cols;
      float* dx = dinp + r * cols;
      const float rs = rstd[r];
      float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
      for (int64_t c = 0; c < cols; ++c) sum_gx += weight[c] * dy[c] * x[c] * rs;
      const float mean_gx = sum_gx * inv_cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const float xhat = x[c] * rs;
        dx[c] += rs * (weight[c] * dy[c] - xhat * mean_gx);
        dw[c] += dy[c] * xhat;
      }
    }
    if (nt > 1) {
#pragma omp for schedule(static)
      for (int64_t c = 0; c < cols; ++c) {
        float sw = 0.0f;
        for (int t = 0; t < nt; ++t) sw += partial[static_cast<size_t>(t) * cols + c];
        dweight[c] += sw;
      }
    }
  }
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(rmsnorm_forward)
TESSERA_ISA_DECLARE(rmsnorm_backward)

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t rows, int64_t cols,
                     float eps) {
  TESSERA_ISA_CALL(rmsnorm_forward, out, rstd, inp, weight, rows, cols, eps);
}
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t rows, int64_t cols) {
  TESSERA_ISA_CALL(rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, rows, cols);
}
#endif

}  // namespace tessera::kernels::cpu
