// The quantised matmuls' portable path (quant_paths.h): a plain loop per output row and group,
// each weight dequantised as (q [- zero]) * scale in f32 and multiply-added into one f32 sum; and the
// dequantisation of a block of rows into an f32 panel (the batched products' first half).
#include "kernels/cpu/quant_paths.h"

namespace tessera::kernels::cpu {
namespace {

// The dot product of x[cols] with row n of W.
float row_dot(const float* x, const QuantMatrixView& w, int64_t n) {
  const int64_t groups = w.cols / w.group;
  const float* scales = w.scales + n * groups;
  float acc = 0.0f;
  if (w.bits == 8) {
    const auto* q = reinterpret_cast<const int8_t*>(w.q) + n * w.cols;
    for (int64_t g = 0; g < groups; ++g) {
      const float s = scales[g];
      for (int64_t k = g * w.group; k < (g + 1) * w.group; ++k) acc += x[k] * (static_cast<float>(q[k]) * s);
    }
  } else {
    const uint8_t* q = w.q + n * (w.cols / 2);
    const uint8_t* zeros = w.zeros + n * groups;
    for (int64_t g = 0; g < groups; ++g) {
      const float s = scales[g];
      const int z = zeros[g];
      for (int64_t k = g * w.group; k < (g + 1) * w.group; k += 2) {
        const uint8_t pair = q[k / 2];
        acc += x[k] * (static_cast<float>((pair & 0x0F) - z) * s);
        acc += x[k + 1] * (static_cast<float>((pair >> 4) - z) * s);
      }
    }
  }
  return acc;
}

}  // namespace

void quant_gemv_rows_scalar(float* y, const float* x, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) y[n] = row_dot(x, w, n);
}

void quant_gemm_rows_scalar(float* y, const float* x, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t n = n0; n < n1; ++n) y[i * w.rows + n] = row_dot(x + i * w.cols, w, n);
}

void quant_dequantize_rows_scalar(float* panel, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  const int64_t groups = w.cols / w.group;
  for (int64_t n = n0; n < n1; ++n) {
    float* out = panel + (n - n0) * w.cols;
    const float* scales = w.scales + n * groups;
    if (w.bits == 8) {
      const auto* q = reinterpret_cast<const int8_t*>(w.q) + n * w.cols;
      for (int64_t k = 0; k < w.cols; ++k) out[k] = static_cast<float>(q[k]) * scales[k / w.group];
    } else {
      const uint8_t* q = w.q + n * (w.cols / 2);
      const uint8_t* zeros = w.zeros + n * groups;
      for (int64_t k = 0; k < w.cols; k += 2) {
        const float s = scales[k / w.group];
        const int z = zeros[k / w.group];
        out[k] = static_cast<float>((q[k / 2] & 0x0F) - z) * s;
        out[k + 1] = static_cast<float>((q[k / 2] >> 4) - z) * s;
      }
    }
  }
}

}  // namespace tessera::kernels::cpu
