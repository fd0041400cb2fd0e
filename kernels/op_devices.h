// What the one list of raw kernels (kernels/op_list.h) turns into: the types its parameters
// share, each op's devices as a constant (op_devices::gemm == OpDevices::cpu_and_cuda) that the
// dispatch in kernels/ops.cpp checks at compile time, and the macros with which kernels/cpu/cpu_ops.h
// and kernels/cuda/cuda_ops.h declare the ops of their device.
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels {

// Which devices have a kernel of an op: the third field of each TESSERA_OP in op_list.h.
enum class OpDevices { cpu_and_cuda, cpu_only, cuda_only };

constexpr bool on_cpu(OpDevices d) { return d != OpDevices::cuda_only; }
constexpr bool on_cuda(OpDevices d) { return d != OpDevices::cpu_only; }

// Attention of a query block against a key/value block (attention_block_forward/backward), heads
// inside each row: query row t of batch b at q + (b * tq + t) * q_stride, its head h at
// + h * head_dim; k, v (and dk, dv) rows likewise with kv_stride; dq with q_stride; out, dout
// [B, Tq, H, D] dense; lse [B, H, Tq]. Semantics (causal, merge, accumulation) as
// ops::attention_block_forward/backward.
// Document masking (variable-length attention, as flash-attention's varlen kernels): with
// q_segments and kv_segments (host int32; nullptr: no mask) query row t of batch b, segment
// q_segments[b * tq + t], sees key row j only where kv_segments[b * tk + j] is the same segment
// (and, causal, j <= t). Key tiles whose segments cannot match a query group's are skipped. The
// CPU kernels only: ops.cpp refuses segments on any other device.
struct AttentionBlockShape {
  int64_t batch, tq, tk, heads, head_dim, q_stride, kv_stride;
  bool causal;
  const int32_t* q_segments = nullptr;
  const int32_t* kv_segments = nullptr;
};
// A weight matrix W [rows, cols] (y = x W^T: rows outputs, cols the reduction) quantised in groups
// of `group` consecutive columns of a row (docs/checkpoints.md, "Quantised checkpoints"); `ngroups`
// = cols / group per row:
//   bits 8: q int8 [rows, cols] (as bytes), w = q * scale, scales f32 [rows, ngroups];
//   bits 4: q [rows, cols / 2] bytes, column 2j in the low nibble of byte j and 2j + 1 in the high
//           one, w = (q - zero) * scale, zeros uint8 [rows, ngroups] in [0, 15].
// The dequantised weight is that product in f32, so every kernel computes with the same weights.
struct QuantMatrixView {
  const uint8_t* q = nullptr;
  const float* scales = nullptr;
  const uint8_t* zeros = nullptr;  // bits 4 only
  int64_t rows = 0, cols = 0, group = 0;
  int bits = 8;
};
using ops::AdamWArgs;
using ops::AdamWSpan;
using ops::RopeShape;

// op_devices::<name>: the devices op_list.h declares for the op <name>.
namespace op_devices {
#define TESSERA_OP(file, name, devices, ret, params) inline constexpr OpDevices name = OpDevices::devices;
#include "kernels/op_list.h"
#undef TESSERA_OP
}  // namespace op_devices

}  // namespace tessera::kernels

// TESSERA_OP_ON_CPU_<devices>(declaration) keeps the declaration for an op with a CPU kernel and
// drops it otherwise; TESSERA_OP_ON_CUDA_<devices> likewise for CUDA.
#define TESSERA_OP_ON_CPU_cpu_and_cuda(...) __VA_ARGS__
#define TESSERA_OP_ON_CPU_cpu_only(...) __VA_ARGS__
#define TESSERA_OP_ON_CPU_cuda_only(...)
#define TESSERA_OP_ON_CUDA_cpu_and_cuda(...) __VA_ARGS__
#define TESSERA_OP_ON_CUDA_cpu_only(...)
#define TESSERA_OP_ON_CUDA_cuda_only(...) __VA_ARGS__
