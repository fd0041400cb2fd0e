// Causal self-attention on the CPU, flash-attention style: forward with an online softmax over
// key/value tiles (no T x T matrix), backward recomputing the probabilities from the saved lse.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd_math.h"

namespace tessera::kernels::cpu {


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
// values) transposed, so that dot products with query rows vectorise over the keys.
void pack_transposed(float* __restrict kt, const float* __restrict first_row, int64_t stride, int64_t count,
                     int64_t dim) {
  for (int64_t j = 0; j < count; ++j) {
    const float* row = first_row + j * stride;
    for (int64_t d = 0; d < dim; ++d) kt[d * kTile + j] = row[d];
  }
  if (count < kTile)
    for (int64_t d = 0; d < dim; ++d) std::fill(kt + d * kTile + count, kt + (d + 1) * kTile, 0.0f);
}

// The three small products below work on R query rows at once and on 16 columns at a time, so
// that the R x 16 accumulators stay in registers (the compiler keeps fixed-size local arrays
// there) while each loaded vector is used R times.
// 8 rows where the ISA has 32 vector registers (AVX-512), 4 where it has 16.
#if defined(__AVX512F__)
constexpr int kRows = 8;
#else
constexpr int kRows = 4;
#endif
constexpr int64_t kLanes = 16;

// s[r][j] = sum_d x_r[d] * kt[d][j], j < kTile, for rows x_r = x + r * x_stride.
template <int R>
inline void rows_times_tile(float* __restrict s, const float* __restrict x, int64_t x_stride,
                            const float* __restrict kt, int64_t dim) {
  for (int64_t j0 = 0; j0 < kTile; j0 += kLanes) {
    float acc[R][kLanes] = {};
    for (int64_t d = 0; d < dim; ++d) {
      const float* col = kt + d * kTile + j0;
      for (int r = 0; r < R; ++r) {
        const float xr = x[r * x_stride + d];
#pragma omp simd
        for (int64_t j = 0; j < kLanes; ++j) acc[r][j] += xr * col[j];
      }
    }
    for (int r = 0; r < R; ++r)
#pragma omp simd
      for (int64_t j = 0; j < kLanes; ++j) s[r * kTile + j0 + j] = acc[r][j];
  }
}

// acc_r[d] += sum_{j < count} w[r][j] * rows_j[d]: R accumulator rows (acc + r * acc_stride)
// against `count` dim-wide rows (first_row + j * stride), weights w [R][kTile].
template <int R>
inline void weights_times_rows(float* __restrict acc, int64_t acc_stride, const float* __restrict w,
                               const float* __restrict first_row, int64_t stride, int64_t count, int64_t dim) {
  int64_t d0 = 0;
  for (; d0 + kLanes <= dim; d0 += kLanes) {
    float c[R][kLanes];
    for (int r = 0; r < R; ++r)
#pragma omp simd
      for (int64_t d = 0; d < kLanes; ++d) c[r][d] = acc[r * acc_stride + d0 + d];
    for (int64_t j = 0; j < count; ++j) {
      const float* row = first_row + j * stride + d0;
      for (int r = 0; r < R; ++r) {
        const float wr = w[r * kTile + j];
#pragma omp simd
        for (int64_t d = 0; d < kLanes; ++d) c[r][d] += wr * row[d];
      }
    }
    for (int r = 0; r < R; ++r)
#pragma omp simd
      for (int64_t d = 0; d < kLanes; ++d) acc[r * acc_stride + d0 + d] = c[r][d];
  }
  if (d0 == dim) return;
  for (int r = 0; r < R; ++r)  // the last dim % 16 columns
    for (int64_t j = 0; j < count; ++j) {
      const float wr = w[r * kTile + j];
      const float* row = first_row + j * stride;
#pragma omp simd
      for (int64_t d = d0; d < dim; ++d) acc[r * acc_stride + d] += wr * row[d];
    }
}

// out_j[d] += sum_r w[r][j] * x_r[d] for j < count: a tile of dim-wide rows out_j = out + j *
// out_stride gathering R weighted rows x_r = x + r * x_stride, weights w [R][kTile].
template <int R>
inline void add_weighted_outer(float* __restrict out, int64_t out_stride, const float* __restrict w,
                               const float* __restrict x, int64_t x_stride, int64_t count, int64_t dim) {
  int64_t d0 = 0;
  for (; d0 + kLanes <= dim; d0 += kLanes) {
    for (int64_t j = 0; j < count; ++j) {
      float* o = out + j * out_stride + d0;
      float wj[R];
      for (int r = 0; r < R; ++r) wj[r] = w[r * kTile + j];
#pragma omp simd
      for (int64_t d = 0; d < kLanes; ++d) {
        float c = o[d];
        for (int r = 0; r < R; ++r) c += wj[r] * x[r * x_stride + d0 + d];
        o[d] = c;
      }
    }
  }
  if (d0 == dim) return;
  for (int64_t j = 0; j < count; ++j)
    for (int r = 0; r < R; ++r) {
      const float wr = w[r * kTile + j];
#pragma omp simd
      for (int64_t d = d0; d < dim; ++d) out[j * out_stride + d] += wr * x[r * x_stride + d];
    }
}

// A thread's scratch (a few tiles, sized for head_dim), handed out in consecutive pieces.
class Scratch {
 public:
  void reset(int64_t total) {
    buf_.resize(static_cast<size_t>(total));
    used_ = 0;
  }
  float* take(int64_t n) {
    float* p = buf_.data() + used_;
    used_ += n;
    return p;
  }

 private:
  std::vector<float> buf_;
  int64_t used_ = 0;
};

// One (batch, head, query block [q0, q1)), R rows at a time. Each query row keeps a running max
// m, a running sum l and an unnormalised output acc; each key tile rescales them by
// exp(m_old - m_new) and adds its own exp(s - m_new) weighted values.
template <int R>
void forward_rows(float* acc, float* m, float* l, const float* qs, int64_t dim, const float* kt, const float* v_first,
                  int64_t stride, int64_t first_query, int64_t k0, int64_t nk, float* s) {
  rows_times_tile<R>(s, qs, dim, kt, dim);
  int64_t count = 0;  // keys any of the R rows sees in this tile
  for (int r = 0; r < R; ++r) {
    const int64_t n = std::min(nk, first_query + r + 1 - k0);  // causal: keys k0 .. query
    count = std::max(count, n);
    float* sr = s + r * kTile;
    float tile_max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : tile_max)
    for (int64_t j = 0; j < n; ++j) tile_max = sr[j] > tile_max ? sr[j] : tile_max;
    const float m_new = std::max(m[r], tile_max);
    const float correction = simd_exp(m[r] - m_new);  // 0 on the first tile (m = -inf)
    // Masked keys get -inf, which exp turns into 0: the exp loop itself has no condition (a call
    // under a condition would not vectorise).
    std::fill(sr + n, sr + kTile, -std::numeric_limits<float>::infinity());
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < kTile; ++j) {
      sr[j] = simd_exp(sr[j] - m_new);
      sum += sr[j];
    }
    l[r] = l[r] * correction + sum;
    m[r] = m_new;
    float* a = acc + r * dim;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) a[d] *= correction;
  }
  weights_times_rows<R>(acc, dim, s, v_first, stride, count, dim);
}

void forward_block(float* out, float* lse, const float* qkv, const HeadView& hv, int64_t q0, int64_t q1,
                   float scale, Scratch& scratch) {
  const int64_t dim = hv.head_dim, nq = q1 - q0, stride = hv.qkv_stride;
  scratch.reset(3 * kTile * dim + 2 * kTile + kRows * kTile);
  float* kt = scratch.take(kTile * dim);
  float* qs = scratch.take(kTile * dim);
  float* acc = scratch.take(kTile * dim);
  float* m = scratch.take(kTile);
  float* l = scratch.take(kTile);
  float* s = scratch.take(kRows * kTile);
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
    int64_t i = std::max(q0, k0) - q0;  // rows before the tile see none of it
    for (; i + kRows <= nq; i += kRows)
      forward_rows<kRows>(acc + i * dim, m + i, l + i, qs + i * dim, dim, kt, v_rows + k0 * stride, stride, q0 + i,
                          k0, nk, s);
    for (; i < nq; ++i)
      forward_rows<1>(acc + i * dim, m + i, l + i, qs + i * dim, dim, kt, v_rows + k0 * stride, stride, q0 + i, k0,
                      nk, s);
  }
  for (int64_t i = 0; i < nq; ++i) {
    const float inv = 1.0f / l[i];
    float* o = out + hv.out_offset + (q0 + i) * hv.out_stride;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) o[d] = acc[i * dim + d] * inv;
    lse[hv.lse_offset + q0 + i] = m[i] + std::log(l[i]);
  }
}

// The pointers of one (batch, head) for backward.
struct BackwardHead {
  const float *q_rows, *k_rows, *v_rows, *o_rows, *do_rows, *lse, *delta;
  float *dq_rows, *dk_rows, *dv_rows;
  int64_t stride, ostride, dim;
  float scale;
};

// R query rows (first_query ..) against one key tile [k0, k0 + nk):
//   p = exp(scale q.k - lse), dp = dO.v, ds = scale p (dp - delta)
//   dV_tile += p^T dO,  dK_tile += ds^T q,  dQ += ds K
template <int R>
void backward_rows(const BackwardHead& h, int64_t first_query, int64_t k0, int64_t nk, const float* kt,
                   const float* vt, float* p, float* ds) {
  const int64_t dim = h.dim;
  const float* q = h.q_rows + first_query * h.stride;
  const float* g = h.do_rows + first_query * h.ostride;
  rows_times_tile<R>(p, q, h.stride, kt, dim);
  rows_times_tile<R>(ds, g, h.ostride, vt, dim);  // dp, turned into ds in place below
  int64_t count = 0;
  for (int r = 0; r < R; ++r) {
    const int64_t n = std::min(nk, first_query + r + 1 - k0);
    count = std::max(count, n);
    const float lse_r = h.lse[first_query + r], delta_r = h.delta[first_query + r], scale = h.scale;
    float* pr = p + r * kTile;
    float* dsr = ds + r * kTile;
    std::fill(pr + n, pr + kTile, -std::numeric_limits<float>::infinity());  // masked: p = 0
#pragma omp simd
    for (int64_t j = 0; j < kTile; ++j) {
      const float pj = simd_exp(pr[j] * scale - lse_r);
      pr[j] = pj;
      dsr[j] = pj * (dsr[j] - delta_r) * scale;
    }
  }
  add_weighted_outer<R>(h.dv_rows + k0 * h.stride, h.stride, p, g, h.ostride, count, dim);
  add_weighted_outer<R>(h.dk_rows + k0 * h.stride, h.stride, ds, q, h.stride, count, dim);
  weights_times_rows<R>(h.dq_rows + first_query * h.stride, h.stride, ds, h.k_rows + k0 * h.stride, h.stride, count,
                        dim);
}

// One (batch, head): key tiles outside, the queries that see them inside. dQ, dK and dV gather
// in this head's own slices of dqkv, zeroed first.
void backward_head(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                   const HeadView& hv, float scale, Scratch& scratch) {
  const int64_t dim = hv.head_dim, seq = hv.seq, stride = hv.qkv_stride, ostride = hv.out_stride;
  scratch.reset(2 * kTile * dim + 2 * kRows * kTile + seq);
  float* kt = scratch.take(kTile * dim);
  float* vt = scratch.take(kTile * dim);
  float* p = scratch.take(kRows * kTile);
  float* ds = scratch.take(kRows * kTile);
  float* delta = scratch.take(seq);
  BackwardHead h;
  h.q_rows = qkv + hv.qkv_offset;
  h.k_rows = h.q_rows + hv.kv_shift;
  h.v_rows = h.q_rows + 2 * hv.kv_shift;
  h.o_rows = out + hv.out_offset;
  h.do_rows = dout + hv.out_offset;
  h.lse = lse + hv.lse_offset;
  h.delta = delta;
  h.dq_rows = dqkv + hv.qkv_offset;
  h.dk_rows = h.dq_rows + hv.kv_shift;
  h.dv_rows = h.dq_rows + 2 * hv.kv_shift;
  h.stride = stride;
  h.ostride = ostride;
  h.dim = dim;
  h.scale = scale;

  for (int64_t t = 0; t < seq; ++t) {  // delta = dO.O per query; dQ, dK, dV start at zero
    const float* o = h.o_rows + t * ostride;
    const float* g = h.do_rows + t * ostride;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t d = 0; d < dim; ++d) sum += g[d] * o[d];
    delta[t] = sum;
    std::fill(h.dq_rows + t * stride, h.dq_rows + t * stride + dim, 0.0f);
    std::fill(h.dk_rows + t * stride, h.dk_rows + t * stride + dim, 0.0f);
    std::fill(h.dv_rows + t * stride, h.dv_rows + t * stride + dim, 0.0f);
  }
  for (int64_t k0 = 0; k0 < seq; k0 += kTile) {
    const int64_t nk = std::min(kTile, seq - k0);
    pack_transposed(kt, h.k_rows + k0 * stride, stride, nk, dim);
    pack_transposed(vt, h.v_rows + k0 * stride, stride, nk, dim);
    int64_t i = k0;  // queries before the tile see none of it
    for (; i + kRows <= seq; i += kRows) backward_rows<kRows>(h, i, k0, nk, kt, vt, p, ds);
    for (; i < seq; ++i) backward_rows<1>(h, i, k0, nk, kt, vt, p, ds);
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                       int64_t head_dim) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t blocks = (seq + kTile - 1) / kTile, items = batch * heads * blocks;
#pragma omp parallel if (items > 1)
  {
    Scratch scratch;
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
    Scratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < items; ++bh) {
      const HeadView hv = head_view(bh / heads, bh % heads, seq, heads, head_dim);
      backward_head(dqkv, dout, qkv, out, lse, hv, scale, scratch);
    }
  }
}

}  // namespace tessera::kernels::cpu
