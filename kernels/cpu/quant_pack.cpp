// Weight-only quantisation of a matrix by row groups, round to nearest (op_list.h: quantize_weights),
// and its inverse (dequantize_weights), the reference the quantised matmuls are tested against.
// Rows are independent: OpenMP threads over rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quant_paths.h"

namespace tessera::kernels::cpu {
namespace {

// The smallest bf16 value (as f32) not below s >= 0: its bits rounded up to the upper 16.
float round_up_to_bf16(float s) {
  uint32_t bits;
  std::memcpy(&bits, &s, 4);
  if ((bits & 0xFFFFu) != 0) bits = (bits & 0xFFFF0000u) + 0x10000u;
  std::memcpy(&s, &bits, 4);
  return s;
}

// One group of int8: symmetric, scale = max |w| / 127.
void quantize_group8(int8_t* q, float* scale, const float* w, int64_t n, bool bf16) {
  float amax = 0.0f;
  for (int64_t k = 0; k < n; ++k) amax = std::max(amax, std::fabs(w[k]));
  float s = amax / 127.0f;
  if (bf16) s = round_up_to_bf16(s);
  *scale = s;
  for (int64_t k = 0; k < n; ++k)
    q[k] = s == 0.0f ? 0 : static_cast<int8_t>(std::clamp(std::nearbyint(w[k] / s), -127.0f, 127.0f));
}

// One group of int4 values (unpacked, 0..15) with a zero point over [min(w, 0), max(w, 0)]:
// scale = range / 15, zero = round(-min / scale). Zero stays exact, and every value lands within
// half a step of a level (zero - (-min / scale) is within 1/2, so w / scale + zero is in [-1/2, 15.5]).
void quantize_group4(uint8_t* q, float* scale, uint8_t* zero, const float* w, int64_t n, bool bf16) {
  float lo = 0.0f, hi = 0.0f;
  for (int64_t k = 0; k < n; ++k) lo = std::min(lo, w[k]), hi = std::max(hi, w[k]);
  float s = (hi - lo) / 15.0f;
  if (bf16) s = round_up_to_bf16(s);
  *scale = s;
  if (s == 0.0f) {
    *zero = 0;
    std::fill_n(q, n, uint8_t{0});
    return;
  }
  const float z = std::clamp(std::nearbyint(-lo / s), 0.0f, 15.0f);
  *zero = static_cast<uint8_t>(z);
  for (int64_t k = 0; k < n; ++k) q[k] = static_cast<uint8_t>(std::clamp(std::nearbyint(w[k] / s) + z, 0.0f, 15.0f));
}

}  // namespace

void quantize_weights(uint8_t* q, float* scales, uint8_t* zeros, const float* w, int64_t rows, int64_t cols,
                      int64_t group, int bits, bool bf16_scales) {
  QuantMatrixView view{q, scales, zeros, rows, cols, group, bits};
  check_quant_view(view, "quantize_weights");
  TESSERA_CHECK(rows == 0 || cols == 0 || w, "quantize_weights: a null w pointer");
  const int64_t groups = group > 0 ? cols / group : 0;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t n = 0; n < rows; ++n) {
    if (bits == 8) {
      auto* row = reinterpret_cast<int8_t*>(q) + n * cols;
      for (int64_t g = 0; g < groups; ++g)
        quantize_group8(row + g * group, scales + n * groups + g, w + n * cols + g * group, group, bf16_scales);
    } else {
      std::vector<uint8_t> levels(static_cast<size_t>(group));  // one group's, unpacked
      uint8_t* row = q + n * (cols / 2);
      for (int64_t g = 0; g < groups; ++g) {
        quantize_group4(levels.data(), scales + n * groups + g, zeros + n * groups + g, w + n * cols + g * group,
                        group, bf16_scales);
        for (int64_t k = 0; k < group; k += 2)
          row[(g * group + k) / 2] = static_cast<uint8_t>(levels[k] | (levels[k + 1] << 4));
      }
    }
  }
}

void dequantize_weights(float* w, const QuantMatrixView& q) {
  check_quant_view(q, "dequantize_weights");
  const int64_t groups = q.cols / q.group;
#pragma omp parallel for schedule(static) if (q.rows * q.cols > (1 << 16))
  for (int64_t n = 0; n < q.rows; ++n) {
    for (int64_t k = 0; k < q.cols; ++k) {
      const int64_t g = n * groups + k / q.group;
      if (q.bits == 8) {
        w[n * q.cols + k] = static_cast<float>(reinterpret_cast<const int8_t*>(q.q)[n * q.cols + k]) * q.scales[g];
      } else {
        const uint8_t pair = q.q[n * (q.cols / 2) + k / 2];
        const int level = k % 2 == 0 ? pair & 0x0F : pair >> 4;
        w[n * q.cols + k] = static_cast<float>(level - q.zeros[g]) * q.scales[g];
      }
    }
  }
}

}  // namespace tessera::kernels::cpu
