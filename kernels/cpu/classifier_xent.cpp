// A classifier's softmax cross-entropy with label smoothing on the CPU: forward (loss and lse per
// row) and backward (softmax - smoothed target, scaled), in place when dlogits aliases logits.
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
}

// Target q = (1 - eps) onehot(y) + eps / K. With m the row maximum and s = sum_j exp(x_j - m):
// lse = m + log s, loss = -sum_j q_j log p_j = log s - (1 - eps)(x_y - m) - eps mean_j (x_j - m)
// (every term relative to m, so large logits lose no precision). Label < 0: loss 0.
void classifier_xent_forward(float* losses, float* lse, const float* logits, const int32_t* labels, int64_t rows,
                             int64_t classes, float smoothing) {
  int64_t bad = -1;
  for (int64_t r = 0; r < rows && bad < 0; ++r)
    if (labels[r] >= classes) bad = r;
  if (bad >= 0)
    fail("classifier_xent_forward: label ", labels[bad], " at row ", bad, " is not below the class count ", classes);
  const float inv_classes = 1.0f / static_cast<float>(classes);
#pragma omp parallel for schedule(static) if (rows * classes > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * classes;
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < classes; ++j) mx = x[j] > mx ? x[j] : mx;
    float sum = 0.0f, centred = 0.0f;
#pragma omp simd reduction(+ : sum, centred)
    for (int64_t j = 0; j < classes; ++j) {
      sum += simd_exp(x[j] - mx);
      centred += x[j] - mx;
    }
    const float log_sum = std::log(sum);
    lse[r] = mx + log_sum;
    losses[r] = labels[r] >= 0
                    ? log_sum - (1.0f - smoothing) * (x[labels[r]] - mx) - smoothing * (centred * inv_classes)
                    : 0.0f;
  }
}

// dlogits[j] = (exp(x_j - lse) - eps / K - (1 - eps) [j == y]) * scale; ignored rows 0. Row by
// row, each element read before it is written: dlogits may alias logits.
void classifier_xent_backward(float* dlogits, const float* logits, const int32_t* labels, const float* lse,
                              int64_t rows, int64_t classes, float smoothing, float scale) {
  const float uniform = smoothing / static_cast<float>(classes), hit = 1.0f - smoothing + uniform;
#pragma omp parallel for schedule(static) if (rows * classes > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * classes;
    float* dx = dlogits + r * classes;
    const int64_t y = labels[r];
    if (y < 0) {
      std::fill(dx, dx + classes, 0.0f);
      continue;
    }
    const float row_lse = lse[r];
#pragma omp simd
    for (int64_t j = 0; j < classes; ++j) dx[j] = (simd_exp(x[j] - row_lse) - (j == y ? hit : uniform)) * scale;
  }
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(classifier_xent_forward)
TESSERA_ISA_DECLARE(classifier_xent_backward)

void classifier_xent_forward(float* losses, float* lse, const float* logits, const int32_t* labels, int64_t rows,
                             int64_t classes, float smoothing) {
  TESSERA_ISA_CALL(classifier_xent_forward, losses, lse, logits, labels, rows, classes, smoothing);
}
void classifier_xent_backward(float* dlogits, const float* logits, const int32_t* labels, const float* lse,
                              int64_t rows, int64_t classes, float smoothing, float scale) {
  TESSERA_ISA_CALL(classifier_xent_backward, dlogits, logits, labels, lse, rows, classes, smoothing, scale);
}
#endif

}  // namespace tessera::kernels::cpu
