// CUDA causal self-attention on the tensor cores (kernels/cuda/cuda_ops.h's *_bf16 twins of
// attention_forward and attention_backward): the products S = Q K^T, O = P V and the backward's
// four take bf16 inputs and sum in fp32 (mma.sync m16n8k16, kernels/cuda/mma_bf16.cuh), as the
// GEMMs do under --precision bf16; the softmax, lse and every output stay fp32. Flash-attention
// tiling: 64-row tiles of queries or keys per block, 16 rows per warp, an online softmax in
// registers, P recomputed from lse in the backward; no T x T matrix, no atomics (deterministic).
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_bf16.cuh"

namespace tessera::kernels::cuda {
namespace {

using namespace attention;
using bf16 = __nv_bfloat16;

constexpr int kRows = 64;        // query or key rows per block
static_assert(kRows == kTile, "check_sizes counts the grid's tiles of kTile rows");
constexpr int kWarpRows = 16;    // rows per warp: one mma tile
constexpr int kMmaThreads = 128;  // 4 warps
constexpr int kRowsT = kRows + 8;  // row stride of a transposed [DP][64] tile (+8: no bank conflicts)
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// Rows [first, first + 64) of a head as bf16, zero past seq or head_dim: into rows[r][d] (stride
// DP + 8) and, where given, its transpose cols[d][r] (stride kRowsT).
template <int DP>
__device__ __forceinline__ void load_rows(bf16* rows, bf16* cols, HeadView head, int first, int seq, int head_dim) {
  for (int idx = threadIdx.x; idx < kRows * DP; idx += kMmaThreads) {
    const int r = idx / DP, d = idx % DP, row = first + r;
    const bf16 x = __float2bfloat16_rn(row < seq && d < head_dim ? head.base[row * head.row_stride + d] : 0.0f);
    if (rows) rows[r * (DP + 8) + d] = x;
    if (cols) cols[d * kRowsT + r] = x;
  }
}

// Writes a warp's 16 x DP accumulator rows (rows[0] for c[.][0..1], rows[1] for c[.][2..3]) times
// scale into dst + row * stride, skipping rows past seq and columns past head_dim.
template <int DP>
__device__ __forceinline__ void store_rows(float* dst, int64_t stride, const float (&acc)[DP / 8][4],
                                           const int (&rows)[2], const float (&scale)[2], int seq, int head_dim) {
  const int t = threadIdx.x % 4;
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= seq) continue;
    float* row = dst + rows[r] * stride;
    for (int c = 0; c < DP / 8; ++c) {
      const int d = c * 8 + 2 * t;
      if (d < head_dim) row[d] = acc[c][2 * r] * scale[r];
      if (d + 1 < head_dim) row[d + 1] = acc[c][2 * r + 1] * scale[r];
    }
  }
}

// acc (16 x DP) += a (16 x 64, as four k-steps of accumulator pairs) times the 64 x DP matrix
// whose transpose is the tile bt[d][k] (stride kRowsT).
template <int DP>
__device__ __forceinline__ void add_product(float (&acc)[DP / 8][4], const float (&a)[8][4], const bf16* bt) {
  for (int j = 0; j < 4; ++j) {
    uint32_t frag[4];
    mma::accumulators_to_a(frag, a[2 * j], a[2 * j + 1]);
    for (int c = 0; c < DP / 8; ++c) {
      uint32_t b[2];
      mma::load_b(b, bt, kRowsT, c * 8, j * 16);
      mma::mma_bf16(acc[c], frag, b);
    }
  }
}

// s (16 x 64) = rows [row0, row0 + 16) of x times the transpose of the 64 rows of y (both [64][DP + 8]).
template <int DP>
__device__ __forceinline__ void scores(float (&s)[8][4], const bf16* x, int row0, const bf16* y) {
  for (int n = 0; n < 8; ++n)
    for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
  for (int kk = 0; kk < DP / 16; ++kk) {
    uint32_t a[4];
    mma::load_a(a, x, DP + 8, row0, kk * 16);
    for (int n = 0; n < 8; ++n) {
      uint32_t b[2];
      mma::load_b(b, y, DP + 8, n * 8, kk * 16);
      mma::mma_bf16(s[n], a, b);
    }
  }
}

// One block per (batch * head, query tile), heaviest tiles first; warp w owns query rows 16 w..16 w + 15
// of the tile. Shared memory: q, k [64][DP + 8] and v^T [DP][72], bf16.
template <int DP>
__global__ void __launch_bounds__(kMmaThreads)
    forward_kernel(float* out, float* lse, const float* qkv, Dims dims) {
  bf16* q_s = dynamic_smem<bf16>();
  bf16* k_s = q_s + kRows * (DP + 8);
  bf16* vt_s = k_s + kRows * (DP + 8);

  const int b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int q_tile = gridDim.y - 1 - blockIdx.y, q0 = q_tile * kRows;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const Heads views = heads_of(qkv, out, b, h, dims);
  const float scale_log2 = dims.scale * kLog2e;  // scores in base-2 units: exp2 in place of exp
  const int rows[2] = {q0 + warp * kWarpRows + g, q0 + warp * kWarpRows + g + 8};

  load_rows<DP>(q_s, nullptr, views.q, q0, dims.seq, dims.head_dim);
  float o[DP / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max (base 2) and this lane's sum

  for (int k_tile = 0; k_tile <= q_tile; ++k_tile) {
    const int k0 = k_tile * kRows;
    __syncthreads();  // the previous tile's k and v are no longer read
    load_rows<DP>(k_s, nullptr, views.k, k0, dims.seq, dims.head_dim);
    load_rows<DP>(nullptr, vt_s, views.v, k0, dims.seq, dims.head_dim);
    __syncthreads();

    float s[8][4];
    scores<DP>(s, q_s, warp * kWarpRows, k_s);
    const bool diagonal = k_tile == q_tile;
    float tile_max[2] = {-INFINITY, -INFINITY};
    for (int n = 0; n < 8; ++n)
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + n * 8 + 2 * t + e % 2;
        s[n][e] = !diagonal || key <= rows[e / 2] ? s[n][e] * scale_log2 : -INFINITY;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
      }
    float correction[2];
    for (int r = 0; r < 2; ++r) {  // every row sees key k0 <= row: the new max is finite
      const float m_new = fmaxf(m[r], mma::quad_max(tile_max[r]));
      correction[r] = exp2f(m[r] - m_new);
      m[r] = m_new;
      l[r] *= correction[r];
    }
    for (int n = 0; n < 8; ++n)
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - m[e / 2]);
        l[e / 2] += s[n][e];
      }
    for (int c = 0; c < DP / 8; ++c)
      for (int e = 0; e < 4; ++e) o[c][e] *= correction[e / 2];
    add_product<DP>(o, s, vt_s);
  }

  float inv_l[2];
  for (int r = 0; r < 2; ++r) {
    l[r] = mma::quad_sum(l[r]);
    inv_l[r] = 1.0f / l[r];
  }
  store_rows<DP>(out + views.o_offset, static_cast<int64_t>(dims.heads) * dims.head_dim, o, rows, inv_l, dims.seq,
                 dims.head_dim);
  const int64_t bh = static_cast<int64_t>(b) * dims.heads + h;
  for (int r = 0; r < 2; ++r)
    if (t == 0 && rows[r] < dims.seq) lse[bh * dims.seq + rows[r]] = (m[r] + log2f(l[r])) * kLn2;
}

// lse (base 2) and delta of query rows [q0, q0 + 64) into shared memory, zero past seq.
__device__ __forceinline__ void load_row_terms(float* lse_s, float* delta_s, const float* lse, const float* delta,
                                               int q0, int seq) {
  for (int r = threadIdx.x; r < kRows; r += kMmaThreads) {
    lse_s[r] = q0 + r < seq ? lse[q0 + r] * kLog2e : 0.0f;
    delta_s[r] = q0 + r < seq ? delta[q0 + r] : 0.0f;
  }
}

// One block per (batch * head, key tile); warp w owns key rows 16 w..16 w + 15 of the tile and
// runs over the query tiles at or after it: S^T = K Q^T, P^T from lse, dP^T = V dO^T,
// dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q (scaled at the end). Shared memory: k, v,
// q, dO [64][DP + 8] and q^T, dO^T [DP][72] (bf16), lse and delta [64] (fp32).
template <int DP>
__global__ void __launch_bounds__(kMmaThreads)
    dkdv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta, Dims dims) {
  constexpr int tile = kRows * (DP + 8), tile_t = DP * kRowsT;
  bf16* k_s = dynamic_smem<bf16>();
  bf16* v_s = k_s + tile;
  bf16* q_s = v_s + tile;
  bf16* do_s = q_s + tile;
  bf16* qt_s = do_s + tile;
  bf16* dot_s = qt_s + tile_t;
  float* lse_s = reinterpret_cast<float*>(dot_s + tile_t);
  float* delta_s = lse_s + kRows;

  const int b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int k_tile = blockIdx.y, k0 = k_tile * kRows;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const Heads views = heads_of(qkv, dout, b, h, dims);
  const int64_t bh = static_cast<int64_t>(b) * dims.heads + h;
  const float scale_log2 = dims.scale * kLog2e;
  const int keys[2] = {k0 + warp * kWarpRows + g, k0 + warp * kWarpRows + g + 8};

  load_rows<DP>(k_s, nullptr, views.k, k0, dims.seq, dims.head_dim);
  load_rows<DP>(v_s, nullptr, views.v, k0, dims.seq, dims.head_dim);
  float dk[DP / 8][4] = {}, dv[DP / 8][4] = {};

  for (int q_tile = k_tile; q_tile < static_cast<int>(gridDim.y); ++q_tile) {
    const int q0 = q_tile * kRows;
    __syncthreads();  // the previous query tile is no longer read
    load_rows<DP>(q_s, qt_s, views.q, q0, dims.seq, dims.head_dim);
    load_rows<DP>(do_s, dot_s, views.o, q0, dims.seq, dims.head_dim);
    load_row_terms(lse_s, delta_s, lse + bh * dims.seq, delta + bh * dims.seq, q0, dims.seq);
    __syncthreads();

    float p[8][4], ds[8][4];
    scores<DP>(p, k_s, warp * kWarpRows, q_s);
    scores<DP>(ds, v_s, warp * kWarpRows, do_s);
    const bool diagonal = q_tile == k_tile;
    for (int n = 0; n < 8; ++n)
      for (int e = 0; e < 4; ++e) {
        const int qi = n * 8 + 2 * t + e % 2, query = q0 + qi;
        const bool seen = query < dims.seq && (!diagonal || keys[e / 2] <= query);
        p[n][e] = seen ? exp2f(p[n][e] * scale_log2 - lse_s[qi]) : 0.0f;
        ds[n][e] = p[n][e] * (ds[n][e] - delta_s[qi]);
      }
    add_product<DP>(dv, p, dot_s);
    add_product<DP>(dk, ds, qt_s);
  }

  const int64_t stride = 3 * static_cast<int64_t>(dims.heads) * dims.head_dim, hd = stride / 3;
  const float scale[2] = {dims.scale, dims.scale}, one[2] = {1.0f, 1.0f};
  store_rows<DP>(dqkv + views.qkv_offset + hd, stride, dk, keys, scale, dims.seq, dims.head_dim);
  store_rows<DP>(dqkv + views.qkv_offset + 2 * hd, stride, dv, keys, one, dims.seq, dims.head_dim);
}

// One block per (batch * head, query tile), heaviest first; warp w owns query rows 16 w..16 w + 15
// and runs over the key tiles up to it: dQ += dS K (scaled at the end). Shared memory: q, dO, k, v
// [64][DP + 8] and k^T [DP][72], bf16.
template <int DP>
__global__ void __launch_bounds__(kMmaThreads)
    dq_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta, Dims dims) {
  constexpr int tile = kRows * (DP + 8);
  bf16* q_s = dynamic_smem<bf16>();
  bf16* do_s = q_s + tile;
  bf16* k_s = do_s + tile;
  bf16* v_s = k_s + tile;
  bf16* kt_s = v_s + tile;

  const int b = blockIdx.x / dims.heads, h = blockIdx.x % dims.heads;
  const int q_tile = gridDim.y - 1 - blockIdx.y, q0 = q_tile * kRows;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const Heads views = heads_of(qkv, dout, b, h, dims);
  const int64_t bh = static_cast<int64_t>(b) * dims.heads + h;
  const float scale_log2 = dims.scale * kLog2e;
  const int rows[2] = {q0 + warp * kWarpRows + g, q0 + warp * kWarpRows + g + 8};
  float row_lse[2], row_delta[2];
  for (int r = 0; r < 2; ++r) {
    row_lse[r] = rows[r] < dims.seq ? lse[bh * dims.seq + rows[r]] * kLog2e : 0.0f;
    row_delta[r] = rows[r] < dims.seq ? delta[bh * dims.seq + rows[r]] : 0.0f;
  }

  load_rows<DP>(q_s, nullptr, views.q, q0, dims.seq, dims.head_dim);
  load_rows<DP>(do_s, nullptr, views.o, q0, dims.seq, dims.head_dim);
  float dq[DP / 8][4] = {};

  for (int k_tile = 0; k_tile <= q_tile; ++k_tile) {
    const int k0 = k_tile * kRows;
    __syncthreads();  // the previous key tile is no longer read
    load_rows<DP>(k_s, kt_s, views.k, k0, dims.seq, dims.head_dim);
    load_rows<DP>(v_s, nullptr, views.v, k0, dims.seq, dims.head_dim);
    __syncthreads();

    float s[8][4], ds[8][4];
    scores<DP>(s, q_s, warp * kWarpRows, k_s);
    scores<DP>(ds, do_s, warp * kWarpRows, v_s);
    const bool diagonal = k_tile == q_tile;
    for (int n = 0; n < 8; ++n)
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, key = k0 + n * 8 + 2 * t + e % 2;
        const bool seen = rows[r] < dims.seq && (!diagonal || key <= rows[r]);
        const float p = seen ? exp2f(s[n][e] * scale_log2 - row_lse[r]) : 0.0f;
        ds[n][e] = p * (ds[n][e] - row_delta[r]);
      }
    add_product<DP>(dq, ds, kt_s);
  }

  const float scale[2] = {dims.scale, dims.scale};
  store_rows<DP>(dqkv + views.qkv_offset, 3 * static_cast<int64_t>(dims.heads) * dims.head_dim, dq, rows, scale,
                 dims.seq, dims.head_dim);
}

constexpr size_t tile_bytes(int dp) { return static_cast<size_t>(kRows) * (dp + 8) * sizeof(bf16); }
constexpr size_t tile_t_bytes(int dp) { return static_cast<size_t>(dp) * kRowsT * sizeof(bf16); }

template <int DP>
void run_forward(float* out, float* lse, const float* qkv, int64_t batch, int64_t heads, const Dims& dims) {
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>((dims.seq + kRows - 1) / kRows));
  launch("attention_forward_bf16", forward_kernel<DP>, grid, dim3(kMmaThreads), 2 * tile_bytes(DP) + tile_t_bytes(DP),
         out, lse, qkv, dims);
}

template <int DP>
void run_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta,
                  int64_t batch, int64_t heads, const Dims& dims) {
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>((dims.seq + kRows - 1) / kRows));
  launch("attention_backward_bf16", dkdv_kernel<DP>, grid, dim3(kMmaThreads),
         4 * tile_bytes(DP) + 2 * tile_t_bytes(DP) + 2 * kRows * sizeof(float), dqkv, dout, qkv, lse, delta, dims);
  launch("attention_backward_bf16", dq_kernel<DP>, grid, dim3(kMmaThreads), 4 * tile_bytes(DP) + tile_t_bytes(DP),
         dqkv, dout, qkv, lse, delta, dims);
}

}  // namespace

void attention_forward_bf16(float* out, float* lse, const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                            int64_t head_dim) {
  const int dp = padded_head_dim(head_dim, "attention_forward_bf16");
  check_sizes(batch, seq, heads, "attention_forward_bf16");
  if (batch <= 0 || seq <= 0 || heads <= 0) return;
  const Dims dims = dims_of(seq, heads, head_dim);
  if (dp == 32) run_forward<32>(out, lse, qkv, batch, heads, dims);
  else if (dp == 64) run_forward<64>(out, lse, qkv, batch, heads, dims);
  else run_forward<128>(out, lse, qkv, batch, heads, dims);
  finish("attention_forward_bf16");
}

void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  const int dp = padded_head_dim(head_dim, "attention_backward_bf16");
  check_sizes(batch, seq, heads, "attention_backward_bf16");
  if (batch <= 0 || seq <= 0 || heads <= 0) return;
  const Dims dims = dims_of(seq, heads, head_dim);
  const int64_t rows = batch * seq * heads;
  Scratch delta(static_cast<size_t>(rows) * sizeof(float));
  compute_delta(delta.as<float>(), dout, out, rows, dims);
  if (dp == 32) run_backward<32>(dqkv, dout, qkv, lse, delta.as<const float>(), batch, heads, dims);
  else if (dp == 64) run_backward<64>(dqkv, dout, qkv, lse, delta.as<const float>(), batch, heads, dims);
  else run_backward<128>(dqkv, dout, qkv, lse, delta.as<const float>(), batch, heads, dims);
  finish("attention_backward_bf16");
}

}  // namespace tessera::kernels::cuda
