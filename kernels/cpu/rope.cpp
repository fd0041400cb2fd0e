// Rotary position embedding (RoPE, Hugging Face Llama's "rotate half" pairing) applied while q, k
// and v are packed for the attention kernels, with grouped-query attention's k and v heads
// repeated for the query heads that share them; and the transpose of both.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread does it all
constexpr int64_t kSpan = 16;              // positions per anchor of the cos/sin table

// cos and sin of position p x w_i (w_i = theta^(-2i/D)) for p = first + t, t < seq, i < D/2, as
// float tables [seq, D/2], made in double in a way that depends on p alone (so a sequence shard's
// table holds the one-rank table's rows bit for bit): with p = a + r, a = kSpan floor(p / kSpan),
//   cos(p w) = cos(a w) cos(r w) - sin(a w) sin(r w),  sin(p w) = sin(a w) cos(r w) + cos(a w) sin(r w),
// cos/sin(a w) by the library per anchor, cos/sin(r w) for r < kSpan by the recurrence of the same
// identities from cos/sin(w) (double rounding error ~1e-15, far below float's). That is 2 / kSpan
// library calls per entry instead of 2 (which made the table as costly as packing one sequence of
// 12 heads); anchors are shared among threads when the table is large.
void rope_table(std::vector<float>& cos_t, std::vector<float>& sin_t, const RopeShape& s) {
  const int64_t half = s.head_dim / 2, first = s.first_position, seq = s.seq;
  cos_t.resize(static_cast<size_t>(seq * half));
  sin_t.resize(cos_t.size());
  std::vector<double> w(static_cast<size_t>(half)), rc(static_cast<size_t>(kSpan * half)), rs(rc.size());
  for (int64_t i = 0; i < half; ++i) {
    w[i] = std::pow(static_cast<double>(s.theta), -2.0 * static_cast<double>(i) / static_cast<double>(s.head_dim));
    const double c1 = std::cos(w[i]), s1 = std::sin(w[i]);
    rc[i] = 1.0;
    rs[i] = 0.0;
    for (int64_t r = 1; r < kSpan; ++r) {
      rc[r * half + i] = rc[(r - 1) * half + i] * c1 - rs[(r - 1) * half + i] * s1;
      rs[r * half + i] = rs[(r - 1) * half + i] * c1 + rc[(r - 1) * half + i] * s1;
    }
  }
  if (seq <= 0) return;
  const int64_t a0 = first / kSpan, a1 = (first + seq - 1) / kSpan;
#pragma omp parallel if ((a1 - a0 + 1) * half * kSpan > kParallelMin)
  {
    std::vector<double> ac(static_cast<size_t>(half)), as(ac.size());
#pragma omp for schedule(static)
    for (int64_t a = a0; a <= a1; ++a) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(a * kSpan) * w[i];
        ac[i] = std::cos(angle);
        as[i] = std::sin(angle);
      }
      const int64_t p_lo = std::max(first, a * kSpan), p_hi = std::min(first + seq, (a + 1) * kSpan);
      for (int64_t p = p_lo; p < p_hi; ++p) {
        const double* oc = rc.data() + (p - a * kSpan) * half;
        const double* os = rs.data() + (p - a * kSpan) * half;
        float* c = cos_t.data() + (p - first) * half;
        float* sn = sin_t.data() + (p - first) * half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          c[i] = static_cast<float>(ac[i] * oc[i] - as[i] * os[i]);
          sn[i] = static_cast<float>(as[i] * oc[i] + ac[i] * os[i]);
        }
      }
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
#pragma omp parallel for schedule(static) if (rows * H * D > kParallelMin)
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
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) vo[d] = vh[d];
    }
  }
}

void rope_pack_backward(float* dq, float* dk, float* dv, const float* dqkv, const RopeShape& s) {
  std::vector<float> cos_t, sin_t;
  rope_table(cos_t, sin_t, s);
  const int64_t D = s.head_dim, half = D / 2, H = s.heads, K = s.kv_heads, rows = s.batch * s.seq;
#pragma omp parallel for schedule(static) if (rows * H * D > kParallelMin)
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t t = n % s.seq;
    const float* c = cos_t.data() + t * half;
    const float* sn = sin_t.data() + t * half;
    const float* in = dqkv + n * 3 * H * D;
    float* dk_row = dk + n * K * D;
    float* dv_row = dv + n * K * D;
#pragma omp simd
    for (int64_t i = 0; i < K * D; ++i) dk_row[i] = dv_row[i] = 0.0f;  // heads no local query uses stay 0
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = kv_head_of(s, h);
      rotate<true, false>(dq + (n * H + h) * D, in + h * D, c, sn, half);
      rotate<true, true>(dk_row + kv * D, in + (H + h) * D, c, sn, half);
      const float* g = in + (2 * H + h) * D;
      float* dvh = dv_row + kv * D;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) dvh[d] += g[d];
    }
  }
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(rope_pack_forward)
TESSERA_ISA_DECLARE(rope_pack_backward)

void rope_pack_forward(float* qkv, const float* q, const float* k, const float* v, const RopeShape& shape) {
  TESSERA_ISA_CALL(rope_pack_forward, qkv, q, k, v, shape);
}
void rope_pack_backward(float* dq, float* dk, float* dv, const float* dqkv, const RopeShape& shape) {
  TESSERA_ISA_CALL(rope_pack_backward, dq, dk, dv, dqkv, shape);
}
#endif

}  // namespace tessera::kernels::cpu
