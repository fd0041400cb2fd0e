// Causal self-attention on the CPU, flash-attention style: forward with an online softmax over
// key/value tiles (no T x T matrix), backward recomputing the probabilities from the saved lse.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {

#pragma omp declare simd notinbranch
float simd_exp(float x);  // simd_exp.cpp

namespace {

constexpr int64_t kTile = 64;  // keys per tile, and queries per forward work item

// Where the rows of one (batch, head) live: qkv [B, T, 3, H, D] (and dqkv alike), out [B, T, H, D]
// (and dout alike), lse [B, H, T]. Offsets are of token 0; strides are between consecutive tokens.
struct HeadView {
  int64_t seq, head_dim;
  int64_t qkv_offset, qkv_stride, kv_shift;  // q of token 0; k = q + kv_shift, v = q + 2 kv_shift
  int64_t out_offset, out_stride;
  int64_t lse_offset;
};

HeadView head_view(int64_t b, int64_t h, int64_t seq, int64_t heads, int64_t head_dim) {
  const int64_t c = heads * head_dim;
  return {seq, head_dim, b * seq * 3 * c + h * head_dim, 3 * c, c, b * seq * c + h * head_dim, c,
          (b * heads + h) * seq};
}

// kt[d * kTile + j] = rows[j][d] for j < count, zero for count <= j < kTile: a tile of keys (or
// values) transposed, so that dot products with one query row vectorise over the keys.
void pack_transposed(float* __restrict kt, const float* __restrict first_row, int64_t stride, int64_t count,
                     int64_t dim) {
  for (int64_t j = 0; j < count; ++j) {
    const float* row = first_row + j * stride;
    for (int64_t d = 0; d < dim; ++d) kt[d * kTile + j] = row[d];
  }
  if (count < kTile)
    for (int64_t d = 0; d < dim; ++d) std::fill(kt + d * kTile + count, kt + (d + 1) * kTile, 0.0f);
}

// s[j] = sum_d x[d] * kt[d][j], for all kTile columns.
inline void dot_tile(float* __restrict s, const float* __restrict x, const float* __restrict kt, int64_t dim) {
#pragma omp simd
  for (int64_t j = 0; j < kTile; ++j) s[j] = 0.0f;
  for (int64_t d = 0; d < dim; ++d) {
    const float xd = x[d];
    const float* col = kt + d * kTile;
#pragma omp simd
    for (int64_t j = 0; j < kTile; ++j) s[j] += xd * col[j];
  }
}

// acc[d] += sum_{j < count} w[j] * rows[j][d].
inline void add_weighted_rows(float* __restrict acc, const float* __restrict w, const float* __restrict first_row,
                              int64_t stride, int64_t count, int64_t dim) {
  for (int64_t j = 0; j < count; ++j) {
    const float wj = w[j];
    const float* row = first_row + j * stride;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) acc[d] += wj * row[d];
  }
}

// rows[j][d] += w[j] * x[d] for j < count (a rank-1 update of a tile of dim-wide rows).
inline void add_outer(float* __restrict rows, const float* __restrict w, const float* __restrict x, int64_t count,
                      int64_t dim) {
  for (int64_t j = 0; j < count; ++j) {
    const float wj = w[j];
    float* row = rows + j * dim;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) row[d] += wj * x[d];
  }
}

// One (batch, head, query block [q0, q1)): each query row keeps a running max m, a running sum l
// and an unnormalised output acc; each key tile rescales them by exp(m_old - m_new).
void forward_block(float* out, float* lse, const float* qkv, const HeadView& hv, int64_t q0, int64_t q1,
                   float scale, std::vector<float>& scratch) {
  const int64_t dim = hv.head_dim, nq = q1 - q0, stride = hv.qkv_stride;
  scratch.resize(static_cast<size_t>(3 * kTile * dim + 3 * kTile));
  float* kt = scratch.data();
  float* qs = kt + kTile * dim;
  float* acc = qs + kTile * dim;
  float* m = acc + kTile * dim;
  float* l = m + kTile;
  float* s = l + kTile;
  const float* q_rows = qkv + hv.qkv_offset;
  const float* k_rows = q_rows + hv.kv_shift;
  const float* v_rows = q_rows + 2 * hv.kv_shift;
  for (int64_t i = 0; i < nq; ++i) {
    const float* q = q_rows + (q0 + i) * stride;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) {
      qs[i * dim + d] = q[d] * scale;
      acc[i * dim + d] = 0.0f;
    }
    m[i] = -std::numeric_limits<float>::infinity();
    l[i] = 0.0f;
  }
  for (int64_t k0 = 0; k0 < q1; k0 += kTile) {
    const int64_t nk = std::min(kTile, q1 - k0);
    pack_transposed(kt, k_rows + k0 * stride, stride, nk, dim);
    for (int64_t i = std::max(q0, k0) - q0; i < nq; ++i) {
      const int64_t n = std::min(nk, q0 + i + 1 - k0);  // causal: keys k0 .. q0 + i
      dot_tile(s, qs + i * dim, kt, dim);
      float tile_max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : tile_max)
      for (int64_t j = 0; j < n; ++j) tile_max = std::max(tile_max, s[j]);
      const float m_new = std::max(m[i], tile_max);
      const float correction = simd_exp(m[i] - m_new);  // 0 on the first tile (m = -inf)
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < n; ++j) {
        s[j] = simd_exp(s[j] - m_new);
        sum += s[j];
      }
      l[i] = l[i] * correction + sum;
      m[i] = m_new;
      float* a = acc + i * dim;
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) a[d] *= correction;
      add_weighted_rows(a, s, v_rows + k0 * stride, stride, n, dim);
    }
  }
  for (int64_t i = 0; i < nq; ++i) {
    const float inv = 1.0f / l[i];
    float* o = out + hv.out_offset + (q0 + i) * hv.out_stride;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) o[d] = acc[i * dim + d] * inv;
    lse[hv.lse_offset + q0 + i] = m[i] + std::log(l[i]);
  }
}

// One (batch, head): key tiles outside, the queries that see them inside. A tile's dK and dV
// gather in local accumulators; dQ rows gather in this head's own slice of dqkv (zeroed first).
//   p = exp(scale q.k - lse),  dp = dO.v,  ds = p (dp - delta),  delta = dO.O
//   dV += p dO,  dK += scale ds q,  dQ += scale ds k
void backward_head(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                   const HeadView& hv, float scale, std::vector<float>& scratch) {
  const int64_t dim = hv.head_dim, seq = hv.seq, stride = hv.qkv_stride, ostride = hv.out_stride;
  scratch.resize(static_cast<size_t>(4 * kTile * dim + 3 * kTile + seq));
  float* kt = scratch.data();
  float* vt = kt + kTile * dim;
  float* dk = vt + kTile * dim;
  float* dv = dk + kTile * dim;
  float* p = dv + kTile * dim;
  float* dp = p + kTile;
  float* ds = dp + kTile;
  float* delta = ds + kTile;
  const float* q_rows = qkv + hv.qkv_offset;
  const float* k_rows = q_rows + hv.kv_shift;
  const float* v_rows = q_rows + 2 * hv.kv_shift;
  float* dq_rows = dqkv + hv.qkv_offset;
  float* dk_rows = dq_rows + hv.kv_shift;
  float* dv_rows = dq_rows + 2 * hv.kv_shift;
  const float* o_rows = out + hv.out_offset;
  const float* do_rows = dout + hv.out_offset;
  const float* lse_row = lse + hv.lse_offset;

  for (int64_t t = 0; t < seq; ++t) {
    const float* o = o_rows + t * ostride;
    const float* g = do_rows + t * ostride;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t d = 0; d < dim; ++d) sum += g[d] * o[d];
    delta[t] = sum;
    std::fill(dq_rows + t * stride, dq_rows + t * stride + dim, 0.0f);
  }
  for (int64_t k0 = 0; k0 < seq; k0 += kTile) {
    const int64_t nk = std::min(kTile, seq - k0);
    pack_transposed(kt, k_rows + k0 * stride, stride, nk, dim);
    pack_transposed(vt, v_rows + k0 * stride, stride, nk, dim);
    std::fill(dk, dk + 2 * kTile * dim, 0.0f);  // dk and dv
    for (int64_t i = k0; i < seq; ++i) {
      const int64_t n = std::min(nk, i + 1 - k0);  // causal: keys k0 .. i of this tile
      const float* q = q_rows + i * stride;
      const float* g = do_rows + i * ostride;
      dot_tile(p, q, kt, dim);
      dot_tile(dp, g, vt, dim);
      const float lse_i = lse_row[i], delta_i = delta[i];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        p[j] = simd_exp(p[j] * scale - lse_i);
        ds[j] = p[j] * (dp[j] - delta_i) * scale;
      }
      add_outer(dv, p, g, n, dim);
      add_outer(dk, ds, q, n, dim);
      add_weighted_rows(dq_rows + i * stride, ds, k_rows + k0 * stride, stride, n, dim);
    }
    for (int64_t j = 0; j < nk; ++j) {
      std::copy(dk + j * dim, dk + (j + 1) * dim, dk_rows + (k0 + j) * stride);
      std::copy(dv + j * dim, dv + (j + 1) * dim, dv_rows + (k0 + j) * stride);
    }
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                       int64_t head_dim) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t blocks = (seq + kTile - 1) / kTile, items = batch * heads * blocks;
#pragma omp parallel if (items > 1)
  {
    std::vector<float> scratch;
    // Later query blocks see more keys: hand them out first, dynamically.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t block = blocks - 1 - item % blocks, bh = item / blocks;
      const HeadView hv = head_view(bh / heads, bh % heads, seq, heads, head_dim);
      const int64_t q0 = block * kTile;
      forward_block(out, lse, qkv, hv, q0, std::min(seq, q0 + kTile), scale, scratch);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t items = batch * heads;
#pragma omp parallel if (items > 1)
  {
    std::vector<float> scratch;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < items; ++bh) {
      const HeadView hv = head_view(bh / heads, bh % heads, seq, heads, head_dim);
      backward_head(dqkv, dout, qkv, out, lse, hv, scale, scratch);
    }
  }
}

}  // namespace tessera::kernels::cpu
