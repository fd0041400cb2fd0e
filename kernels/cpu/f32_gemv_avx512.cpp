// The f32 GEMV's AVX-512 path (f32_gemv_paths.h): tiles of 4 weight rows, 16 columns a step (masked
// at the row's end), one fused multiply-add per row and step into its f32 accumulator, the lanes
// summed at the end; the tile's rows are contiguous and streamed once from memory, each step asking
// for the lines a tile ahead of that linear position. Compiled with -mavx512f/bw/vl/dq
// (kernels/CMakeLists.txt) and chosen only on CPUs that run them. No std:: templates here (see
// adamw_avx512.cpp).
#include "kernels/cpu/f32_gemv_paths.h"

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>

#include "kernels/cpu/avx512_lane_sums.h"
#else
#include "core/error.h"
#endif

namespace tessera::kernels::cpu {

#if defined(__AVX512F__) && defined(__AVX512DQ__)

namespace {

constexpr int64_t kAheadMax = 8192;  // the software prefetch distance, at most (bytes)

// y[n + r] for r < NR: x times weight rows n + r.
template <int NR>
void tile(float* y, const float* x, const float* w, int64_t cols, int64_t n) {
  const float* wr[NR];
  for (int r = 0; r < NR; ++r) wr[r] = w + (n + r) * cols;
  const int64_t ahead = NR * cols * 4 < kAheadMax ? NR * cols * 4 : kAheadMax;
  const char* stream = reinterpret_cast<const char*>(wr[0]) + ahead;
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= cols; k += 16) {
    if constexpr (NR > 1)
      for (int line = 0; line < NR * 64; line += 64) _mm_prefetch(stream + NR * 4 * k + line, _MM_HINT_T0);
    const __m512 xv = _mm512_loadu_ps(x + k);
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(wr[r] + k), acc[r]);
  }
  if (k < cols) {
    const __mmask16 on = static_cast<__mmask16>((1u << (cols - k)) - 1u);
    const __m512 xv = _mm512_maskz_loadu_ps(on, x + k);
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(on, wr[r] + k), acc[r]);
  }
  if constexpr (NR == 4)
    _mm_storeu_ps(y + n, lane_sums4(acc[0], acc[1], acc[2], acc[3]));
  else
    for (int r = 0; r < NR; ++r) y[n + r] = _mm512_reduce_add_ps(acc[r]);
}

}  // namespace

void f32_gemv_rows_avx512(float* y, const float* x, const float* w, int64_t cols, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) tile<4>(y, x, w, cols, n);
  for (; n < n1; ++n) tile<1>(y, x, w, cols, n);
}

#else  // not an x86 compiler given AVX-512: never chosen (f32_gemv_path_supported says no)

void f32_gemv_rows_avx512(float*, const float*, const float*, int64_t, int64_t, int64_t) {
  throw Error("f32_gemv_rows_avx512: not compiled in (no AVX-512 compiler support)");
}

#endif

}  // namespace tessera::kernels::cpu
