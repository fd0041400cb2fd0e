// Shared by the fused attention kernels: the sizes of a call, the views of one (batch, head) inside
// qkv and out, the backward's row term; the fp32 kernels' tiling (64 x 64 score tiles over 256
// threads, tiles of q/k/v/o rows in shared memory, head_dim padded to DP, row stride DP + 1).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda::attention {

// Thread (tx, ty) of the 16 x 16 grid owns the scores of rows ty + 16 i and columns tx + 16 j, i, j < 4.
constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kSide = 16;             // threads per side of the 16 x 16 grid
constexpr int kPer = kTile / kSide;   // rows (and columns) per thread
constexpr int kScoreStride = kTile + 1;

// Where one (batch, head) lives: the first element of q (or of o) at t = 0, and the row stride.
struct HeadView {
  const float* base;
  int64_t row_stride;
};

// The sizes of a causal self-attention call; scale = 1 / sqrt(head_dim).
struct Dims {
  int seq, heads, head_dim;
  float scale;
};

inline Dims dims_of(int64_t seq, int64_t heads, int64_t head_dim) {
  return {static_cast<int>(seq), static_cast<int>(heads), static_cast<int>(head_dim),
          1.0f / std::sqrt(static_cast<float>(head_dim))};
}

// The views of one (batch, head): q, k, v inside qkv, o / dO inside [B, T, H, D].
struct Heads {
  HeadView q, k, v, o;
  int64_t qkv_offset, o_offset;  // of (b, t = 0, h) in qkv and in out
};

__device__ __forceinline__ Heads heads_of(const float* qkv, const float* o, int b, int h, const Dims& dims) {
  const int64_t hd = static_cast<int64_t>(dims.heads) * dims.head_dim;
  const int64_t qkv_offset = static_cast<int64_t>(b) * dims.seq * 3 * hd + static_cast<int64_t>(h) * dims.head_dim;
  const int64_t o_offset = static_cast<int64_t>(b) * dims.seq * hd + static_cast<int64_t>(h) * dims.head_dim;
  return {{qkv + qkv_offset, 3 * hd},
          {qkv + qkv_offset + hd, 3 * hd},
          {qkv + qkv_offset + 2 * hd, 3 * hd},
          {o + o_offset, hd},
          qkv_offset,
          o_offset};
}

// delta[b, h, t] = sum_d dout[b, t, h, d] out[b, t, h, d] over rows = B T H rows of [B, T, H, D]
// (the backward's row term; attention.cu), queued on op_stream().
void compute_delta(float* delta, const float* dout, const float* out, int64_t rows, const Dims& dims);

// smem[r * (DP + 1) + d] = rows [first, first + kTile) of a head, zero past seq or head_dim.
template <int DP>
__device__ __forceinline__ void load_tile(float* smem, HeadView head, int first, int seq, int head_dim) {
  for (int idx = threadIdx.x; idx < kTile * DP; idx += kThreads) {
    const int r = idx / DP, d = idx % DP, row = first + r;
    smem[r * (DP + 1) + d] = (row < seq && d < head_dim) ? head.base[row * head.row_stride + d] : 0.0f;
  }
}

// Rows of a [seq] vector for the tile: out[r] = v[first + r], zero past seq.
__device__ __forceinline__ void load_row_values(float* out, const float* v, int first, int seq) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) out[r] = first + r < seq ? v[first + r] : 0.0f;
}

// Sum or max over the 16 threads that share a row (consecutive lanes tx = 0..15 of a half warp).
__device__ __forceinline__ float row_group_sum(float v) {
  for (int offset = kSide / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float row_group_max(float v) {
  for (int offset = kSide / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// head_dim rounded up to an instantiated tile width.
inline int padded_head_dim(int64_t head_dim, const char* op) {
  TESSERA_CHECK(head_dim >= 1 && head_dim <= 128, op, ": head_dim ", head_dim, " is not in [1, 128]");
  return head_dim <= 32 ? 32 : (head_dim <= 64 ? 64 : 128);
}

// The kernels launch a block per (sequence, head) along x and per 64-row tile along y, whose
// extent CUDA caps at 65535: sequences up to 4194240 positions.
inline void check_sizes(int64_t batch, int64_t seq, int64_t heads, const char* op) {
  constexpr int64_t kMaxTiles = 65535;
  TESSERA_CHECK(batch * heads <= INT32_MAX, op, ": batch ", batch, " x heads ", heads, " exceeds ", INT32_MAX);
  TESSERA_CHECK((seq + kTile - 1) / kTile <= kMaxTiles, op, ": seq ", seq, " exceeds ", kMaxTiles * kTile,
                " positions (", kMaxTiles, " tiles of ", kTile, ")");
}

}  // namespace tessera::kernels::cuda::attention
