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
constexpr int64_t kStep = 16;                  // positions per step of the cos/sin table
constexpr int64_t kAnchor = kStep * kStep;     // positions per anchor

// cos and sin of p w_i (w_i = theta^(-2i/D)) for positions p = first + t, t < seq, i < D/2, as float
// tables [seq, D/2], made in double in a way that depends on p alone (so a sequence shard's table
// holds the one-rank table's rows bit for bit). p = a + m + r with a a multiple of kAnchor, m of
// kStep below kAnchor, r below kStep, and the angle-addition identities
//   cos(x + y) = cos x cos y - sin x sin y,   sin(x + y) = sin x cos y + cos x sin y
// from cos/sin(a w) (the library's, once per anchor), cos/sin(m w) and cos/sin(r w) (each by the
// same identities' recurrence from cos/sin(kStep w) and cos/sin(w): double rounding error ~1e-15,
// far below float's). Calling the library for every entry made the table cost as much as packing
// one sequence of 12 heads; this way it calls it about 2 / kAnchor times per entry.
void rope_table(std::vector<float>& cos_t, std::vector<float>& sin_t, const RopeShape& s) {
  const int64_t half = s.head_dim / 2, first = s.first_position, seq = s.seq;
  cos_t.resize(static_cast<size_t>(seq * half));
  sin_t.resize(cos_t.size());
  if (seq <= 0) return;
  // rc, rs [kStep, half]: cos/sin(r w); mc, ms [kStep, half]: cos/sin(kStep m w).
  const size_t steps = static_cast<size_t>(kStep * half);
  std::vector<double> w(static_cast<size_t>(half)), rc(steps), rs(steps), mc(steps), ms(steps);
  auto powers = [half](double* c, double* sn, int64_t i, double angle) {  // c[j], sn[j]: cos/sin(j angle)
    const double c1 = std::cos(angle), s1 = std::sin(angle);
    c[i] = 1.0;
    sn[i] = 0.0;
    for (int64_t j = 1; j < kStep; ++j) {
      c[j * half + i] = c[(j - 1) * half + i] * c1 - sn[(j - 1) * half + i] * s1;
      sn[j * half + i] = sn[(j - 1) * half + i] * c1 + c[(j - 1) * half + i] * s1;
    }
  };
  for (int64_t i = 0; i < half; ++i) {
    w[i] = std::pow(static_cast<double>(s.theta), -2.0 * static_cast<double>(i) / static_cast<double>(s.head_dim));
    powers(rc.data(), rs.data(), i, w[i]);
    powers(mc.data(), ms.data(), i, static_cast<double>(kStep) * w[i]);
  }
  // ac, as [anchors, half]: cos/sin(a w) for the anchors at or below the positions.
  const int64_t a0 = first / kAnchor, anchors = (first + seq - 1) / kAnchor - a0 + 1;
  std::vector<double> ac(static_cast<size_t>(anchors * half)), as(ac.size());
  for (int64_t a = 0; a < anchors; ++a)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>((a0 + a) * kAnchor) * w[i];
      ac[a * half + i] = std::cos(angle);
      as[a * half + i] = std::sin(angle);
    }
  // Then each step of kStep positions: cos/sin((a + m) w), and from it every position's row.
  const int64_t b0 = first / kStep, blocks = (first + seq - 1) / kStep - b0 + 1;
#pragma omp parallel if (seq * half > kParallelMin)
  {
    std::vector<double> bc(static_cast<size_t>(half)), bs(bc.size());
#pragma omp for schedule(static)
    for (int64_t b = b0; b < b0 + blocks; ++b) {
      const double* c_a = ac.data() + ((b * kStep) / kAnchor - a0) * half;
      const double* s_a = as.data() + ((b * kStep) / kAnchor - a0) * half;
      const double* c_m = mc.data() + (b % kStep) * half;
      const double* s_m = ms.data() + (b % kStep) * half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        bc[i] = c_a[i] * c_m[i] - s_a[i] * s_m[i];
        bs[i] = s_a[i] * c_m[i] + c_a[i] * s_m[i];
      }
      const int64_t p_lo = std::max(first, b * kStep), p_hi = std::min(first + seq, (b + 1) * kStep);
      for (int64_t p = p_lo; p < p_hi; ++p) {
        const double* c_r = rc.data() + (p - b * kStep) * half;
        const double* s_r = rs.data() + (p - b * kStep) * half;
        float* c = cos_t.data() + (p - first) * half;
        float* sn = sin_t.data() + (p - first) * half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          c[i] = static_cast<float>(bc[i] * c_r[i] - bs[i] * s_r[i]);
          sn[i] = static_cast<float>(bs[i] * c_r[i] + bc[i] * s_r[i]);
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

// The table of the last call on this thread, made again only when its positions, head size or
// base change: a step's layers, micro-batches and backward all read one table (nothing computed
// or allocated per call).
struct RopeTable {
  int64_t first = -1, seq = -1, head_dim = -1;
  float theta = 0;
  std::vector<float> cos_t, sin_t;
};
const RopeTable& table_for(const RopeShape& s) {
  thread_local RopeTable table;
  if (table.first != s.first_position || table.seq != s.seq || table.head_dim != s.head_dim ||
      table.theta != s.theta) {
    rope_table(table.cos_t, table.sin_t, s);
    table.first = s.first_position;
    table.seq = s.seq;
    table.head_dim = s.head_dim;
    table.theta = s.theta;
  }
  return table;
}

// Document masking gives each row its own positions, all below first_position + seq: the table
// then covers [0, first_position + seq) and row n reads its position's row.
RopeShape table_shape(const RopeShape& s) {
  if (!s.positions) return s;
  RopeShape t = s;
  t.seq = s.first_position + s.seq;
  t.first_position = 0;
  return t;
}

}  // namespace

void rope_pack_forward(float* qkv, const float* q, const float* k, const float* v, const RopeShape& s) {
  const RopeTable& table = table_for(table_shape(s));
  const std::vector<float>& cos_t = table.cos_t;
  const std::vector<float>& sin_t = table.sin_t;
  const int64_t D = s.head_dim, half = D / 2, H = s.heads, K = s.kv_heads, rows = s.batch * s.seq;
#pragma omp parallel for schedule(static) if (rows * H * D > kParallelMin)
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t t = s.positions ? s.positions[n] : n % s.seq;
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
  const RopeTable& table = table_for(table_shape(s));
  const std::vector<float>& cos_t = table.cos_t;
  const std::vector<float>& sin_t = table.sin_t;
  const int64_t D = s.head_dim, half = D / 2, H = s.heads, K = s.kv_heads, rows = s.batch * s.seq;
#pragma omp parallel for schedule(static) if (rows * H * D > kParallelMin)
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t t = s.positions ? s.positions[n] : n % s.seq;
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
