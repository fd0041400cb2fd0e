// CUDA layernorm of kernels/cuda/cuda_ops.h: forward (a warp per row, saving mean, rstd; with the
// residual add fused in front for add_layernorm_forward) and backward, all gradients accumulating:
// rows of up to 1024 columns in one pass over dout and inp (dinp per row, each warp's dweight and
// dbias terms kept in registers, then summed per block and over blocks in a fixed order), wider
// rows as dinp per row plus dweight, dbias as deterministic column sums.
#include <algorithm>

#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps, one row each at a time

// With residual, each row of sum = inp + residual is written first (every lane reads back only
// the columns it wrote) and normalised; without, inp's rows are.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, float* sum_out, const float* inp,
                                         const float* residual, const float* weight, const float* bias, int64_t rows,
                                         int64_t cols, float eps) {
  const int lane = threadIdx.x % 32;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t row = global_thread() / 32; row < rows; row += global_stride() / 32) {
    const float* x = residual ? sum_out + row * cols : inp + row * cols;
    float sum = 0.0f;
    if (residual) {
      float* s = sum_out + row * cols;
      for (int64_t c = lane; c < cols; c += 32) {
        const float v = inp[row * cols + c] + residual[row * cols + c];
        s[c] = v;
        sum += v;
      }
    } else {
      for (int64_t c = lane; c < cols; c += 32) sum += x[c];
    }
    const float mu = warp_sum(sum) * inv_cols;
    float sq = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) {
      const float d = x[c] - mu;
      sq += d * d;
    }
    const float rs = 1.0f / sqrtf(warp_sum(sq) * inv_cols + eps);
    float* y = out + row * cols;
    for (int64_t c = lane; c < cols; c += 32) y[c] = (x[c] - mu) * rs * weight[c] + bias[c];
    if (lane == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

// dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                      const float* mean, const float* rstd, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t row = global_thread() / 32; row < rows; row += global_stride() / 32) {
    const float* x = inp + row * cols;
    const float* dy = dout + row * cols;
    const float mu = mean[row], rs = rstd[row];
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) {
      const float norm = (x[c] - mu) * rs;
      const float dnorm = dy[c] * weight[c];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * norm;
    }
    const float dnorm_mean = warp_sum(dnorm_sum) * inv_cols;
    const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) * inv_cols;
    float* dx = dinp + row * cols;
    for (int64_t c = lane; c < cols; c += 32) {
      const float norm = (x[c] - mu) * rs;
      const float dnorm = dy[c] * weight[c];
      dx[c] += rs * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
    }
  }
}

// The fused backward for rows of at most 32 * J columns (lane l of a warp holds columns l + 32 j):
// warps take rows in turn; per row, dinp as layernorm_dinp_kernel, from values read once; each
// lane's dweight and dbias terms accumulate over its warp's rows in registers. At the end the
// block's warps are summed in warp order into partial[block] (dweight) and partial[blocks + block]
// (dbias), each cols wide: the same sums for the same launch shape every run.
template <int J>
__global__ void __launch_bounds__(kThreads)
    layernorm_backward_fused_kernel(float* dinp, float* partial, const float* dout, const float* inp,
                                    const float* weight, const float* mean, const float* rstd, int64_t rows,
                                    int64_t cols) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float warp_terms[kWarps][32 * J];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float dweight_terms[J], dbias_terms[J];
#pragma unroll
  for (int j = 0; j < J; ++j) dweight_terms[j] = dbias_terms[j] = 0.0f;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const float* x = inp + row * cols;
    const float* dy = dout + row * cols;
    const float mu = mean[row], rs = rstd[row];
    float norm[J], g[J], dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int64_t c = lane + 32 * j;
      norm[j] = c < cols ? (x[c] - mu) * rs : 0.0f;
      g[j] = c < cols ? dy[c] : 0.0f;
      const float dnorm = c < cols ? g[j] * weight[c] : 0.0f;
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * norm[j];
    }
    const float dnorm_mean = warp_sum(dnorm_sum) * inv_cols;
    const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) * inv_cols;
    float* dx = dinp + row * cols;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int64_t c = lane + 32 * j;
      if (c < cols) dx[c] += rs * (g[j] * weight[c] - dnorm_mean - norm[j] * dnorm_norm_mean);
      dweight_terms[j] += g[j] * norm[j];  // zero past cols
      dbias_terms[j] += g[j];
    }
  }
  for (int which = 0; which < 2; ++which) {
#pragma unroll
    for (int j = 0; j < J; ++j) warp_terms[warp][lane + 32 * j] = which == 0 ? dweight_terms[j] : dbias_terms[j];
    __syncthreads();
    float* out = partial + (static_cast<int64_t>(which) * gridDim.x + blockIdx.x) * cols;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      float sum = 0.0f;
      for (int w = 0; w < kWarps; ++w) sum += warp_terms[w][c];
      out[c] = sum;
    }
    __syncthreads();  // before the next pass overwrites warp_terms
  }
}

struct BlockPartial {  // one row of the fused kernel's partial sums per block
  const float* partial;
  int64_t cols;
  __device__ float operator()(int64_t r, int64_t c) const { return partial[r * cols + c]; }
};

template <int J>
void layernorm_backward_fused(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, int64_t rows,
                              int64_t cols) {
  constexpr int64_t kMaxBlocks = 256;  // at least a block per SM on current GPUs; bounds the partial sums
  const int64_t rows_per_block = kThreads / 32;
  const int64_t blocks = std::min(kMaxBlocks, (rows + rows_per_block - 1) / rows_per_block);
  Scratch partial(static_cast<size_t>(2 * blocks * cols) * sizeof(float));
  launch("layernorm_backward", layernorm_backward_fused_kernel<J>, dim3(static_cast<unsigned>(blocks)),
         dim3(kThreads), 0, dinp, partial.as<float>(), dout, inp, weight, mean, rstd, rows, cols);
  accumulate_column_sums("layernorm_backward", dweight, BlockPartial{partial.as<const float>(), cols}, blocks, cols);
  accumulate_column_sums("layernorm_backward", dbias, BlockPartial{partial.as<const float>() + blocks * cols, cols},
                         blocks, cols);
}

struct DoutTimesNorm {  // dweight terms
  const float *dout, *inp, *mean, *rstd;
  int64_t cols;
  __device__ float operator()(int64_t r, int64_t c) const {
    return dout[r * cols + c] * ((inp[r * cols + c] - mean[r]) * rstd[r]);
  }
};

struct Dout {  // dbias terms
  const float* dout;
  int64_t cols;
  __device__ float operator()(int64_t r, int64_t c) const { return dout[r * cols + c]; }
};

unsigned row_blocks(int64_t rows) { return grid_for(rows * 32, kThreads); }

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t rows, int64_t cols, float eps) {
  if (rows <= 0 || cols <= 0) return;
  launch("layernorm_forward", layernorm_forward_kernel, dim3(row_blocks(rows)), dim3(kThreads), 0, out, mean, rstd,
         static_cast<float*>(nullptr), inp, static_cast<const float*>(nullptr), weight, bias, rows, cols, eps);
  finish("layernorm_forward");
}

void add_layernorm_forward(float* sum, float* out, float* mean, float* rstd, const float* a, const float* b,
                           const float* weight, const float* bias, int64_t rows, int64_t cols, float eps) {
  if (rows <= 0 || cols <= 0) return;
  launch("add_layernorm_forward", layernorm_forward_kernel, dim3(row_blocks(rows)), dim3(kThreads), 0, out, mean,
         rstd, sum, a, b, weight, bias, rows, cols, eps);
  finish("add_layernorm_forward");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t rows,
                        int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  if (cols <= 1024) {
    if (cols <= 128) layernorm_backward_fused<4>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, cols);
    else if (cols <= 256) layernorm_backward_fused<8>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, cols);
    else if (cols <= 512) layernorm_backward_fused<16>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, cols);
    else layernorm_backward_fused<32>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, cols);
    finish("layernorm_backward");
    return;
  }
  launch("layernorm_backward", layernorm_dinp_kernel, dim3(row_blocks(rows)), dim3(kThreads), 0, dinp, dout, inp,
         weight, mean, rstd, rows, cols);
  accumulate_column_sums("layernorm_backward", dweight, DoutTimesNorm{dout, inp, mean, rstd, cols}, rows, cols);
  accumulate_column_sums("layernorm_backward", dbias, Dout{dout, cols}, rows, cols);
  finish("layernorm_backward");
}

}  // namespace tessera::kernels::cuda
