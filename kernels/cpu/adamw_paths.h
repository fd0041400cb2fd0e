// The CPU AdamW's code paths (scalar, AVX2, AVX-512), each in its own translation unit compiled for
// its instruction set, and the choice among them: the best one this CPU runs, found once.
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels::cpu {

// The scalars of one step, computed in double and rounded to float once.
struct AdamWStep {
  float decay;      // 1 - lr * weight_decay
  float b1_weight;  // 1 - beta1
  float b2;         // beta2
  float b2_weight;  // 1 - beta2
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float eps;
  float grad_scale;
};
AdamWStep adamw_step_scalars(const ops::AdamWArgs& args);

// n elements from the given pointers, one thread. Every path does the same float operations in the
// same order, with no fused multiply-add, so all of them give bit-identical results:
//   g = grad * grad_scale; m += b1_weight * (g - m); v = v * b2 + (b2_weight * g) * g;
//   p = p * decay - (step_size * m) / (sqrt(v) / bc2_sqrt + eps)
using AdamWRangeFn = void (*)(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                              const AdamWStep& s);
void adamw_range_scalar(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                        const AdamWStep& s);
void adamw_range_avx2(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                      const AdamWStep& s);
void adamw_range_avx512(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                        const AdamWStep& s);
// Whether adamw_avx2.cpp / adamw_avx512.cpp were compiled with their instruction sets (x86 only).
extern const bool kAdamwAvx2Compiled;
extern const bool kAdamwAvx512Compiled;

enum class AdamWPath { scalar, avx2, avx512 };
const char* adamw_path_name(AdamWPath path);
// Compiled in and supported by this CPU.
bool adamw_path_supported(AdamWPath path);
// The widest supported path, chosen on the first call.
AdamWPath adamw_best_path();
// The whole update on a given (supported) path, OpenMP threads over chunks; adamw() uses the best.
void adamw_on_path(AdamWPath path, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                   const ops::AdamWArgs& args);
// The same over spans of the buffers (ops::adamw_spans), all in one parallel region; param_bits
// (may be null) receives the updated spans' bf16 bits.
void adamw_spans_on_path(AdamWPath path, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                         const ops::AdamWSpan* spans, int64_t count, const ops::AdamWArgs& args,
                         uint16_t* param_bits = nullptr);

}  // namespace tessera::kernels::cpu
