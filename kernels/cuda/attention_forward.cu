// CUDA causal self-attention forward of kernels/cuda/cuda_ops.h: a fused flash-attention-style
// kernel (online softmax over 64-key tiles, no T x T matrix), saving lse for backward.
#include <cmath>

#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_ops.h"
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

}  // namespace tessera::kernels::cuda
