// CUDA twin of kernels/cpu/attention_block.cpp: a query block against a key/value block, causal (the
// diagonal block) or not, forward merged into an earlier partial result on request, backward
// recomputing P from the final lse and adding into dq, dk, dv. The 64 x 64 tiling of
// attention.cu (the self-attention kernels) on strided rows; no atomics, deterministic.
#include <algorithm>
#include <climits>
#include <cmath>

#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

using namespace attention;

// The block's sizes as the kernels take them: rows of q (and dq) q_stride floats apart, of k, v (and
// dk, dv) kv_stride apart; out and dout dense [B, Tq, H, D]; scale = 1 / sqrt(head_dim).
struct BlockDims {
  int tq, tk, heads, head_dim;
  int64_t q_stride, kv_stride;
  bool causal;
  float scale;
};

// Where the rows of one (batch, head) start: q and dq at q_at, k, v, dk and dv at kv_at, out and
// dout at out_at (rows heads x head_dim apart), lse and delta at lse_at.
struct BlockHead {
  int64_t q_at, kv_at, out_at, out_stride, lse_at;
};

__device__ __forceinline__ BlockHead block_head(int b, int h, const BlockDims& d) {
  const int64_t c = static_cast<int64_t>(d.heads) * d.head_dim, hd = static_cast<int64_t>(h) * d.head_dim;
  return {static_cast<int64_t>(b) * d.tq * d.q_stride + hd, static_cast<int64_t>(b) * d.tk * d.kv_stride + hd,
          static_cast<int64_t>(b) * d.tq * c + hd, c, (static_cast<int64_t>(b) * d.heads + h) * d.tq};
}

// Whether a query row sees a key: a real key (key < Tk), and causal: key <= query. The forward asks
// it of every row of a tile, padding rows past Tq included: each of them sees key 0, so every
// running max is finite after the first tile.
__device__ __forceinline__ bool key_seen(int query, int key, const BlockDims& d) {
  return key < d.tk && (!d.causal || key <= query);
}

// The keys a query tile [q0, q0 + 64) needs: causal (Tq == Tk) up to its last row, otherwise all.
__device__ __forceinline__ int key_end(int q0, const BlockDims& d) {
  return d.causal ? min(q0 + kTile, d.tk) : d.tk;
}

// One block per (batch * head, query tile), heaviest tiles first: an online softmax over the key
// tiles, then this block's normalised output written, or merged with out / lse as they stand.
// Shared memory: q, k, v tiles [64][DP + 1] and probabilities p [64][65].
template <int DP>
__global__ void __launch_bounds__(kThreads)
    attention_block_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v,
                                   BlockDims dims, bool merge) {
  constexpr int ld = DP + 1, kCols = DP / kSide;
  float* q_s = dynamic_smem<float>();
  float* k_s = q_s + kTile * ld;
  float* v_s = k_s + kTile * ld;
  float* p_s = v_s + kTile * ld;

  const int b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int q_tile = gridDim.y - 1 - blockIdx.y, q0 = q_tile * kTile;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const BlockHead at = block_head(b, h, dims);
  const HeadView q_view{q + at.q_at, dims.q_stride}, k_view{k + at.kv_at, dims.kv_stride},
      v_view{v + at.kv_at, dims.kv_stride};
  float* lse_bh = lse + at.lse_at;

  // The earlier result's lse of each row (-inf: none), read before any thread of the row writes it.
  float old_lse[kPer];
  for (int i = 0; i < kPer; ++i) {
    const int row = q0 + ty + kSide * i;
    old_lse[i] = (merge && row < dims.tq) ? lse_bh[row] : -INFINITY;
  }

  load_tile<DP>(q_s, q_view, q0, dims.tq, dims.head_dim);
  float o[kPer][kCols] = {};
  float m[kPer], l[kPer];
  for (int i = 0; i < kPer; ++i) m[i] = -INFINITY, l[i] = 0.0f;

  const int k_end = key_end(q0, dims);
  for (int k0 = 0; k0 < k_end; k0 += kTile) {
    __syncthreads();  // the previous tile's k, v and p are no longer read
    load_tile<DP>(k_s, k_view, k0, dims.tk, dims.head_dim);
    load_tile<DP>(v_s, v_view, k0, dims.tk, dims.head_dim);
    __syncthreads();

    float s[kPer][kPer] = {};
    for (int d = 0; d < DP; ++d) {
      float qv[kPer], kv[kPer];
      for (int i = 0; i < kPer; ++i) qv[i] = q_s[(ty + kSide * i) * ld + d];
      for (int j = 0; j < kPer; ++j) kv[j] = k_s[(tx + kSide * j) * ld + d];
      for (int i = 0; i < kPer; ++i)
        for (int j = 0; j < kPer; ++j) s[i][j] += qv[i] * kv[j];
    }

    for (int i = 0; i < kPer; ++i) {
      const int row = q0 + ty + kSide * i;
      float tile_max = -INFINITY;
      for (int j = 0; j < kPer; ++j) {
        const int col = k0 + tx + kSide * j;
        s[i][j] = key_seen(row, col, dims) ? s[i][j] * dims.scale : -INFINITY;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      // Every row sees key 0 of the first tile, so m_new is finite (correction 0 on the first tile).
      const float m_new = fmaxf(m[i], row_group_max(tile_max));
      const float correction = expf(m[i] - m_new);
      float row_sum = 0.0f;
      for (int j = 0; j < kPer; ++j) {
        const float p = expf(s[i][j] - m_new);
        p_s[(ty + kSide * i) * kScoreStride + tx + kSide * j] = p;
        row_sum += p;
      }
      l[i] = l[i] * correction + row_group_sum(row_sum);
      m[i] = m_new;
      for (int c = 0; c < kCols; ++c) o[i][c] *= correction;
    }
    __syncthreads();

    for (int j = 0; j < kTile; ++j) {
      float pv[kPer];
      for (int i = 0; i < kPer; ++i) pv[i] = p_s[(ty + kSide * i) * kScoreStride + j];
      for (int c = 0; c < kCols; ++c) {
        const float vv = v_s[j * ld + tx + kSide * c];
        for (int i = 0; i < kPer; ++i) o[i][c] += pv[i] * vv;
      }
    }
  }

  for (int i = 0; i < kPer; ++i) {
    const int row = q0 + ty + kSide * i;
    if (row >= dims.tq) continue;
    float* o_row = out + at.out_at + static_cast<int64_t>(row) * at.out_stride;
    const float block_lse = m[i] + logf(l[i]);
    float keep = 0.0f, add = 1.0f / l[i], new_lse = block_lse;  // out = out * keep + o * add
    if (merge && old_lse[i] != -INFINITY) {
      // Two normalised softmaxes over disjoint keys, weighted by their shares exp(lse - new_lse).
      const float hi = fmaxf(old_lse[i], block_lse);
      const float w_old = expf(old_lse[i] - hi), w_new = expf(block_lse - hi), total = w_old + w_new;
      keep = w_old / total;
      add = w_new / (total * l[i]);
      new_lse = hi + logf(total);
    }
    for (int c = 0; c < kCols; ++c) {
      const int d = tx + kSide * c;
      if (d >= dims.head_dim) continue;
      // keep = 0 overwrites: out may hold anything (even NaN) before.
      o_row[d] = keep == 0.0f ? o[i][c] * add : o_row[d] * keep + o[i][c] * add;
    }
    if (tx == 0) lse_bh[row] = new_lse;
  }
}

// delta[b, h, t] = sum_d dout[b, t, h, d] * out[b, t, h, d] (out: the final output): one warp per
// (b, t, h), rows = B x Tq x H.
__global__ void attention_block_delta_kernel(float* delta, const float* dout, const float* out, int64_t rows,
                                             BlockDims dims) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = global_thread() / 32; r < rows; r += global_stride() / 32) {
    const float* dy = dout + r * dims.head_dim;
    const float* y = out + r * dims.head_dim;
    float acc = 0.0f;
    for (int d = lane; d < dims.head_dim; d += 32) acc += dy[d] * y[d];
    acc = warp_sum(acc);
    const int64_t h = r % dims.heads, bt = r / dims.heads, b = bt / dims.tq, t = bt % dims.tq;
    if (lane == 0) delta[(b * dims.heads + h) * dims.tq + t] = acc;
  }
}

// Whether P[query][key] is part of the block: a real query and a key it sees.
__device__ __forceinline__ bool pair_seen(int query, int key, const BlockDims& d) {
  return query < d.tq && key_seen(query, key, d);
}

// One block per (batch * head, key tile): dK += scale * dS^T Q, dV += P^T dO over the query tiles
// that see it (causal: the tiles at or after it). Shared memory: k, v, q, dO tiles [64][DP + 1],
// P^T / dS^T [64][65], lse and delta [64].
template <int DP>
__global__ void __launch_bounds__(kThreads)
    attention_block_dkdv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* k,
                                const float* v, const float* lse, const float* delta, BlockDims dims) {
  constexpr int ld = DP + 1, kCols = DP / kSide;
  float* k_s = dynamic_smem<float>();
  float* v_s = k_s + kTile * ld;
  float* q_s = v_s + kTile * ld;
  float* do_s = q_s + kTile * ld;
  float* p_s = do_s + kTile * ld;
  float* lse_s = p_s + kTile * kScoreStride;
  float* delta_s = lse_s + kTile;

  const int b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int k_tile = blockIdx.y, k0 = k_tile * kTile;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const BlockHead at = block_head(b, h, dims);
  const HeadView q_view{q + at.q_at, dims.q_stride}, k_view{k + at.kv_at, dims.kv_stride},
      v_view{v + at.kv_at, dims.kv_stride}, do_view{dout + at.out_at, at.out_stride};
  const float* lse_bh = lse + at.lse_at;
  const float* delta_bh = delta + at.lse_at;

  load_tile<DP>(k_s, k_view, k0, dims.tk, dims.head_dim);
  load_tile<DP>(v_s, v_view, k0, dims.tk, dims.head_dim);
  float dk_acc[kPer][kCols] = {}, dv_acc[kPer][kCols] = {};

  // Causal (Tq == Tk): queries before the key tile see none of it.
  for (int q0 = dims.causal ? k0 : 0; q0 < dims.tq; q0 += kTile) {
    __syncthreads();  // the previous query tile is no longer read
    load_tile<DP>(q_s, q_view, q0, dims.tq, dims.head_dim);
    load_tile<DP>(do_s, do_view, q0, dims.tq, dims.head_dim);
    load_row_values(lse_s, lse_bh, q0, dims.tq);
    load_row_values(delta_s, delta_bh, q0, dims.tq);
    __syncthreads();

    // Transposed scores: s[i][j] for key ty + 16 i, query tx + 16 j; dp likewise (dP^T = V dO^T).
    float s[kPer][kPer] = {}, dp[kPer][kPer] = {};
    for (int d = 0; d < DP; ++d) {
      float kv[kPer], vv[kPer], qv[kPer], dov[kPer];
      for (int i = 0; i < kPer; ++i) kv[i] = k_s[(ty + kSide * i) * ld + d], vv[i] = v_s[(ty + kSide * i) * ld + d];
      for (int j = 0; j < kPer; ++j) qv[j] = q_s[(tx + kSide * j) * ld + d], dov[j] = do_s[(tx + kSide * j) * ld + d];
      for (int i = 0; i < kPer; ++i)
        for (int j = 0; j < kPer; ++j) s[i][j] += kv[i] * qv[j], dp[i][j] += vv[i] * dov[j];
    }
    for (int i = 0; i < kPer; ++i) {
      const int key = k0 + ty + kSide * i;
      for (int j = 0; j < kPer; ++j) {
        const int qj = tx + kSide * j, query = q0 + qj;
        const float p = pair_seen(query, key, dims) ? expf(s[i][j] * dims.scale - lse_s[qj]) : 0.0f;
        s[i][j] = p * (dp[i][j] - delta_s[qj]);  // dS^T, unscaled
        p_s[(ty + kSide * i) * kScoreStride + qj] = p;
      }
    }
    __syncthreads();
    for (int qq = 0; qq < kTile; ++qq) {  // dV += P^T dO
      float pv[kPer];
      for (int i = 0; i < kPer; ++i) pv[i] = p_s[(ty + kSide * i) * kScoreStride + qq];
      for (int c = 0; c < kCols; ++c) {
        const float g = do_s[qq * ld + tx + kSide * c];
        for (int i = 0; i < kPer; ++i) dv_acc[i][c] += pv[i] * g;
      }
    }
    __syncthreads();
    for (int i = 0; i < kPer; ++i)
      for (int j = 0; j < kPer; ++j) p_s[(ty + kSide * i) * kScoreStride + tx + kSide * j] = s[i][j];
    __syncthreads();
    for (int qq = 0; qq < kTile; ++qq) {  // dK += dS^T Q (scaled at the end)
      float dsv[kPer];
      for (int i = 0; i < kPer; ++i) dsv[i] = p_s[(ty + kSide * i) * kScoreStride + qq];
      for (int c = 0; c < kCols; ++c) {
        const float qv = q_s[qq * ld + tx + kSide * c];
        for (int i = 0; i < kPer; ++i) dk_acc[i][c] += dsv[i] * qv;
      }
    }
  }

  for (int i = 0; i < kPer; ++i) {
    const int key = k0 + ty + kSide * i;
    if (key >= dims.tk) continue;
    float* dk_row = dk + at.kv_at + static_cast<int64_t>(key) * dims.kv_stride;
    float* dv_row = dv + at.kv_at + static_cast<int64_t>(key) * dims.kv_stride;
    for (int c = 0; c < kCols; ++c) {
      const int d = tx + kSide * c;
      if (d < dims.head_dim) dk_row[d] += dk_acc[i][c] * dims.scale, dv_row[d] += dv_acc[i][c];
    }
  }
}

// One block per (batch * head, query tile), heaviest first: dQ += scale * dS K over the key tiles
// it sees. Shared memory: q, dO, k, v tiles [64][DP + 1] and dS [64][65].
template <int DP>
__global__ void __launch_bounds__(kThreads)
    attention_block_dq_kernel(float* dq, const float* dout, const float* q, const float* k, const float* v,
                              const float* lse, const float* delta, BlockDims dims) {
  constexpr int ld = DP + 1, kCols = DP / kSide;
  float* q_s = dynamic_smem<float>();
  float* do_s = q_s + kTile * ld;
  float* k_s = do_s + kTile * ld;
  float* v_s = k_s + kTile * ld;
  float* ds_s = v_s + kTile * ld;

  const int b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int q_tile = gridDim.y - 1 - blockIdx.y, q0 = q_tile * kTile;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const BlockHead at = block_head(b, h, dims);
  const HeadView q_view{q + at.q_at, dims.q_stride}, k_view{k + at.kv_at, dims.kv_stride},
      v_view{v + at.kv_at, dims.kv_stride}, do_view{dout + at.out_at, at.out_stride};

  load_tile<DP>(q_s, q_view, q0, dims.tq, dims.head_dim);
  load_tile<DP>(do_s, do_view, q0, dims.tq, dims.head_dim);
  float row_lse[kPer], row_delta[kPer];
  for (int i = 0; i < kPer; ++i) {
    const int query = q0 + ty + kSide * i;
    row_lse[i] = query < dims.tq ? lse[at.lse_at + query] : 0.0f;
    row_delta[i] = query < dims.tq ? delta[at.lse_at + query] : 0.0f;
  }
  float dq_acc[kPer][kCols] = {};

  const int k_end = key_end(q0, dims);
  for (int k0 = 0; k0 < k_end; k0 += kTile) {
    __syncthreads();  // the previous key tile is no longer read
    load_tile<DP>(k_s, k_view, k0, dims.tk, dims.head_dim);
    load_tile<DP>(v_s, v_view, k0, dims.tk, dims.head_dim);
    __syncthreads();

    // s[i][j] for query ty + 16 i, key tx + 16 j; dp = dO V^T likewise.
    float s[kPer][kPer] = {}, dp[kPer][kPer] = {};
    for (int d = 0; d < DP; ++d) {
      float qv[kPer], dov[kPer], kv[kPer], vv[kPer];
      for (int i = 0; i < kPer; ++i) qv[i] = q_s[(ty + kSide * i) * ld + d], dov[i] = do_s[(ty + kSide * i) * ld + d];
      for (int j = 0; j < kPer; ++j) kv[j] = k_s[(tx + kSide * j) * ld + d], vv[j] = v_s[(tx + kSide * j) * ld + d];
      for (int i = 0; i < kPer; ++i)
        for (int j = 0; j < kPer; ++j) s[i][j] += qv[i] * kv[j], dp[i][j] += dov[i] * vv[j];
    }
    for (int i = 0; i < kPer; ++i) {
      const int query = q0 + ty + kSide * i;
      for (int j = 0; j < kPer; ++j) {
        const int key = k0 + tx + kSide * j;
        const float p = pair_seen(query, key, dims) ? expf(s[i][j] * dims.scale - row_lse[i]) : 0.0f;
        ds_s[(ty + kSide * i) * kScoreStride + tx + kSide * j] = p * (dp[i][j] - row_delta[i]);
      }
    }
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) {  // dQ += dS K (scaled at the end)
      float dsv[kPer];
      for (int i = 0; i < kPer; ++i) dsv[i] = ds_s[(ty + kSide * i) * kScoreStride + kk];
      for (int c = 0; c < kCols; ++c) {
        const float kv = k_s[kk * ld + tx + kSide * c];
        for (int i = 0; i < kPer; ++i) dq_acc[i][c] += dsv[i] * kv;
      }
    }
  }

  for (int i = 0; i < kPer; ++i) {
    const int query = q0 + ty + kSide * i;
    if (query >= dims.tq) continue;
    float* dq_row = dq + at.q_at + static_cast<int64_t>(query) * dims.q_stride;
    for (int c = 0; c < kCols; ++c) {
      const int d = tx + kSide * c;
      if (d < dims.head_dim) dq_row[d] += dq_acc[i][c] * dims.scale;
    }
  }
}

int tiles_of(int64_t rows) { return static_cast<int>((rows + kTile - 1) / kTile); }

// The checked sizes of a call; false when there is nothing to compute (no batch, head or query).
bool block_dims(BlockDims& dims, const AttentionBlockShape& s, const char* op) {
  TESSERA_CHECK(s.tk > 0 || s.batch * s.heads * s.tq == 0, op, ": an empty key/value block");
  TESSERA_CHECK(!s.causal || s.tq == s.tk, op, ": a causal (diagonal) block needs Tq == Tk, got ", s.tq, " and ",
                s.tk);
  TESSERA_CHECK(s.batch * s.heads <= INT32_MAX && std::max(s.tq, s.tk) <= int64_t{65535} * kTile, op, ": batch ",
                s.batch, " x heads ", s.heads, " or Tq ", s.tq, " / Tk ", s.tk, " too large");
  const int64_t c = s.heads * s.head_dim;
  TESSERA_CHECK(s.q_stride >= c && s.kv_stride >= c, op, ": row strides ", s.q_stride, " and ", s.kv_stride,
                " are below C = ", c);
  dims = {static_cast<int>(s.tq), static_cast<int>(s.tk), static_cast<int>(s.heads), static_cast<int>(s.head_dim),
          s.q_stride, s.kv_stride, s.causal, 1.0f / std::sqrt(static_cast<float>(s.head_dim))};
  return s.batch > 0 && s.heads > 0 && s.tq > 0;
}

template <int DP>
void run_block_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t batch,
                       const BlockDims& dims, bool merge) {
  const size_t smem = (3 * kTile * (DP + 1) + kTile * kScoreStride) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(batch * dims.heads), static_cast<unsigned>(tiles_of(dims.tq)));
  launch("attention_block_forward", attention_block_forward_kernel<DP>, grid, dim3(kThreads), smem, out, lse, q, k,
         v, dims, merge);
}

template <int DP>
void run_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* lse, const float* delta, int64_t batch, const BlockDims& dims) {
  const unsigned bh = static_cast<unsigned>(batch * dims.heads);
  const size_t tiles = 4 * kTile * (DP + 1) + kTile * kScoreStride;
  launch("attention_block_backward", attention_block_dkdv_kernel<DP>, dim3(bh, tiles_of(dims.tk)), dim3(kThreads),
         (tiles + 2 * kTile) * sizeof(float), dk, dv, dout, q, k, v, lse, delta, dims);
  launch("attention_block_backward", attention_block_dq_kernel<DP>, dim3(bh, tiles_of(dims.tq)), dim3(kThreads),
         tiles * sizeof(float), dq, dout, q, k, v, lse, delta, dims);
}

}  // namespace

void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttentionBlockShape& shape, bool merge) {
  const int dp = padded_head_dim(shape.head_dim, "attention_block_forward");
  BlockDims dims;
  if (!block_dims(dims, shape, "attention_block_forward")) return;
  if (dp == 32) run_block_forward<32>(out, lse, q, k, v, shape.batch, dims, merge);
  else if (dp == 64) run_block_forward<64>(out, lse, q, k, v, shape.batch, dims, merge);
  else run_block_forward<128>(out, lse, q, k, v, shape.batch, dims, merge);
  finish("attention_block_forward");
}

void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse,
                              const AttentionBlockShape& shape) {
  const int dp = padded_head_dim(shape.head_dim, "attention_block_backward");
  BlockDims dims;
  if (!block_dims(dims, shape, "attention_block_backward")) return;
  const int64_t rows = shape.batch * shape.tq * shape.heads;
  Scratch delta(static_cast<size_t>(rows) * sizeof(float));
  launch("attention_block_backward", attention_block_delta_kernel, dim3(grid_for(rows * 32, 256)), dim3(256), 0,
         delta.as<float>(), dout, out, rows, dims);
  // dK, dV then dQ, one after the other on the stream: each adds into its own rows, so dq and dk / dv
  // may share a tensor (a qkv gradient).
  if (dp == 32) run_block_backward<32>(dq, dk, dv, dout, q, k, v, lse, delta.as<const float>(), shape.batch, dims);
  else if (dp == 64) run_block_backward<64>(dq, dk, dv, dout, q, k, v, lse, delta.as<const float>(), shape.batch, dims);
  else run_block_backward<128>(dq, dk, dv, dout, q, k, v, lse, delta.as<const float>(), shape.batch, dims);
  finish("attention_block_backward");
}

}  // namespace tessera::kernels::cuda
