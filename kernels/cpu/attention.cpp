// Causal self-attention over one packed qkv [B, T, 3, H, D] on the CPU: the block kernels of
// attention_block.cpp (flash-attention style, no T x T matrix) with the queries, keys and values
// all read from the same rows, the diagonal block being the whole sequence.
#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {

namespace {
AttentionBlockShape self_attention(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  const int64_t c3 = 3 * heads * head_dim;
  return {batch, seq, seq, heads, head_dim, c3, c3, true};
}
}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                       int64_t head_dim) {
  const int64_t c = heads * head_dim;
  attention_block_forward(out, lse, qkv, qkv + c, qkv + 2 * c, self_attention(batch, seq, heads, head_dim),
                          /*merge=*/false);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  const int64_t c = heads * head_dim, rows = batch * seq;
#pragma omp parallel for schedule(static) if (rows * c > (1 << 16))
  for (int64_t t = 0; t < rows; ++t) std::fill(dqkv + t * 3 * c, dqkv + (t + 1) * 3 * c, 0.0f);
  attention_block_backward(dqkv, dqkv + c, dqkv + 2 * c, dout, qkv, qkv + c, qkv + 2 * c, out, lse,
                           self_attention(batch, seq, heads, head_dim));
}

}  // namespace tessera::kernels::cpu
