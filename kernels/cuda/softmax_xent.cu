// CUDA softmax + cross-entropy of kernels/cuda/cuda_ops.h over padded-vocabulary logits: forward (one
// block per row, online max/sum, saving lse) and backward (dlogits may alias logits).
#include "core/error.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

// Targets < 0 are ignored (loss 0, gradient row 0); a target >= valid_vocab throws, as on the CPU,
// though only once the forward kernel (which gives such a row loss 0) has run: the check's wait
// then ends the op's timed interval after both kernels.
constexpr int kThreads = 256;
constexpr unsigned long long kNoBadRow = ~0ull;

// *first_bad = the lowest row whose target is >= valid_vocab (left at kNoBadRow if none).
__global__ void find_bad_target_kernel(unsigned long long* first_bad, const int32_t* targets, int64_t rows,
                                       int64_t valid_vocab) {
  for (int64_t r = global_thread(); r < rows; r += global_stride())
    if (targets[r] >= valid_vocab) atomicMin(first_bad, static_cast<unsigned long long>(r));
}

// Throws "<op>: target X at row R is not below the vocabulary size V" for the first bad target.
void check_targets(const int32_t* targets, int64_t rows, int64_t valid_vocab, const char* op) {
  Scratch flag(sizeof(unsigned long long));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(flag.as<void>(), 0xff, sizeof(unsigned long long), op_stream()));
  launch(op, find_bad_target_kernel, dim3(grid_for(rows, kThreads)), dim3(kThreads), 0,
         flag.as<unsigned long long>(), targets, rows, valid_vocab);
  unsigned long long bad = kNoBadRow;
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(&bad, flag.as<void>(), sizeof bad, cudaMemcpyDeviceToHost, op_stream()));
  finish(op);
  wait_for_ops(op);  // the host reads the flag
  if (bad == kNoBadRow) return;
  int32_t target = 0;
  TESSERA_CUDA_CHECK(cudaMemcpy(&target, targets + bad, sizeof target, cudaMemcpyDeviceToHost));
  fail(op, ": target ", target, " at row ", bad, " is not below the vocabulary size ", valid_vocab);
}

// lse = max + log(sum_c exp(x_c - max)) over c < valid_vocab; loss = lse - x[target], 0 if ignored.
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
      losses[row] = t >= 0 && t < valid_vocab ? row_lse - x[t] : 0.0f;  // a bad target: check_targets throws
    }
  }
}

// dlogits[c] = (exp(logit[c] - lse) - [c == target]) * scale over the valid columns, 0 elsewhere.
__global__ void softmax_xent_backward_kernel(float* dlogits, const float* logits, const int32_t* targets,
                                             const float* lse, int64_t rows, int64_t padded_vocab,
                                             int64_t valid_vocab, float scale, int64_t vocab_start) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + row * padded_vocab;
    float* dx = dlogits + row * padded_vocab;
    const int64_t t = targets[row] < 0 ? -1 : targets[row] - vocab_start;  // -1: ignored row
    const bool ignored = targets[row] < 0;
    const float row_lse = lse[row];
    for (int64_t c = threadIdx.x; c < padded_vocab; c += blockDim.x) {
      float g = 0.0f;
      if (!ignored && c < valid_vocab) g = (expf(x[c] - row_lse) - (c == t ? 1.0f : 0.0f)) * scale;
      dx[c] = g;
    }
  }
}

// row_max[row] = max of the valid columns (-inf when there are none).
__global__ void softmax_xent_row_max_kernel(float* row_max, const float* logits, int64_t rows, int64_t padded_vocab,
                                            int64_t valid_vocab) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + row * padded_vocab;
    MaxSum acc{-INFINITY, 0.0f};
    for (int64_t c = threadIdx.x; c < valid_vocab; c += blockDim.x) acc = max_sum_add(acc, x[c]);
    acc = block_max_sum(acc);
    if (threadIdx.x == 0) row_max[row] = acc.max;
  }
}

// sums[row] = sum_c exp(x_c - max[row]); sums[rows + row] = x[target - vocab_start] if in this shard.
__global__ void softmax_xent_partial_kernel(float* sums, const float* logits, const int32_t* targets,
                                            const float* max, int64_t rows, int64_t padded_vocab,
                                            int64_t valid_vocab, int64_t vocab_start) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + row * padded_vocab;
    const float mx = max[row];
    MaxSum acc{mx, 0.0f};
    for (int64_t c = threadIdx.x; c < valid_vocab; c += blockDim.x) acc.sum += expf(x[c] - mx);
    acc = block_max_sum(acc);
    if (threadIdx.x == 0) {
      const int64_t t = targets[row] - vocab_start;
      sums[row] = acc.sum;
      sums[rows + row] = targets[row] >= 0 && t >= 0 && t < valid_vocab ? x[t] : 0.0f;
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
  check_targets(targets, rows, valid_vocab, "softmax_xent_forward");  // last: see check_targets
}

void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* targets, const float* lse,
                           int64_t rows, int64_t padded_vocab, int64_t valid_vocab, float scale,
                           int64_t vocab_start) {
  if (rows <= 0 || padded_vocab <= 0) return;
  launch("softmax_xent_backward", softmax_xent_backward_kernel, dim3(row_grid(rows)), dim3(kThreads), 0, dlogits,
         logits, targets, lse, rows, padded_vocab, valid_vocab, scale, vocab_start);
  finish("softmax_xent_backward");
}

void softmax_xent_row_max(float* row_max, const float* logits, int64_t rows, int64_t padded_vocab,
                          int64_t valid_vocab) {
  if (rows <= 0) return;
  launch("softmax_xent_row_max", softmax_xent_row_max_kernel, dim3(row_grid(rows)), dim3(kThreads), 0, row_max,
         logits, rows, padded_vocab, valid_vocab);
  finish("softmax_xent_row_max");
}

void softmax_xent_partial(float* sums, const float* logits, const int32_t* targets, const float* max, int64_t rows,
                          int64_t padded_vocab, int64_t valid_vocab, int64_t vocab_start, int64_t vocab) {
  if (rows <= 0) return;
  launch("softmax_xent_partial", softmax_xent_partial_kernel, dim3(row_grid(rows)), dim3(kThreads), 0, sums, logits,
         targets, max, rows, padded_vocab, valid_vocab, vocab_start);
  finish("softmax_xent_partial");
  check_targets(targets, rows, vocab, "softmax_xent_partial");
}

}  // namespace tessera::kernels::cuda
