// AdamW on the CPU: one fused pass over param, grad and both moments, in PyTorch's order, on the
// widest SIMD path this CPU runs (adamw_paths.h), OpenMP threads over chunks.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/adamw_paths.h"
#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {
namespace {

AdamWRangeFn range_fn(AdamWPath path) {
  switch (path) {
    case AdamWPath::avx512: return adamw_range_avx512;
    case AdamWPath::avx2: return adamw_range_avx2;
    case AdamWPath::scalar: break;
  }
  return adamw_range_scalar;
}

bool cpu_has(AdamWPath path) {
#if defined(__x86_64__) || defined(__i386__)
  switch (path) {
    case AdamWPath::avx512: return __builtin_cpu_supports("avx512f");
    case AdamWPath::avx2: return __builtin_cpu_supports("avx2");
    case AdamWPath::scalar: return true;
  }
#endif
  return path == AdamWPath::scalar;
}

}  // namespace

// As torch.optim.AdamW (single-tensor path), with g = grad * grad_scale:
//   p *= 1 - lr wd;  m += (1 - b1)(g - m);  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Bias corrections are computed in double, as PyTorch does on the host.
AdamWStep adamw_step_scalars(const ops::AdamWArgs& args) {
  const double t = static_cast<double>(args.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(args.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(args.beta2), t);
  return AdamWStep{static_cast<float>(1.0 - static_cast<double>(args.lr) * args.weight_decay),
                   static_cast<float>(1.0 - static_cast<double>(args.beta1)),
                   args.beta2,
                   static_cast<float>(1.0 - static_cast<double>(args.beta2)),
                   static_cast<float>(static_cast<double>(args.lr) / bc1),
                   static_cast<float>(std::sqrt(bc2)),
                   args.eps,
                   args.grad_scale};
}

const char* adamw_path_name(AdamWPath path) {
  switch (path) {
    case AdamWPath::avx512: return "avx512";
    case AdamWPath::avx2: return "avx2";
    case AdamWPath::scalar: break;
  }
  return "scalar";
}

bool adamw_path_supported(AdamWPath path) {
  const bool compiled = path == AdamWPath::scalar || (path == AdamWPath::avx2 && kAdamwAvx2Compiled) ||
                        (path == AdamWPath::avx512 && kAdamwAvx512Compiled);
  return compiled && cpu_has(path);
}

AdamWPath adamw_best_path() {
  static const AdamWPath best = adamw_path_supported(AdamWPath::avx512) ? AdamWPath::avx512
                                : adamw_path_supported(AdamWPath::avx2) ? AdamWPath::avx2
                                                                        : AdamWPath::scalar;
  return best;
}

void adamw_on_path(AdamWPath path, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                   const ops::AdamWArgs& args) {
  TESSERA_CHECK(adamw_path_supported(path), "adamw: the ", adamw_path_name(path),
                " path is not compiled in or not supported by this CPU");
  const AdamWStep s = adamw_step_scalars(args);
  const AdamWRangeFn range = range_fn(path);
  // 64 KiB of each array per chunk: a multiple of every path's lane count, and enough work per
  // chunk that scheduling costs nothing.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t first = c * kChunk, count = std::min(n, first + kChunk) - first;
    range(param + first, grad + first, exp_avg + first, exp_avg_sq + first, count, s);
    // The chunk was just read, so zeroing it costs a write to the cache, not a pass over memory
    // (the buffer is the caller's mutable gradient; the kernels read it through const).
    if (args.zero_grad) std::fill_n(const_cast<float*>(grad) + first, count, 0.0f);
  }
}

void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
           const ops::AdamWArgs& args) {
  adamw_on_path(adamw_best_path(), param, grad, exp_avg, exp_avg_sq, n, args);
}

}  // namespace tessera::kernels::cpu
