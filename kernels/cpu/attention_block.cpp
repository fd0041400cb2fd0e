// Attention between a block of queries and a block of keys/values on the CPU, causal (the diagonal
// block) or not, flash-attention style: forward with an online softmax over key tiles (no Tq x Tk
// matrix), optionally merged into an earlier partial result over other keys; backward recomputing
// the probabilities from the final lse. With segments (document masking) a query sees only the keys
// of its own segment: key tiles that cannot match a group of query rows are skipped, the others
// masked element by element. attention.cpp's causal self-attention is this kernel on one qkv.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_math.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)

namespace {

constexpr int64_t kTile = 64;  // keys per tile, and queries per forward work item
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Where the rows of one (batch, head) start: q and dq at q_at, k, v, dk and dv at kv_at (each row
// its head's head_dim columns, rows q_stride / kv_stride apart), out and dout rows at out_at
// (heads x head_dim apart), lse at lse_at.
// q_seg and kv_seg: the batch row's segments of queries and keys (nullptr: no document mask).
struct HeadView {
  int64_t q_at, kv_at, out_at, out_stride, lse_at;
  const int32_t *q_seg, *kv_seg;
};

HeadView head_view(const AttentionBlockShape& s, int64_t b, int64_t h) {
  const int64_t c = s.heads * s.head_dim;
  const bool masked = s.q_segments != nullptr;
  return {b * s.tq * s.q_stride + h * s.head_dim,
          b * s.tk * s.kv_stride + h * s.head_dim,
          b * s.tq * c + h * s.head_dim,
          c,
          (b * s.heads + h) * s.tq,
          masked ? s.q_segments + b * s.tq : nullptr,
          masked ? s.kv_segments + b * s.tk : nullptr};
}

// Whether any of n segments at a can equal any of m at b (their ranges overlap): false lets a
// whole tile or group of rows be skipped.
bool segments_meet(const int32_t* a, int64_t n, const int32_t* b, int64_t m) {
  if (a == nullptr) return true;
  const auto [a_lo, a_hi] = std::minmax_element(a, a + n);
  const auto [b_lo, b_hi] = std::minmax_element(b, b + m);
  return *a_lo <= *b_hi && *b_lo <= *a_hi;
}

// Document mask of one query row against a tile's first n keys: scores of other segments -> -inf.
inline void mask_segments(float* sr, int64_t n, const int32_t* kseg, int32_t qseg) {
  for (int64_t j = 0; j < n; ++j)
    if (kseg[j] != qseg) sr[j] = kNegInf;
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
// Not zeroed: every piece is written before it is read. (A decode step calls the forward once per
// slot and head with one query: zeroing tiles it never reads cost more than its arithmetic.)
class Scratch {
 public:
  void reset(int64_t total) {
    if (total > capacity_) {
      buf_.reset(new float[static_cast<size_t>(total)]);
      capacity_ = total;
    }
    used_ = 0;
  }
  float* take(int64_t n) {
    float* p = buf_.get() + used_;
    used_ += n;
    return p;
  }

 private:
  std::unique_ptr<float[]> buf_;
  int64_t capacity_ = 0, used_ = 0;
};

// The keys of a tile [k0, k0 + nk) that query row r of a group sees: min(nk, sees + r), where
// `sees` is what the group's first row sees (causal: first_query + 1 - k0; otherwise nk).
inline int64_t seen(int64_t nk, int64_t sees, int r) { return std::min(nk, sees + r); }

// R query rows against one key tile. Each row keeps a running max m, a running sum l and an
// unnormalised output acc; the tile rescales them by exp(m_old - m_new) and adds its own
// exp(s - m_new) weighted values.
// qseg, kseg (document masking; nullptr: none): the R rows' segments and the tile's keys'. A row
// that sees no key of the tile keeps its state (and zero weights).
template <int R>
void forward_rows(float* acc, float* m, float* l, const float* qs, int64_t dim, const float* kt, const float* v_first,
                  int64_t stride, int64_t nk, int64_t sees, float* s, const int32_t* qseg, const int32_t* kseg) {
  rows_times_tile<R>(s, qs, dim, kt, dim);
  int64_t count = 0;  // keys any of the R rows sees in this tile
  for (int r = 0; r < R; ++r) {
    const int64_t n = seen(nk, sees, r);
    count = std::max(count, n);
    float* sr = s + r * kTile;
    if (qseg) mask_segments(sr, n, kseg, qseg[r]);
    float tile_max = kNegInf;
#pragma omp simd reduction(max : tile_max)
    for (int64_t j = 0; j < n; ++j) tile_max = sr[j] > tile_max ? sr[j] : tile_max;
    if (qseg && tile_max == kNegInf) {  // every key of the tile masked for this row (documents)
      std::fill(sr, sr + kTile, 0.0f);
      continue;
    }
    const float m_new = std::max(m[r], tile_max);
    const float correction = simd_exp(m[r] - m_new);  // 0 on the first tile (m = -inf)
    // Masked keys get -inf, which exp turns into 0: the exp loop itself has no condition (a call
    // under a condition would not vectorise).
    std::fill(sr + n, sr + kTile, kNegInf);
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

// One (batch, head, query rows [q0, q1)) against the whole key block (causal: the keys up to q1).
void forward_block(float* out, float* lse, const float* q, const float* k, const float* v,
                   const AttentionBlockShape& shape, const HeadView& hv, int64_t q0, int64_t q1, bool merge,
                   Scratch& scratch) {
  const int64_t dim = shape.head_dim, nq = q1 - q0, stride = shape.kv_stride;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  scratch.reset(kTile * dim + kRows * kTile + 2 * nq * dim + 2 * nq);  // the rows' pieces: nq of them
  float* kt = scratch.take(kTile * dim);
  float* s = scratch.take(kRows * kTile);
  float* qs = scratch.take(nq * dim);
  float* acc = scratch.take(nq * dim);
  float* m = scratch.take(nq);
  float* l = scratch.take(nq);
  const float* k_rows = k + hv.kv_at;
  const float* v_rows = v + hv.kv_at;
  for (int64_t i = 0; i < nq; ++i) {
    const float* qi = q + hv.q_at + (q0 + i) * shape.q_stride;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) {
      qs[i * dim + d] = qi[d] * scale;
      acc[i * dim + d] = 0.0f;
    }
    m[i] = kNegInf;
    l[i] = 0.0f;
  }
  const int64_t k_end = shape.causal ? q1 : shape.tk;
  for (int64_t k0 = 0; k0 < k_end; k0 += kTile) {
    const int64_t nk = std::min(kTile, k_end - k0);
    const int32_t* kseg = hv.kv_seg ? hv.kv_seg + k0 : nullptr;
    if (!segments_meet(hv.q_seg ? hv.q_seg + q0 : nullptr, nq, kseg, nk)) continue;  // no document in common
    pack_transposed(kt, k_rows + k0 * stride, stride, nk, dim);
    const float* v_tile = v_rows + k0 * stride;
    // Causal: rows before the tile see none of it, row i sees keys up to itself.
    int64_t i = shape.causal ? std::max(q0, k0) - q0 : 0;
    auto sees = [&](int64_t row) { return shape.causal ? q0 + row + 1 - k0 : nk; };
    auto qseg = [&](int64_t row) { return hv.q_seg ? hv.q_seg + q0 + row : nullptr; };
    for (; i + kRows <= nq; i += kRows)
      if (segments_meet(qseg(i), kRows, kseg, nk))
        forward_rows<kRows>(acc + i * dim, m + i, l + i, qs + i * dim, dim, kt, v_tile, stride, nk, sees(i), s,
                            qseg(i), kseg);
    for (; i < nq; ++i)
      forward_rows<1>(acc + i * dim, m + i, l + i, qs + i * dim, dim, kt, v_tile, stride, nk, sees(i), s, qseg(i), kseg);
  }
  for (int64_t i = 0; i < nq; ++i) {
    float* o = out + hv.out_at + (q0 + i) * hv.out_stride;
    float& row_lse = lse[hv.lse_at + q0 + i];
    if (hv.q_seg && l[i] == 0.0f) {  // no key of this block in the row's document: nothing to add (merge), or none yet
      if (!merge) {
        std::fill(o, o + dim, 0.0f);
        row_lse = kNegInf;
      }
      continue;
    }
    const float block_lse = m[i] + std::log(l[i]);
    float keep = 0.0f, add = 1.0f / l[i], new_lse = block_lse;  // out = out * keep + acc * add
    if (merge && row_lse != kNegInf) {
      // Two normalised softmaxes over disjoint keys, weighted by their shares exp(lse - new_lse).
      const float hi = std::max(row_lse, block_lse);
      const float w_old = std::exp(row_lse - hi), w_new = std::exp(block_lse - hi), total = w_old + w_new;
      keep = w_old / total;
      add = w_new / (total * l[i]);
      new_lse = hi + std::log(total);
    }
    const float* a = acc + i * dim;
    if (keep == 0.0f) {  // overwrite: out may hold anything (even NaN) before
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) o[d] = a[d] * add;
    } else {
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) o[d] = o[d] * keep + a[d] * add;
    }
    row_lse = new_lse;
  }
}

// The pointers of one (batch, head) for backward.
struct BackwardHead {
  const float *q_rows, *k_rows, *v_rows, *do_rows, *lse, *delta;
  float *dq_rows, *dk_rows, *dv_rows;
  int64_t q_stride, kv_stride, ostride, dim;
  float scale;
};

// R query rows (first_query ..) against one key tile [k0, k0 + nk):
//   p = exp(scale q.k - lse), dp = dO.v, ds = scale p (dp - delta)
//   dV_tile += p^T dO,  dK_tile += ds^T q,  dQ += ds K
// qseg, kseg as forward_rows'; a row that sees no key at all (lse -inf) gets no gradient.
template <int R>
void backward_rows(const BackwardHead& h, int64_t first_query, int64_t k0, int64_t nk, int64_t sees, const float* kt,
                   const float* vt, float* p, float* ds, const int32_t* qseg, const int32_t* kseg) {
  const int64_t dim = h.dim;
  const float* q = h.q_rows + first_query * h.q_stride;
  const float* g = h.do_rows + first_query * h.ostride;
  rows_times_tile<R>(p, q, h.q_stride, kt, dim);
  rows_times_tile<R>(ds, g, h.ostride, vt, dim);  // dp, turned into ds in place below
  int64_t count = 0;
  for (int r = 0; r < R; ++r) {
    const int64_t n = seen(nk, sees, r);
    count = std::max(count, n);
    const float lse_r = h.lse[first_query + r], delta_r = h.delta[first_query + r], scale = h.scale;
    float* pr = p + r * kTile;
    float* dsr = ds + r * kTile;
    std::fill(pr + n, pr + kTile, kNegInf);  // masked: p = 0
    if (qseg) {
      mask_segments(pr, n, kseg, qseg[r]);
      if (lse_r == kNegInf) {
        std::fill(pr, pr + kTile, 0.0f);
        std::fill(dsr, dsr + kTile, 0.0f);
        continue;
      }
    }
#pragma omp simd
    for (int64_t j = 0; j < kTile; ++j) {
      const float pj = simd_exp(pr[j] * scale - lse_r);
      pr[j] = pj;
      dsr[j] = pj * (dsr[j] - delta_r) * scale;
    }
  }
  add_weighted_outer<R>(h.dv_rows + k0 * h.kv_stride, h.kv_stride, p, g, h.ostride, count, dim);
  add_weighted_outer<R>(h.dk_rows + k0 * h.kv_stride, h.kv_stride, ds, q, h.q_stride, count, dim);
  weights_times_rows<R>(h.dq_rows + first_query * h.q_stride, h.q_stride, ds, h.k_rows + k0 * h.kv_stride,
                        h.kv_stride, count, dim);
}

// One (batch, head): key tiles outside, the queries that see them inside; dQ, dK and dV of this
// head accumulate.
void backward_head(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                   const float* v, const float* out, const float* lse, const AttentionBlockShape& shape,
                   const HeadView& hv, Scratch& scratch) {
  const int64_t dim = shape.head_dim, tq = shape.tq, tk = shape.tk;
  scratch.reset(2 * kTile * dim + 2 * kRows * kTile + tq);
  float* kt = scratch.take(kTile * dim);
  float* vt = scratch.take(kTile * dim);
  float* p = scratch.take(kRows * kTile);
  float* ds = scratch.take(kRows * kTile);
  float* delta = scratch.take(tq);
  BackwardHead h;
  h.q_rows = q + hv.q_at;
  h.k_rows = k + hv.kv_at;
  h.v_rows = v + hv.kv_at;
  h.do_rows = dout + hv.out_at;
  h.lse = lse + hv.lse_at;
  h.delta = delta;
  h.dq_rows = dq + hv.q_at;
  h.dk_rows = dk + hv.kv_at;
  h.dv_rows = dv + hv.kv_at;
  h.q_stride = shape.q_stride;
  h.kv_stride = shape.kv_stride;
  h.ostride = hv.out_stride;
  h.dim = dim;
  h.scale = 1.0f / std::sqrt(static_cast<float>(dim));

  for (int64_t t = 0; t < tq; ++t) {  // delta = dO.O per query (O: the final output)
    const float* o = out + hv.out_at + t * hv.out_stride;
    const float* g = h.do_rows + t * hv.out_stride;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t d = 0; d < dim; ++d) sum += g[d] * o[d];
    delta[t] = sum;
  }
  for (int64_t k0 = 0; k0 < tk; k0 += kTile) {
    const int64_t nk = std::min(kTile, tk - k0);
    const int32_t* kseg = hv.kv_seg ? hv.kv_seg + k0 : nullptr;
    if (!segments_meet(hv.q_seg, tq, kseg, nk)) continue;  // no query in the tile's documents
    pack_transposed(kt, h.k_rows + k0 * h.kv_stride, h.kv_stride, nk, dim);
    pack_transposed(vt, h.v_rows + k0 * h.kv_stride, h.kv_stride, nk, dim);
    int64_t i = shape.causal ? k0 : 0;  // causal: queries before the tile see none of it
    auto sees = [&](int64_t row) { return shape.causal ? row + 1 - k0 : nk; };
    auto qseg = [&](int64_t row) { return hv.q_seg ? hv.q_seg + row : nullptr; };
    for (; i + kRows <= tq; i += kRows)
      if (segments_meet(qseg(i), kRows, kseg, nk)) backward_rows<kRows>(h, i, k0, nk, sees(i), kt, vt, p, ds, qseg(i), kseg);
    for (; i < tq; ++i) backward_rows<1>(h, i, k0, nk, sees(i), kt, vt, p, ds, qseg(i), kseg);
  }
}

}  // namespace

void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttentionBlockShape& shape, bool merge) {
  const int64_t blocks = (shape.tq + kTile - 1) / kTile, items = shape.batch * shape.heads * blocks;
#pragma omp parallel if (items > 1)
  {
    Scratch scratch;
    // Causal: later query blocks see more keys; hand them out first, dynamically.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t block = blocks - 1 - item % blocks, bh = item / blocks;
      const HeadView hv = head_view(shape, bh / shape.heads, bh % shape.heads);
      const int64_t q0 = block * kTile;
      forward_block(out, lse, q, k, v, shape, hv, q0, std::min(shape.tq, q0 + kTile), merge, scratch);
    }
  }
}

void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const AttentionBlockShape& shape) {
  const int64_t items = shape.batch * shape.heads;
#pragma omp parallel if (items > 1)
  {
    Scratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < items; ++bh) {
      const HeadView hv = head_view(shape, bh / shape.heads, bh % shape.heads);
      backward_head(dq, dk, dv, dout, q, k, v, out, lse, shape, hv, scratch);
    }
  }
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(attention_block_forward)
TESSERA_ISA_DECLARE(attention_block_backward)

void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttentionBlockShape& shape, bool merge) {
  TESSERA_ISA_CALL(attention_block_forward, out, lse, q, k, v, shape, merge);
}

void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const AttentionBlockShape& shape) {
  TESSERA_ISA_CALL(attention_block_backward, dq, dk, dv, dout, q, k, v, out, lse, shape);
}
#endif

}  // namespace tessera::kernels::cpu
