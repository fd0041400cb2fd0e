// Softmax cross-entropy on the CPU over a padded vocabulary: forward (loss and lse per row) and
// backward (softmax - one-hot, scaled), in place when dlogits aliases logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_math.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread does it all

void check_targets(const int32_t* targets, int64_t rows, int64_t valid_vocab, const char* op) {
  int64_t bad = -1;
  for (int64_t r = 0; r < rows && bad < 0; ++r)
    if (targets[r] >= valid_vocab) bad = r;
  if (bad >= 0) fail(op, ": target ", targets[bad], " at row ", bad, " is not below the vocabulary size ", valid_vocab);
}
}  // namespace

// lse = max + log(sum_j exp(x_j - max)) over j < valid_vocab; loss = lse - x[target], 0 if ignored.
void softmax_xent_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t rows,
                          int64_t padded_vocab, int64_t valid_vocab) {
  check_targets(targets, rows, valid_vocab, "softmax_xent_forward");
#pragma omp parallel for schedule(static) if (rows * valid_vocab > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * padded_vocab;
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < valid_vocab; ++j) mx = x[j] > mx ? x[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < valid_vocab; ++j) sum += simd_exp(x[j] - mx);
    const float row_lse = mx + std::log(sum);
    lse[r] = row_lse;
    losses[r] = targets[r] >= 0 ? row_lse - x[targets[r]] : 0.0f;
  }
}

// dlogits[j] = (exp(x_j - lse) - [j == target - vocab_start]) * scale for j < valid_vocab; padding
// columns and ignored rows get 0. Each element is read before it is written, so dlogits may alias
// logits.
void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* targets, const float* lse,
                           int64_t rows, int64_t padded_vocab, int64_t valid_vocab, float scale,
                           int64_t vocab_start) {
#pragma omp parallel for schedule(static) if (rows * valid_vocab > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * padded_vocab;
    float* dx = dlogits + r * padded_vocab;
    if (targets[r] < 0) {
      std::fill(dx, dx + padded_vocab, 0.0f);
      continue;
    }
    const int64_t target = targets[r] - vocab_start;  // a column of this shard, or outside it
    const bool here = target >= 0 && target < valid_vocab;
    const float row_lse = lse[r];
    const float p_target = here ? simd_exp(x[target] - row_lse) : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < valid_vocab; ++j) dx[j] = simd_exp(x[j] - row_lse) * scale;
    if (here) dx[target] = (p_target - 1.0f) * scale;
    std::fill(dx + valid_vocab, dx + padded_vocab, 0.0f);
  }
}

void softmax_xent_row_max(float* row_max, const float* logits, int64_t rows, int64_t padded_vocab,
                          int64_t valid_vocab) {
#pragma omp parallel for schedule(static) if (rows * valid_vocab > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * padded_vocab;
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < valid_vocab; ++j) mx = x[j] > mx ? x[j] : mx;
    row_max[r] = mx;
  }
}

void softmax_xent_partial(float* sums, const float* logits, const int32_t* targets, const float* max, int64_t rows,
                          int64_t padded_vocab, int64_t valid_vocab, int64_t vocab_start, int64_t vocab) {
  check_targets(targets, rows, vocab, "softmax_xent_partial");
#pragma omp parallel for schedule(static) if (rows * valid_vocab > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * padded_vocab;
    const float mx = max[r];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < valid_vocab; ++j) sum += simd_exp(x[j] - mx);
    const int64_t target = targets[r] - vocab_start;
    sums[r] = sum;
    sums[rows + r] = targets[r] >= 0 && target >= 0 && target < valid_vocab ? x[target] : 0.0f;
  }
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(softmax_xent_forward)
TESSERA_ISA_DECLARE(softmax_xent_backward)
TESSERA_ISA_DECLARE(softmax_xent_row_max)
TESSERA_ISA_DECLARE(softmax_xent_partial)

void softmax_xent_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t rows,
                          int64_t padded_vocab, int64_t valid_vocab) {
  TESSERA_ISA_CALL(softmax_xent_forward, losses, lse, logits, targets, rows, padded_vocab, valid_vocab);
}
void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* targets, const float* lse, int64_t rows,
                           int64_t padded_vocab, int64_t valid_vocab, float scale, int64_t vocab_start) {
  TESSERA_ISA_CALL(softmax_xent_backward, dlogits, logits, targets, lse, rows, padded_vocab, valid_vocab, scale,
                   vocab_start);
}
void softmax_xent_row_max(float* row_max, const float* logits, int64_t rows, int64_t padded_vocab,
                          int64_t valid_vocab) {
  TESSERA_ISA_CALL(softmax_xent_row_max, row_max, logits, rows, padded_vocab, valid_vocab);
}
void softmax_xent_partial(float* sums, const float* logits, const int32_t* targets, const float* max, int64_t rows,
                          int64_t padded_vocab, int64_t valid_vocab, int64_t vocab_start, int64_t vocab) {
  TESSERA_ISA_CALL(softmax_xent_partial, sums, logits, targets, max, rows, padded_vocab, valid_vocab, vocab_start,
                   vocab);
}
#endif

}  // namespace tessera::kernels::cpu
