// Token + position embedding on the CPU: forward gathers rows; backward scatters them without
// atomics (each thread owns a range of vocabulary rows), for a whole or vocab-sharded table.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread does it all
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const uint16_t* wte_bits,
                       const float* wpe, int64_t batch, int64_t seq, int64_t vocab_rows, int64_t channels,
                       int64_t vocab_start) {
  const int64_t n = batch * seq;
#pragma omp parallel for schedule(static) if (n * channels > kParallelMin)
  for (int64_t bt = 0; bt < n; ++bt) {
    float* o = out + bt * channels;
    const int64_t row = static_cast<int64_t>(tokens[bt]) - vocab_start;
    const float* p = wpe ? wpe + (bt % seq) * channels : nullptr;
    if (row >= 0 && row < vocab_rows && wte_bits) {
      const uint16_t* e = wte_bits + row * channels;
      auto value = [e](int64_t c) { return std::bit_cast<float>(static_cast<uint32_t>(e[c]) << 16); };
      if (p) {
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c) o[c] = value(c) + p[c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c) o[c] = value(c);
      }
    } else if (row >= 0 && row < vocab_rows) {
      const float* e = wte + row * channels;
      if (p) {
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c) o[c] = e[c] + p[c];
      } else {
        std::memcpy(o, e, static_cast<size_t>(channels) * sizeof(float));
      }
    } else if (p) {
      std::memcpy(o, p, static_cast<size_t>(channels) * sizeof(float));
    } else {
      std::fill(o, o + channels, 0.0f);
    }
  }
}

// dwte: thread t owns rows [first_t, last_t) of the table, scans every token and adds the dout
// rows of the tokens that fall in its range (in token order, so the sums do not depend on the
// thread count). dwpe: parallel over positions, each summing over the batch.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t batch,
                        int64_t seq, int64_t vocab_rows, int64_t channels, int64_t vocab_start) {
  const int64_t n = batch * seq;
  const bool parallel = n * channels > kParallelMin;
#pragma omp parallel if (parallel)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t first = vocab_rows * t / nt, last = vocab_rows * (t + 1) / nt;
    for (int64_t bt = 0; bt < n; ++bt) {
      const int64_t row = static_cast<int64_t>(tokens[bt]) - vocab_start;
      if (row < first || row >= last) continue;
      float* d = dwte + row * channels;
      const float* g = dout + bt * channels;
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) d[c] += g[c];
    }
    if (dwpe) {
#pragma omp for schedule(static)
      for (int64_t s = 0; s < seq; ++s) {
        float* d = dwpe + s * channels;
        for (int64_t b = 0; b < batch; ++b) {
          const float* g = dout + (b * seq + s) * channels;
#pragma omp simd
          for (int64_t c = 0; c < channels; ++c) d[c] += g[c];
        }
      }
    }
  }
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(embedding_forward)
TESSERA_ISA_DECLARE(embedding_backward)

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const uint16_t* wte_bits, const float* wpe,
                       int64_t batch, int64_t seq, int64_t vocab_rows, int64_t channels, int64_t vocab_start) {
  TESSERA_ISA_CALL(embedding_forward, out, tokens, wte, wte_bits, wpe, batch, seq, vocab_rows, channels, vocab_start);
}
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t batch, int64_t seq,
                        int64_t vocab_rows, int64_t channels, int64_t vocab_start) {
  TESSERA_ISA_CALL(embedding_backward, dwte, dwpe, dout, tokens, batch, seq, vocab_rows, channels, vocab_start);
}
#endif

}  // namespace tessera::kernels::cpu
