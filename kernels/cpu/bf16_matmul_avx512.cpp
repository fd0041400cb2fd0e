// The products by bf16 weights on AVX-512 BF16 (bf16_matmul_paths.h): tiles of MR activation rows
// by NR weight rows over the whole K, 32 columns a step (masked at the end), each step one
// vdpbf16ps per (activation row, weight row): 16 lanes each adding the exact products of a pair of
// columns to an f32 accumulator; the 16 lanes summed at the end. A weight row's 64 bytes are
// loaded once per step for all MR activation rows, an activation row's once for all NR weight
// rows; the tile of weight rows stays in L1 while the activation rows pass it. Compiled with
// -mavx512f/bw/vl/dq/bf16 (kernels/CMakeLists.txt) and chosen only on CPUs that run them. No std::
// templates here (see adamw_avx512.cpp).
#include "kernels/cpu/bf16_matmul_paths.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512BF16__)
#include <immintrin.h>

#include "kernels/cpu/avx512_lane_sums.h"
#endif

namespace tessera::kernels::cpu {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512BF16__)
const bool kBf16Avx512Compiled = true;

namespace {

// The software prefetch distance, at most (bytes; tile() explains).
constexpr int64_t kAheadMax = 8192;

// Tags for a step of 32 whole columns (plain loads) or the masked tail.
struct Full {
  static constexpr bool value = true;
};
struct Part {
  static constexpr bool value = false;
};

// 32 bf16 values from p (lanes in `on`; the others read as 0, which adds nothing).
template <bool Full>
inline __m512bh load32(const uint16_t* p, __mmask32 on) {
  const __m512i v = Full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(on, p);
  return (__m512bh)v;
}

// y[i * ldy + n + r] for i < MR, r < NR: activation rows x + i * cols times weight rows n + r. The
// lanes are summed the same way for every MR, so a row's result does not depend on the rows beside it.
template <int MR, int NR>
void tile(float* y, int64_t ldy, const uint16_t* x, const uint16_t* w, int64_t cols, int64_t n) {
  const uint16_t* wr[NR];
  for (int r = 0; r < NR; ++r) wr[r] = w + (n + r) * cols;
  const uint16_t* xs[MR];
  for (int i = 0; i < MR; ++i) xs[i] = x + i * cols;
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  // The tile's NR rows are contiguous bytes read NR at a time: each step asks for the lines as far
  // ahead of that linear position as the next tile's (at most kAheadMax), so a GEMV's stream from
  // memory is requested before it is read (a batch's later activation rows find the lines in L1).
  const int64_t ahead = NR * cols < kAheadMax / 2 ? NR * cols * 2 : kAheadMax;
  const char* stream = reinterpret_cast<const char*>(wr[0]) + ahead;
  auto step = [&](auto full, int64_t k, __mmask32 on) {
    constexpr bool kFull = decltype(full)::value;
    if constexpr (NR > 1)
      for (int line = 0; line < NR * 64; line += 64) _mm_prefetch(stream + NR * 2 * k + line, _MM_HINT_T0);
    __m512bh wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = load32<kFull>(wr[r] + k, on);
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = load32<kFull>(xs[i] + k, on);
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv, wv[r]);
    }
  };
  int64_t k = 0;
  for (; k + 32 <= cols; k += 32) step(Full{}, k, ~__mmask32(0));
  if (k < cols) step(Part{}, k, static_cast<__mmask32>((1u << (cols - k)) - 1u));
  store_lane_sums<MR, NR>(y + n, ldy, acc);
}

// MR activation rows against weight rows [n0, n1): 4 at a time, then one by one.
template <int MR>
void rows_of(float* y, int64_t ldy, const uint16_t* x, const uint16_t* w, int64_t cols, int64_t n, int64_t count) {
  if (count == 4)
    tile<MR, 4>(y, ldy, x, w, cols, n);
  else
    for (int64_t r = 0; r < count; ++r) tile<MR, 1>(y, ldy, x, w, cols, n + r);
}

}  // namespace

void bf16_matmul_rows_avx512(float* y, const uint16_t* xb, int64_t m, const uint16_t* w, int64_t rows, int64_t cols,
                             int64_t n0, int64_t n1) {
  // Weight tiles outside, activation rows inside: a tile's rows (4 x cols x 2 bytes) are read
  // from memory once and from L1 by every activation row.
  for (int64_t n = n0; n < n1; n += 4) {
    const int64_t count = n1 - n < 4 ? n1 - n : 4;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) rows_of<4>(y + i * rows, rows, xb + i * cols, w, cols, n, count);
    switch (m - i) {
      case 3: rows_of<3>(y + i * rows, rows, xb + i * cols, w, cols, n, count); break;
      case 2: rows_of<2>(y + i * rows, rows, xb + i * cols, w, cols, n, count); break;
      case 1: rows_of<1>(y + i * rows, rows, xb + i * cols, w, cols, n, count); break;
      default: break;
    }
  }
}

#else  // not an x86 compiler given AVX512-BF16: never chosen

const bool kBf16Avx512Compiled = false;

void bf16_matmul_rows_avx512(float* y, const uint16_t* xb, int64_t m, const uint16_t* w, int64_t rows, int64_t cols,
                             int64_t n0, int64_t n1) {
  bf16_matmul_rows_scalar(y, xb, m, w, rows, cols, n0, n1);
}

#endif

}  // namespace tessera::kernels::cpu
