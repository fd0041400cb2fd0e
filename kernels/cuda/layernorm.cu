// CUDA layernorm of kernels/cuda/cuda_ops.h: forward (a warp per row, saving mean, rstd; with the
// residual add fused in front for add_layernorm_forward) and
// backward (dinp per row; dweight, dbias as deterministic column sums), all gradients accumulating.
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
  launch("layernorm_backward", layernorm_dinp_kernel, dim3(row_blocks(rows)), dim3(kThreads), 0, dinp, dout, inp,
         weight, mean, rstd, rows, cols);
  accumulate_column_sums("layernorm_backward", dweight, DoutTimesNorm{dout, inp, mean, rstd, cols}, rows, cols);
  accumulate_column_sums("layernorm_backward", dbias, Dout{dout, cols}, rows, cols);
  finish("layernorm_backward");
}

}  // namespace tessera::kernels::cuda
