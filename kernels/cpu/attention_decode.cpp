// attention_decode_forward (op_list.h): one query row's attention over a slot's cached keys and
// values, read row by row as they lie (key then value per position), in tiles of kTile positions
// with a running max and sum (the online softmax of attention_block.cpp), so no scratch is needed.
// Vectorised over head_dim by the compiler (omp simd), compiled once per instruction set (isa.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_math.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)
namespace {
constexpr int64_t kTile = 64;   // positions scored before their values are added
constexpr int64_t kMaxDim = 256;  // head_dim held on the stack (q scaled, the output's sums)
}  // namespace

void attention_decode_forward(float* out, const float* q, const float* kv, int64_t n, int64_t head_dim) {
  const int64_t dim = head_dim, stride = 2 * dim;
  TESSERA_CHECK(dim > 0 && dim <= kMaxDim && n > 0, "attention_decode_forward: head_dim ", dim, " (1 to ", kMaxDim,
                ") and ", n, " positions (at least 1)");
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  float qs[kMaxDim], acc[kMaxDim], s[kTile];
#pragma omp simd
  for (int64_t d = 0; d < dim; ++d) {
    qs[d] = q[d] * scale;
    acc[d] = 0.0f;
  }
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  for (int64_t j0 = 0; j0 < n; j0 += kTile) {
    const int64_t nk = std::min(kTile, n - j0);
    float tile_max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < nk; ++j) {
      const float* k = kv + (j0 + j) * stride;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < dim; ++d) dot += qs[d] * k[d];
      s[j] = dot;
      tile_max = std::max(tile_max, dot);
    }
    const float m_new = std::max(m, tile_max);
    const float correction = simd_exp(m - m_new);  // 0 on the first tile (m = -inf)
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < nk; ++j) {
      s[j] = simd_exp(s[j] - m_new);
      sum += s[j];
    }
    l = l * correction + sum;
    m = m_new;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) acc[d] *= correction;
    for (int64_t j = 0; j < nk; ++j) {
      const float* v = kv + (j0 + j) * stride + dim;
      const float w = s[j];
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) acc[d] += w * v[d];
    }
  }
  const float inv = 1.0f / l;
#pragma omp simd
  for (int64_t d = 0; d < dim; ++d) out[d] = acc[d] * inv;
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(attention_decode_forward)

void attention_decode_forward(float* out, const float* q, const float* kv, int64_t n, int64_t head_dim) {
  TESSERA_ISA_CALL(attention_decode_forward, out, q, kv, n, head_dim);
}
#endif

}  // namespace tessera::kernels::cpu
