// CUDA token + position embedding of kernels/cuda/cuda_ops.h; backward without atomics:
// tokens stably sorted by row (cub), each row's gradients added in token order (deterministic).
#include <cub/device/device_radix_sort.cuh>

#include "core/error.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// out[b, t, c] = wte[token - vocab_start, c] (0 outside the shard) + wpe[t, c] (when given).
// wte_bits, when given, replaces wte: the table's bf16 copy.
__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte, const uint16_t* wte_bits,
                                         const float* wpe, int64_t positions, int64_t seq, int64_t vocab_rows,
                                         int64_t channels, int64_t vocab_start) {
  const int64_t n = positions * channels;
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    const int64_t pos = i / channels, c = i % channels;
    const int64_t row = static_cast<int64_t>(tokens[pos]) - vocab_start;
    float v = 0.0f;
    if (row >= 0 && row < vocab_rows)
      v = wte_bits ? __uint_as_float(static_cast<uint32_t>(wte_bits[row * channels + c]) << 16) : wte[row * channels + c];
    if (wpe) v += wpe[(pos % seq) * channels + c];
    out[i] = v;
  }
}

// dwpe[t, c] += sum over b of dout[b, t, c], b in order.
__global__ void embedding_dwpe_kernel(float* dwpe, const float* dout, int64_t batch, int64_t seq, int64_t channels) {
  const int64_t n = seq * channels;
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    float acc = dwpe[i];
    for (int64_t b = 0; b < batch; ++b) acc += dout[b * n + i];
    dwpe[i] = acc;
  }
}

// key[pos] = the token's row in this shard, or vocab_rows (sorted last, skipped) outside it.
__global__ void embedding_keys_kernel(uint32_t* keys, uint32_t* positions_out, const int32_t* tokens,
                                      int64_t positions, int64_t vocab_rows, int64_t vocab_start) {
  for (int64_t i = global_thread(); i < positions; i += global_stride()) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
    keys[i] = static_cast<uint32_t>((row >= 0 && row < vocab_rows) ? row : vocab_rows);
    positions_out[i] = static_cast<uint32_t>(i);
  }
}

// One block per sorted position; the block at the start of a run of equal rows adds the run's
// dout rows, in position order, to that row of dwte.
__global__ void embedding_dwte_kernel(float* dwte, const float* dout, const uint32_t* sorted_rows,
                                      const uint32_t* sorted_positions, int64_t positions, int64_t vocab_rows,
                                      int64_t channels) {
  for (int64_t start = blockIdx.x; start < positions; start += gridDim.x) {
    const uint32_t row = sorted_rows[start];
    if (row >= vocab_rows || (start > 0 && sorted_rows[start - 1] == row)) continue;
    int64_t end = start + 1;
    while (end < positions && sorted_rows[end] == row) ++end;
    float* dst = dwte + static_cast<int64_t>(row) * channels;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      float acc = dst[c];
      for (int64_t k = start; k < end; ++k) acc += dout[static_cast<int64_t>(sorted_positions[k]) * channels + c];
      dst[c] = acc;
    }
  }
}

int significant_bits(uint64_t max_value) {
  int bits = 1;
  while (bits < 32 && (max_value >> bits) != 0) ++bits;
  return bits;
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const uint16_t* wte_bits,
                       const float* wpe, int64_t batch, int64_t seq, int64_t vocab_rows, int64_t channels,
                       int64_t vocab_start) {
  const int64_t positions = batch * seq;
  if (positions <= 0 || channels <= 0) return;
  launch("embedding_forward", embedding_forward_kernel, dim3(grid_for(positions * channels, kThreads)),
         dim3(kThreads), 0, out, tokens, wte, wte_bits, wpe, positions, seq, vocab_rows, channels, vocab_start);
  finish("embedding_forward");
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t batch,
                        int64_t seq, int64_t vocab_rows, int64_t channels, int64_t vocab_start) {
  const int64_t positions = batch * seq;
  if (positions <= 0 || channels <= 0) return;
  TESSERA_CHECK(positions <= INT32_MAX && vocab_rows < UINT32_MAX, "embedding_backward: ", positions,
                " positions or ", vocab_rows, " vocabulary rows exceed 32-bit sort keys");
  if (dwpe)
    launch("embedding_backward", embedding_dwpe_kernel, dim3(grid_for(seq * channels, kThreads)), dim3(kThreads), 0,
           dwpe, dout, batch, seq, channels);

  const int n = static_cast<int>(positions);
  const size_t words = static_cast<size_t>(positions) * sizeof(uint32_t);
  Scratch keys(words), sorted_keys(words), values(words), sorted_values(words);
  launch("embedding_backward", embedding_keys_kernel, dim3(grid_for(positions, kThreads)), dim3(kThreads), 0,
         keys.as<uint32_t>(), values.as<uint32_t>(), tokens, positions, vocab_rows, vocab_start);
  const int end_bit = significant_bits(static_cast<uint64_t>(vocab_rows));
  size_t temp_bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys.as<const uint32_t>(),
                                                     sorted_keys.as<uint32_t>(), values.as<const uint32_t>(),
                                                     sorted_values.as<uint32_t>(), n, 0, end_bit, op_stream()));
  temp_bytes = temp_bytes > 16 ? temp_bytes : 16;  // a null temp pointer would mean 'query size'
  Scratch temp(temp_bytes);
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, keys.as<const uint32_t>(),
                                                     sorted_keys.as<uint32_t>(), values.as<const uint32_t>(),
                                                     sorted_values.as<uint32_t>(), n, 0, end_bit, op_stream()));
  const unsigned blocks = static_cast<unsigned>(positions < (1 << 30) ? positions : (1 << 30));
  launch("embedding_backward", embedding_dwte_kernel, dim3(blocks), dim3(128), 0, dwte, dout,
         sorted_keys.as<const uint32_t>(), sorted_values.as<const uint32_t>(), positions, vocab_rows, channels);
  finish("embedding_backward");
}

}  // namespace tessera::kernels::cuda
