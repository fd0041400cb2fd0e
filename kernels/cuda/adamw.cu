// CUDA AdamW of kernels/cuda/cuda_ops.h: one fused pass updating exp_avg, exp_avg_sq and param in
// place, as torch.optim.AdamW and the CPU twin (same operations, same order); adamw_spans updates
// every span of the flat buffers in one multi-tensor launch, optionally writing the updated
// parameters' bf16 bits.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

// The per-step scalars, computed on the host in double as PyTorch does.
struct AdamWStep {
  float decay;      // 1 - lr * weight_decay
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float b1_weight, b2, b2_weight, eps, grad_scale;
};

// g = grad * grad_scale; m += (1 - b1)(g - m); v = b2 v + (1 - b2) g^2;
// p = p * decay - step_size * m / (sqrt(v) / bc2_sqrt + eps). With zero_grad the gradient is
// cleared once read (the caller's mutable gradient, read through const elsewhere); bits (may be
// null) receives p's bf16 bits (nearest even).
__device__ __forceinline__ void adamw_element(float* __restrict__ param, float* __restrict__ grad,
                                              float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq,
                                              uint16_t* __restrict__ bits, int64_t i, const AdamWStep& s,
                                              bool zero_grad) {
  const float g = grad[i] * s.grad_scale;
  if (zero_grad) grad[i] = 0.0f;
  const float m = exp_avg[i] + s.b1_weight * (g - exp_avg[i]);
  const float v = exp_avg_sq[i] * s.b2 + s.b2_weight * g * g;
  const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
  const float p = param[i] * s.decay - s.step_size * m / denom;
  param[i] = p;
  if (bits) bits[i] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
  exp_avg[i] = m;
  exp_avg_sq[i] = v;
}

__global__ void adamw_kernel(float* param, float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, AdamWStep s,
                             bool zero_grad) {
  for (int64_t i = global_thread(); i < n; i += global_stride())
    adamw_element(param, grad, exp_avg, exp_avg_sq, nullptr, i, s, zero_grad);
}

// A piece of one span: [begin, end) of the flat buffers and which scalars apply (0: no decay).
struct Chunk {
  int64_t begin, end;
  int32_t decay;
};

// Multi-tensor form: block b takes chunks b, b + gridDim.x, ...; its threads stride over each.
__global__ void adamw_chunks_kernel(float* param, float* grad, float* exp_avg, float* exp_avg_sq, uint16_t* bits,
                                    const Chunk* chunks, int64_t count, AdamWStep no_decay, AdamWStep decay,
                                    bool zero_grad) {
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x) {
    const Chunk chunk = chunks[c];
    const AdamWStep& s = chunk.decay ? decay : no_decay;
    for (int64_t i = chunk.begin + threadIdx.x; i < chunk.end; i += blockDim.x)
      adamw_element(param, grad, exp_avg, exp_avg_sq, bits, i, s, zero_grad);
  }
}

// The step's scalars from the hyperparameters, in double as PyTorch computes them on the host.
AdamWStep step_scalars(const ops::AdamWArgs& args) {
  TESSERA_CHECK(args.step >= 1, "adamw: step must be >= 1 (1-based), got ", args.step);
  const double t = static_cast<double>(args.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(args.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(args.beta2), t);
  return AdamWStep{static_cast<float>(1.0 - static_cast<double>(args.lr) * args.weight_decay),
                   static_cast<float>(static_cast<double>(args.lr) / bc1),
                   static_cast<float>(std::sqrt(bc2)),
                   1.0f - args.beta1,
                   args.beta2,
                   1.0f - args.beta2,
                   args.eps,
                   args.grad_scale};
}

bool operator==(const Chunk& x, const Chunk& y) { return x.begin == y.begin && x.end == y.end && x.decay == y.decay; }

// The chunk tables already on a device, one per device and distinct set of spans (an optimizer's
// spans stay the same from step to step, so each is copied once). Kept for the process; a handful.
struct DeviceChunks {
  int device;
  std::vector<Chunk> host;
  Chunk* table;
};

const Chunk* device_chunks(const std::vector<Chunk>& chunks) {
  static std::mutex mutex;
  static std::vector<DeviceChunks> tables;
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  for (const DeviceChunks& t : tables)
    if (t.device == device && t.host == chunks) return t.table;
  DeviceChunks t{device, chunks, nullptr};
  const size_t bytes = chunks.size() * sizeof(Chunk);
  TESSERA_CUDA_CHECK(cudaMalloc(&t.table, bytes));
  TESSERA_CUDA_CHECK(cudaMemcpy(t.table, chunks.data(), bytes, cudaMemcpyHostToDevice));
  tables.push_back(std::move(t));
  return tables.back().table;
}

}  // namespace

void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
           const ops::AdamWArgs& args) {
  if (n <= 0) return;
  launch("adamw", adamw_kernel, dim3(grid_for(n, 256)), dim3(256), 0, param, const_cast<float*>(grad), exp_avg,
         exp_avg_sq, n, step_scalars(args), args.zero_grad);
  finish("adamw");
}

// Every span cut into chunks of at most kChunk elements, one launch for all of them (a GPT's hundred
// parameter tensors cost one kernel, not a hundred).
void adamw_spans(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const ops::AdamWSpan* spans,
                 int64_t count, const ops::AdamWArgs& args, uint16_t* param_bits) {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<Chunk> chunks;
  for (int64_t i = 0; i < count; ++i)
    for (int64_t at = spans[i].begin; at < spans[i].end; at += kChunk)
      chunks.push_back({at, std::min(at + kChunk, spans[i].end), spans[i].decay ? 1 : 0});
  if (chunks.empty()) return;
  ops::AdamWArgs no_decay = args;
  no_decay.weight_decay = 0.0f;
  const int64_t n = static_cast<int64_t>(chunks.size());
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n, 1 << 16));
  launch("adamw_spans", adamw_chunks_kernel, dim3(blocks), dim3(256), 0, param, const_cast<float*>(grad), exp_avg,
         exp_avg_sq, param_bits, device_chunks(chunks), n, step_scalars(no_decay), step_scalars(args),
         args.zero_grad);
  finish("adamw_spans");
}

}  // namespace tessera::kernels::cuda
