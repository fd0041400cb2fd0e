// CUDA softmax + cross-entropy of kernels/cuda/cuda_ops.h over padded-vocabulary logits: forward
// (one block per row, online max/sum, saving lse) and backward (dlogits may alias logits). Synchronous.
// Targets < 0 are ignored (loss 0, gradient row 0); a target >= valid_vocab is a caller error and
// yields a NaN loss (its gradient row is the softmax alone), so it cannot pass unnoticed.
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void softmax_xent_forward_kernel(float* losses, float* lse, const float* logits, const int32_t* targets,
                                            int64_t rows, int64_t padded_vocab, int64_t valid_vocab) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + row * padded_vocab;
    MaxSum acc{-INFINITY, 0.0f};
    for (int64_t c = threadIdx.x; c < valid_vocab; c += blockDim.x) acc = max_sum_add(acc, x[c]);
    acc = block_max_sum(acc);
    if (threadIdx.x == 0) {
      const float row_lse = acc.max + logf(acc.sum);
      const int32_t t = targets[row];
      lse[row] = row_lse;
      losses[row] = t < 0 ? 0.0f : (t < valid_vocab ? row_lse - x[t] : NAN);
    }
  }
}

// dlogits[c] = (exp(logit[c] - lse) - [c == target]) * scale over the valid columns, 0 elsewhere.
__global__ void softmax_xent_backward_kernel(float* dlogits, const float* logits, const int32_t* targets,
                                             const float* lse, int64_t rows, int64_t padded_vocab,
                                             int64_t valid_vocab, float scale) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + row * padded_vocab;
    float* dx = dlogits + row * padded_vocab;
    const int32_t t = targets[row];
    const float row_lse = lse[row];
    for (int64_t c = threadIdx.x; c < padded_vocab; c += blockDim.x) {
      float g = 0.0f;
      if (t >= 0 && c < valid_vocab) g = (expf(x[c] - row_lse) - (c == t ? 1.0f : 0.0f)) * scale;
      dx[c] = g;
    }
  }
}

unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < (1 << 30) ? rows : (1 << 30)); }

}  // namespace

void softmax_xent_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t rows,
                          int64_t padded_vocab, int64_t valid_vocab) {
  if (rows <= 0) return;
  launch("softmax_xent_forward", softmax_xent_forward_kernel, dim3(row_grid(rows)), dim3(kThreads), 0, losses, lse,
         logits, targets, rows, padded_vocab, valid_vocab);
  finish("softmax_xent_forward");
}

void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* targets, const float* lse,
                           int64_t rows, int64_t padded_vocab, int64_t valid_vocab, float scale) {
  if (rows <= 0 || padded_vocab <= 0) return;
  launch("softmax_xent_backward", softmax_xent_backward_kernel, dim3(row_grid(rows)), dim3(kThreads), 0, dlogits,
         logits, targets, lse, rows, padded_vocab, valid_vocab, scale);
  finish("softmax_xent_backward");
}

}  // namespace tessera::kernels::cuda
