// CUDA causal self-attention of kernels/cuda/cuda_ops.h, the twin of kernels/cpu/attention.cpp.
// Forward: a fused flash-attention-style kernel (online softmax over 64-key tiles, no T x T
// matrix), saving lse for backward. Backward, recomputing P from lse: one kernel per key tile
// writes dK, dV, one per query tile writes dQ (no atomics, deterministic).
#include <cmath>

#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

using namespace attention;

// One block per (batch * head, query tile), heaviest tiles first. Shared memory: q, k, v tiles
// [64][DP + 1] and probabilities p [64][65].
template <int DP>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(float* out, float* lse, const float* qkv, int seq, int heads, int head_dim,
                             float scale) {
  constexpr int ld = DP + 1, kCols = DP / kSide;
  float* q_s = dynamic_smem<float>();
  float* k_s = q_s + kTile * ld;
  float* v_s = k_s + kTile * ld;
  float* p_s = v_s + kTile * ld;

  const int b = blockIdx.x / heads, h = blockIdx.x % heads;
  const int q_tile = gridDim.y - 1 - blockIdx.y, q0 = q_tile * kTile;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const int64_t hd = static_cast<int64_t>(heads) * head_dim;
  const float* q_head = qkv + static_cast<int64_t>(b) * seq * 3 * hd + static_cast<int64_t>(h) * head_dim;
  const HeadView q_view{q_head, 3 * hd}, k_view{q_head + hd, 3 * hd}, v_view{q_head + 2 * hd, 3 * hd};

  load_tile<DP>(q_s, q_view, q0, seq, head_dim);
  float o[kPer][kCols] = {};
  float m[kPer], l[kPer];
  for (int i = 0; i < kPer; ++i) m[i] = -INFINITY, l[i] = 0.0f;

  for (int k_tile = 0; k_tile <= q_tile; ++k_tile) {
    const int k0 = k_tile * kTile;
    __syncthreads();  // the previous tile's k, v and p are no longer read
    load_tile<DP>(k_s, k_view, k0, seq, head_dim);
    load_tile<DP>(v_s, v_view, k0, seq, head_dim);
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
        s[i][j] = col <= row ? s[i][j] * scale : -INFINITY;  // causal; col <= row also keeps col < seq
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      // Every row sees at least key k0 <= row, so m_new is finite.
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
    if (row >= seq) continue;
    float* o_row = out + (static_cast<int64_t>(b) * seq + row) * hd + static_cast<int64_t>(h) * head_dim;
    const float inv_l = 1.0f / l[i];
    for (int c = 0; c < kCols; ++c) {
      const int d = tx + kSide * c;
      if (d < head_dim) o_row[d] = o[i][c] * inv_l;
    }
    if (tx == 0) lse[(static_cast<int64_t>(b) * heads + h) * seq + row] = m[i] + logf(l[i]);
  }
}

template <int DP>
void run_forward(float* out, float* lse, const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                 int64_t head_dim) {
  const size_t smem = (3 * kTile * (DP + 1) + kTile * kScoreStride) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>((seq + kTile - 1) / kTile));
  launch("attention_forward", attention_forward_kernel<DP>, grid, dim3(kThreads), smem, out, lse, qkv,
         static_cast<int>(seq), static_cast<int>(heads), static_cast<int>(head_dim),
         1.0f / std::sqrt(static_cast<float>(head_dim)));
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                       int64_t head_dim) {
  const int dp = padded_head_dim(head_dim, "attention_forward");
  check_sizes(batch, seq, heads, "attention_forward");
  if (batch <= 0 || seq <= 0 || heads <= 0) return;
  if (dp == 32) run_forward<32>(out, lse, qkv, batch, seq, heads, head_dim);
  else if (dp == 64) run_forward<64>(out, lse, qkv, batch, seq, heads, head_dim);
  else run_forward<128>(out, lse, qkv, batch, seq, heads, head_dim);
  finish("attention_forward");
}

// ---- backward ----

namespace {

using namespace attention;

// delta[b, h, t] = sum_d dout[b, t, h, d] * out[b, t, h, d]: one warp per (b, t, h).
__global__ void attention_delta_kernel(float* delta, const float* dout, const float* out, int64_t rows, Dims dims) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = global_thread() / 32; r < rows; r += global_stride() / 32) {
    const float* dy = dout + r * dims.head_dim;
    const float* y = out + r * dims.head_dim;
    float acc = 0.0f;
    for (int d = lane; d < dims.head_dim; d += 32) acc += dy[d] * y[d];
    acc = warp_sum(acc);
    const int64_t h = r % dims.heads, bt = r / dims.heads, b = bt / dims.seq, t = bt % dims.seq;
    if (lane == 0) delta[(b * dims.heads + h) * dims.seq + t] = acc;
  }
}

// One block per (batch * head, key tile): dK = scale * dS^T Q, dV = P^T dO over the query tiles at
// or after it. Shared memory: k, v, q, dO tiles [64][DP + 1], P^T / dS^T [64][65], lse and delta [64].
template <int DP>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta,
                          Dims dims) {
  constexpr int ld = DP + 1, kCols = DP / kSide;
  float* k_s = dynamic_smem<float>();
  float* v_s = k_s + kTile * ld;
  float* q_s = v_s + kTile * ld;
  float* do_s = q_s + kTile * ld;
  float* p_s = do_s + kTile * ld;
  float* lse_s = p_s + kTile * kScoreStride;
  float* delta_s = lse_s + kTile;

  const int b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int k_tile = blockIdx.y, k0 = k_tile * kTile, n_tiles = gridDim.y;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const Heads views = heads_of(qkv, dout, b, h, dims);
  const float* lse_bh = lse + (static_cast<int64_t>(b) * dims.heads + h) * dims.seq;
  const float* delta_bh = delta + (static_cast<int64_t>(b) * dims.heads + h) * dims.seq;

  load_tile<DP>(k_s, views.k, k0, dims.seq, dims.head_dim);
  load_tile<DP>(v_s, views.v, k0, dims.seq, dims.head_dim);
  float dk[kPer][kCols] = {}, dv[kPer][kCols] = {};

  for (int q_tile = k_tile; q_tile < n_tiles; ++q_tile) {
    const int q0 = q_tile * kTile;
    __syncthreads();  // the previous query tile is no longer read
    load_tile<DP>(q_s, views.q, q0, dims.seq, dims.head_dim);
    load_tile<DP>(do_s, views.o, q0, dims.seq, dims.head_dim);
    load_row_values(lse_s, lse_bh, q0, dims.seq);
    load_row_values(delta_s, delta_bh, q0, dims.seq);
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
        const float p = (key <= query && query < dims.seq) ? expf(s[i][j] * dims.scale - lse_s[qj]) : 0.0f;
        s[i][j] = p * (dp[i][j] - delta_s[qj]);  // dS^T
        p_s[(ty + kSide * i) * kScoreStride + qj] = p;
      }
    }
    __syncthreads();
    for (int qq = 0; qq < kTile; ++qq) {  // dV += P^T dO
      float pv[kPer];
      for (int i = 0; i < kPer; ++i) pv[i] = p_s[(ty + kSide * i) * kScoreStride + qq];
      for (int c = 0; c < kCols; ++c) {
        const float g = do_s[qq * ld + tx + kSide * c];
        for (int i = 0; i < kPer; ++i) dv[i][c] += pv[i] * g;
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
        for (int i = 0; i < kPer; ++i) dk[i][c] += dsv[i] * qv;
      }
    }
  }

  const int64_t hd = static_cast<int64_t>(dims.heads) * dims.head_dim;
  for (int i = 0; i < kPer; ++i) {
    const int key = k0 + ty + kSide * i;
    if (key >= dims.seq) continue;
    float* dk_row = dqkv + views.qkv_offset + static_cast<int64_t>(key) * 3 * hd + hd;
    float* dv_row = dk_row + hd;
    for (int c = 0; c < kCols; ++c) {
      const int d = tx + kSide * c;
      if (d < dims.head_dim) dk_row[d] = dk[i][c] * dims.scale, dv_row[d] = dv[i][c];
    }
  }
}

// One block per (batch * head, query tile), heaviest first: dQ = scale * dS K over the key tiles
// up to it. Shared memory: q, dO, k, v tiles [64][DP + 1] and dS [64][65].
template <int DP>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta,
                        Dims dims) {
  constexpr int ld = DP + 1, kCols = DP / kSide;
  float* q_s = dynamic_smem<float>();
  float* do_s = q_s + kTile * ld;
  float* k_s = do_s + kTile * ld;
  float* v_s = k_s + kTile * ld;
  float* ds_s = v_s + kTile * ld;

  const int b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int q_tile = gridDim.y - 1 - blockIdx.y, q0 = q_tile * kTile;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const Heads views = heads_of(qkv, dout, b, h, dims);
  const int64_t bh = static_cast<int64_t>(b) * dims.heads + h;

  load_tile<DP>(q_s, views.q, q0, dims.seq, dims.head_dim);
  load_tile<DP>(do_s, views.o, q0, dims.seq, dims.head_dim);
  float row_lse[kPer], row_delta[kPer];
  for (int i = 0; i < kPer; ++i) {
    const int query = q0 + ty + kSide * i;
    row_lse[i] = query < dims.seq ? lse[bh * dims.seq + query] : 0.0f;
    row_delta[i] = query < dims.seq ? delta[bh * dims.seq + query] : 0.0f;
  }
  float dq[kPer][kCols] = {};

  for (int k_tile = 0; k_tile <= q_tile; ++k_tile) {
    const int k0 = k_tile * kTile;
    __syncthreads();  // the previous key tile is no longer read
    load_tile<DP>(k_s, views.k, k0, dims.seq, dims.head_dim);
    load_tile<DP>(v_s, views.v, k0, dims.seq, dims.head_dim);
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
        const float p = (key <= query && query < dims.seq) ? expf(s[i][j] * dims.scale - row_lse[i]) : 0.0f;
        ds_s[(ty + kSide * i) * kScoreStride + tx + kSide * j] = p * (dp[i][j] - row_delta[i]);
      }
    }
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) {  // dQ += dS K (scaled at the end)
      float dsv[kPer];
      for (int i = 0; i < kPer; ++i) dsv[i] = ds_s[(ty + kSide * i) * kScoreStride + kk];
      for (int c = 0; c < kCols; ++c) {
        const float kv = k_s[kk * ld + tx + kSide * c];
        for (int i = 0; i < kPer; ++i) dq[i][c] += dsv[i] * kv;
      }
    }
  }

  const int64_t hd = static_cast<int64_t>(dims.heads) * dims.head_dim;
  for (int i = 0; i < kPer; ++i) {
    const int query = q0 + ty + kSide * i;
    if (query >= dims.seq) continue;
    float* dq_row = dqkv + views.qkv_offset + static_cast<int64_t>(query) * 3 * hd;
    for (int c = 0; c < kCols; ++c) {
      const int d = tx + kSide * c;
      if (d < dims.head_dim) dq_row[d] = dq[i][c] * dims.scale;
    }
  }
}

template <int DP>
void run_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta,
                  int64_t batch, int64_t heads, const Dims& dims) {
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>((dims.seq + kTile - 1) / kTile));
  const size_t tiles = 4 * kTile * (DP + 1) + kTile * kScoreStride;
  launch("attention_backward", attention_dkdv_kernel<DP>, grid, dim3(kThreads), (tiles + 2 * kTile) * sizeof(float),
         dqkv, dout, qkv, lse, delta, dims);
  launch("attention_backward", attention_dq_kernel<DP>, grid, dim3(kThreads), tiles * sizeof(float), dqkv, dout,
         qkv, lse, delta, dims);
}

}  // namespace

void attention::compute_delta(float* delta, const float* dout, const float* out, int64_t rows, const Dims& dims) {
  launch("attention_backward", attention_delta_kernel, dim3(grid_for(rows * 32, 256)), dim3(256), 0, delta, dout,
         out, rows, dims);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  const int dp = padded_head_dim(head_dim, "attention_backward");
  check_sizes(batch, seq, heads, "attention_backward");
  if (batch <= 0 || seq <= 0 || heads <= 0) return;
  const Dims dims = dims_of(seq, heads, head_dim);
  const int64_t rows = batch * seq * heads;
  Scratch delta(static_cast<size_t>(rows) * sizeof(float));
  attention::compute_delta(delta.as<float>(), dout, out, rows, dims);
  if (dp == 32) run_backward<32>(dqkv, dout, qkv, lse, delta.as<const float>(), batch, heads, dims);
  else if (dp == 64) run_backward<64>(dqkv, dout, qkv, lse, delta.as<const float>(), batch, heads, dims);
  else run_backward<128>(dqkv, dout, qkv, lse, delta.as<const float>(), batch, heads, dims);
  finish("attention_backward");
}

}  // namespace tessera::kernels::cuda
