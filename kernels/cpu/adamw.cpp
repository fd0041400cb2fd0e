// AdamW on the CPU: one fused pass over param, grad and both moments, in PyTorch's order, on the
// widest SIMD path this CPU runs (adamw_paths.h), OpenMP threads over chunks; optionally writing
// the updated parameters' bf16 bits as it goes.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/adamw_paths.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

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

// Never wider than the other kernels' copy (isa.h), so TESSERA_CPU_ISA=base runs baseline code only
// (a TESSERA_NATIVE build has one copy of those: no limit).
AdamWPath adamw_best_path() {
  const Isa isa = isa_copies() ? kernel_isa() : Isa::avx512;
  static const AdamWPath best = isa == Isa::avx512 && adamw_path_supported(AdamWPath::avx512) ? AdamWPath::avx512
                                : isa != Isa::base && adamw_path_supported(AdamWPath::avx2)  ? AdamWPath::avx2
                                                                                             : AdamWPath::scalar;
  return best;
}

void adamw_spans_on_path(AdamWPath path, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                         const ops::AdamWSpan* spans, int64_t count, const ops::AdamWArgs& args,
                         uint16_t* param_bits) {
  TESSERA_CHECK(adamw_path_supported(path), "adamw: the ", adamw_path_name(path),
                " path is not compiled in or not supported by this CPU");
  ops::AdamWArgs no_decay = args;
  no_decay.weight_decay = 0.0f;
  const AdamWStep scalars[2] = {adamw_step_scalars(no_decay), adamw_step_scalars(args)};
  const AdamWRangeFn range = range_fn(path);
  // 64 KiB of each array per chunk: a multiple of every path's lane count, and enough work per
  // chunk that scheduling costs nothing. Each span is cut into chunks from its own start, so the
  // results do not depend on which spans share the pass; first_chunk[i] numbers span i's first.
  constexpr int64_t kChunk = 1 << 14;
  std::vector<int64_t> first_chunk(static_cast<size_t>(count) + 1, 0);
  for (int64_t i = 0; i < count; ++i)
    first_chunk[i + 1] = first_chunk[i] + (spans[i].end - spans[i].begin + kChunk - 1) / kChunk;
  const int64_t chunks = first_chunk[count];
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = std::upper_bound(first_chunk.begin(), first_chunk.end(), c) - first_chunk.begin() - 1;
    const ops::AdamWSpan& span = spans[i];
    const int64_t first = span.begin + (c - first_chunk[i]) * kChunk, n = std::min(span.end, first + kChunk) - first;
    range(param + first, grad + first, exp_avg + first, exp_avg_sq + first, n, scalars[span.decay ? 1 : 0]);
    // The chunk was just read, so zeroing it costs a write to the cache, not a pass over memory
    // (the buffer is the caller's mutable gradient; the kernels read it through const).
    if (args.zero_grad) std::fill_n(const_cast<float*>(grad) + first, n, 0.0f);
    // Likewise the updated values' bf16 bits, read back from the cache (cast.cpp's copy for this
    // CPU, isa.h: one chunk of it, on this thread).
    if (param_bits) f32_to_bf16(param_bits + first, param + first, n);
  }
}

void adamw_on_path(AdamWPath path, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                   const ops::AdamWArgs& args) {
  const ops::AdamWSpan all{0, n, true};
  adamw_spans_on_path(path, param, grad, exp_avg, exp_avg_sq, &all, 1, args);
}

void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
           const ops::AdamWArgs& args) {
  adamw_on_path(adamw_best_path(), param, grad, exp_avg, exp_avg_sq, n, args);
}

void adamw_spans(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const ops::AdamWSpan* spans,
                 int64_t count, const ops::AdamWArgs& args, uint16_t* param_bits) {
  adamw_spans_on_path(adamw_best_path(), param, grad, exp_avg, exp_avg_sq, spans, count, args, param_bits);
}

}  // namespace tessera::kernels::cpu
