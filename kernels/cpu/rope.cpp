// Rotary position embedding (RoPE, Hugging Face Llama's "rotate half" pairing) applied while q, k
// and v are packed for the attention kernels, with grouped-query attention's k and v heads
// repeated for the query heads that share them; and the transpose of both.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {
namespace {

// cos and sin of position (first + t) x theta^(-2i/D) for t < seq, i < D/2, in double (then
// rounded): [seq, D/2] each.
void rope_table(std::vector<float>& cos_t, std::vector<float>& sin_t, const RopeShape& s) {
  const int64_t half = s.head_dim / 2;
  cos_t.resize(static_cast<size_t>(s.seq * half));
  sin_t.resize(cos_t.size());
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(static_cast<double>(s.theta), -2.0 * static_cast<double>(i) /
                                                                        static_cast<double>(s.head_dim));
    for (int64_t t = 0; t < s.seq; ++t) {
      const double angle = static_cast<double>(s.first_position + t) * inv_freq;
      cos_t[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(angle));
      sin_t[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(angle));
    }
  }
}

// y = R x: y[i] = x[i] c - x[i + D/2] s, y[i + D/2] = x[i + D/2] c + x[i] s. add: y += instead.
// transpose: R^T (the angle negated).
template <bool transpose, bool add>
inline void rotate(float* y, const float* x, const float* c, const float* s, int64_t half) {
  const float sign = transpose ? -1.0f : 1.0f;
#pragma omp simd
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half], sn = sign * s[i];
    const float lo = a * c[i] - b * sn, hi = b * c[i] + a * sn;
    if (add) {
      y[i] += lo;
      y[i + half] += hi;
    } else {
      y[i] = lo;
      y[i + half] = hi;
    }
  }
}

int64_t kv_head_of(const RopeShape& s, int64_t h) { return (s.first_head + h) / s.group - s.first_kv_head; }

}  // namespace

void rope_pack_forward(float* qkv, const float* q, const float* k, const float* v, const RopeShape& s) {
  std::vector<float> cos_t, sin_t;
  rope_table(cos_t, sin_t, s);
  const int64_t D = s.head_dim, half = D / 2, H = s.heads, K = s.kv_heads, rows = s.batch * s.seq;
#pragma omp parallel for schedule(static) if (rows * H * D > (1 << 14))
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t t = n % s.seq;
    const float* c = cos_t.data() + t * half;
    const float* sn = sin_t.data() + t * half;
    float* out = qkv + n * 3 * H * D;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = kv_head_of(s, h);
      rotate<false, false>(out + h * D, q + (n * H + h) * D, c, sn, half);
      rotate<false, false>(out + (H + h) * D, k + (n * K + kv) * D, c, sn, half);
      const float* vh = v + (n * K + kv) * D;
      float* vo = out + (2 * H + h) * D;
      for (int64_t d = 0; d < D; ++d) vo[d] = vh[d];
    }
  }
}

void rope_pack_backward(float* dq, float* dk, float* dv, const float* dqkv, const RopeShape& s) {
  std::vector<float> cos_t, sin_t;
  rope_table(cos_t, sin_t, s);
  const int64_t D = s.head_dim, half = D / 2, H = s.heads, K = s.kv_heads, rows = s.batch * s.seq;
#pragma omp parallel for schedule(static) if (rows * H * D > (1 << 14))
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t t = n % s.seq;
    const float* c = cos_t.data() + t * half;
    const float* sn = sin_t.data() + t * half;
    const float* in = dqkv + n * 3 * H * D;
    float* dk_row = dk + n * K * D;
    float* dv_row = dv + n * K * D;
    for (int64_t i = 0; i < K * D; ++i) dk_row[i] = dv_row[i] = 0.0f;  // heads no local query uses stay 0
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = kv_head_of(s, h);
      rotate<true, false>(dq + (n * H + h) * D, in + h * D, c, sn, half);
      rotate<true, true>(dk_row + kv * D, in + (H + h) * D, c, sn, half);
      const float* g = in + (2 * H + h) * D;
      float* dvh = dv_row + kv * D;
      for (int64_t d = 0; d < D; ++d) dvh[d] += g[d];
    }
  }
}

}  // namespace tessera::kernels::cpu
