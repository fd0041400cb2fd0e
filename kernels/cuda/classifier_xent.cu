// CUDA twin of kernels/cpu/classifier_xent.cpp: softmax cross-entropy with label smoothing over a
// classifier's logits, forward (one block per row) and backward (dlogits may alias logits).
// The forward reads the labels back to check them on the host.
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 128;  // classifiers have few classes

// lse = m + log s, s = sum_j exp(x_j - m); loss = log s - (1 - eps)(x_y - m) - eps mean_j (x_j - m);
// 0 for a label < 0.
__global__ void classifier_xent_forward_kernel(float* losses, float* lse, const float* logits, const int32_t* labels,
                                               int64_t rows, int64_t classes, float smoothing) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + row * classes;
    MaxSum acc{-INFINITY, 0.0f};
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) acc = max_sum_add(acc, x[j]);
    acc = block_max_sum(acc);
    float centred = 0.0f;
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) centred += x[j] - acc.max;
    centred = block_sum(centred);
    if (threadIdx.x == 0) {
      const float log_sum = logf(acc.sum);
      const int32_t y = labels[row];
      lse[row] = acc.max + log_sum;
      losses[row] = y >= 0 ? log_sum - (1.0f - smoothing) * (x[y] - acc.max) -
                                 smoothing * (centred / static_cast<float>(classes))
                           : 0.0f;
    }
  }
}

// dlogits[j] = (exp(x_j - lse) - eps / K - (1 - eps) [j == y]) * scale; ignored rows 0.
__global__ void classifier_xent_backward_kernel(float* dlogits, const float* logits, const int32_t* labels,
                                                const float* lse, int64_t rows, int64_t classes, float uniform,
                                                float hit, float scale) {
  const int64_t n = rows * classes;
  for (int64_t e = global_thread(); e < n; e += global_stride()) {
    const int64_t row = e / classes, j = e % classes;
    const int32_t y = labels[row];
    dlogits[e] = y < 0 ? 0.0f : (expf(logits[e] - lse[row]) - (j == y ? hit : uniform)) * scale;
  }
}

}  // namespace

void classifier_xent_forward(float* losses, float* lse, const float* logits, const int32_t* labels, int64_t rows,
                             int64_t classes, float smoothing) {
  if (rows <= 0) return;
  // Labels are few (one per image): checked on the host, as the CPU twin does.
  std::vector<int32_t> host(static_cast<size_t>(rows));
  TESSERA_CUDA_CHECK(cudaMemcpy(host.data(), labels, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  for (int64_t r = 0; r < rows; ++r)
    if (host[r] >= classes)
      fail("classifier_xent_forward: label ", host[r], " at row ", r, " is not below the class count ", classes);
  const unsigned blocks = static_cast<unsigned>(rows < (1 << 30) ? rows : (1 << 30));
  launch("classifier_xent_forward", classifier_xent_forward_kernel, dim3(blocks), dim3(kThreads), 0, losses, lse,
         logits, labels, rows, classes, smoothing);
  finish("classifier_xent_forward");
}

void classifier_xent_backward(float* dlogits, const float* logits, const int32_t* labels, const float* lse,
                              int64_t rows, int64_t classes, float smoothing, float scale) {
  if (rows <= 0 || classes <= 0) return;
  const float uniform = smoothing / static_cast<float>(classes), hit = 1.0f - smoothing + uniform;
  launch("classifier_xent_backward", classifier_xent_backward_kernel, dim3(grid_for(rows * classes, 256)), dim3(256),
         0, dlogits, logits, labels, lse, rows, classes, uniform, hit, scale);
  finish("classifier_xent_backward");
}

}  // namespace tessera::kernels::cuda
