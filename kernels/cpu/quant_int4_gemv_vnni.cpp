// The int4 GEMV on AVX-512 VNNI (quant_paths.h: quant_int4_vnni_*): the decode step's product by an
// int4 matrix as integer dot products, 64 weights per vpdpbusd, where unpacking nibbles into f32
// lanes cost four to five instructions per 16 weights.
//
// Once per call, x is written as unit * (a1 2^14 + a2 2^7 + a3) with a1, a2, a3 int8 (unit a power
// of two, 2^-14 of the smallest power of two sigma with 127 sigma >= max|x|; a1 = x / sigma rounded,
// a2 and a3 the rounded remainders at 2^7 and 2^14 times the resolution): exact except for a
// remainder under sigma 2^-15 <= max|x| 2^-21 per element. The terms are split into even and odd
// columns, which is how a row's bytes hold its nibbles (low nibble = even column), so a 64-byte
// load of a weight row (128 columns) gives the unsigned levels of its even columns (b & 15) and odd
// columns (b >> 4 & 15) with no shuffle. Lane i of a chunk's products covers 8 columns of one group
// (groups are a multiple of 8), and its exact int32 sum T_i = sum (a1 2^14 + a2 2^7 + a3) q comes
// from six vpdpbusd and two shifts; it is converted to f32 and multiplied by the lane's group scale
// into the row's accumulator. The zero points come out at the end, one fused multiply-add per 16
// groups: sum_g s_g z_g A_g, A_g the group's sum of the integer activations. So
//   y = unit * (sum_lanes s T - sum_g s_g z_g A_g) = sum_g s_g sum_k x~_k (q_k - z_g)
// within the rounding of a few dozen f32 sums (tests/unit/test_kernels_quant_int4_vnni.cpp states
// the bound). Measured against the dequantised product in double (GPT-2 shapes, groups of 64): on
// normal activations 1-2 u of sum |x w| at most, the f32 kernel's 0.5 u; with one activation 100
// times the rest, 27-58 u (the remainder's term), the f32 kernel's 2-3 u. A fourth term would take
// that to the f32 kernel's at two vpdpbusd, a conversion and a fused multiply-add more a chunk. Compiled with -mavx512f/bw/vl/dq -mavx512vnni (kernels/CMakeLists.txt), chosen only on
// CPUs that run them. No std:: templates here (see adamw_avx512.cpp).
#include "kernels/cpu/quant_paths.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/avx512_lane_sums.h"
#include "kernels/cpu/quant_tile_rows.h"
#endif

namespace tessera::kernels::cpu {

namespace {
constexpr int64_t kChunkCols = 128;              // columns a 64-byte load of a row holds
constexpr int64_t kChunkTermBytes = 6 * 64;      // a chunk's activation terms: a1, a2, a3 x even, odd
int64_t chunk_count(const QuantMatrixView& w) { return (w.cols + kChunkCols - 1) / kChunkCols; }
}  // namespace

bool quant_int4_vnni_fits(const QuantMatrixView& w) { return w.bits == 4 && w.group > 0 && w.group % 8 == 0; }

// terms, lane groups (16 a chunk), chunk groups (first group and count, 2 a chunk), pair sums (64 a
// chunk), group sums.
int64_t quant_int4_vnni_scratch_bytes(const QuantMatrixView& w) {
  const int64_t chunks = chunk_count(w);
  return chunks * (kChunkTermBytes + 4 * (16 + 2 + 64)) + 4 * (w.group > 0 ? w.cols / w.group : 0) + 64;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
const bool kQuantInt4VnniCompiled = true;

namespace {

// The first n of 16 lanes (none for n <= 0).
inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1u);
}

// 16 activations (in sigma's units, |v| < 127) as three int8 terms, each stored as 16 bytes at
// out + 0, 128, 256 (a1, a2, a3 of this half of the chunk); returns a1 2^14 + a2 2^7 + a3 per lane.
inline __m512i split_terms(__m512 v, int8_t* out) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 step = _mm512_set1_ps(128.0f);
  const __m512i a1 = _mm512_cvt_roundps_epi32(v, kRound);
  __m512 r = _mm512_mul_ps(_mm512_sub_ps(v, _mm512_cvtepi32_ps(a1)), step);  // exact: |r| <= 64
  const __m512i a2 = _mm512_cvt_roundps_epi32(r, kRound);
  r = _mm512_mul_ps(_mm512_sub_ps(r, _mm512_cvtepi32_ps(a2)), step);
  const __m512i a3 = _mm512_cvt_roundps_epi32(r, kRound);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(a1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 128), _mm512_cvtepi32_epi8(a2));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 256), _mm512_cvtepi32_epi8(a3));
  return _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(a1, 14), _mm512_slli_epi32(a2, 7)), a3);
}

// y[n + r] for r < NR: weight rows n + r against the prepared activations.
template <int NR>
void tile(float* y, const Int4VnniActivations& a, const QuantMatrixView& w, int64_t n) {
  const QuantTileRows<4, NR> rows(w, n);  // the rows' pointers and the prefetch distance
  const int64_t row_bytes = rows.row_bytes, groups = rows.groups, ahead = rows.ahead, chunks = a.chunks;
  const uint8_t* const* q = rows.q;
  const float* const* scales = rows.scales;
  const uint8_t* const* zeros = rows.zeros;
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512 acc[1][NR];
  for (int r = 0; r < NR; ++r) acc[0][r] = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t byte = 64 * c;
    const bool full = byte + 64 <= row_bytes;
    const __mmask64 on = full ? ~__mmask64{0} : (__mmask64{1} << (row_bytes - byte)) - 1;
    // Each row's line one tile ahead (the next tile's row at this chunk, for rows up to 2 KiB): every
    // line is asked for a whole tile before it is read. (The f32 kernels' linear position reaches the
    // next tile's last row a quarter tile before it is read: enough for them, not at this speed.)
    if constexpr (NR > 1)
      for (int r = 0; r < NR; ++r) _mm_prefetch(reinterpret_cast<const char*>(q[r] + ahead + byte), _MM_HINT_T0);
    const int8_t* t = a.terms + kChunkTermBytes * c;
    const __m512i a1e = _mm512_loadu_si512(t), a1o = _mm512_loadu_si512(t + 64);
    const __m512i a2e = _mm512_loadu_si512(t + 128), a2o = _mm512_loadu_si512(t + 192);
    const __m512i a3e = _mm512_loadu_si512(t + 256), a3o = _mm512_loadu_si512(t + 320);
    const __m512i lane_group = _mm512_loadu_si512(a.lane_groups + 16 * c);
    const int64_t g0 = a.chunk_groups[2 * c];
    const __mmask16 scales_on = mask16(a.chunk_groups[2 * c + 1]);
    for (int r = 0; r < NR; ++r) {
      const __m512i b = full ? _mm512_loadu_si512(q[r] + byte) : _mm512_maskz_loadu_epi8(on, q[r] + byte);
      const __m512i even = _mm512_and_si512(b, nibble);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi16(b, 4), nibble);
      __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), even, a1e);
      sum = _mm512_dpbusd_epi32(sum, odd, a1o);
      sum = _mm512_slli_epi32(sum, 7);
      sum = _mm512_dpbusd_epi32(sum, even, a2e);
      sum = _mm512_dpbusd_epi32(sum, odd, a2o);
      sum = _mm512_slli_epi32(sum, 7);
      sum = _mm512_dpbusd_epi32(sum, even, a3e);
      sum = _mm512_dpbusd_epi32(sum, odd, a3o);
      const __m512 s = _mm512_permutexvar_ps(lane_group, _mm512_maskz_loadu_ps(scales_on, scales[r] + g0));
      acc[0][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), s, acc[0][r]);
    }
  }
  // The zero points: minus s_g z_g A_g, 16 groups a step.
  for (int64_t g = 0; g < groups; g += 16) {
    const __mmask16 on = mask16(groups - g);
    const __m512 sums = _mm512_maskz_loadu_ps(on, a.group_sums + g);
    for (int r = 0; r < NR; ++r) {
      const __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(on, zeros[r] + g)));
      const __m512 zs = _mm512_mul_ps(z, _mm512_maskz_loadu_ps(on, scales[r] + g));
      acc[0][r] = _mm512_fnmadd_ps(zs, sums, acc[0][r]);
    }
  }
  store_lane_sums<1, NR>(y + n, 0, acc);
  for (int r = 0; r < NR; ++r) y[n + r] *= a.unit;  // a power of two
}

}  // namespace

bool quant_int4_vnni_prepare(Int4VnniActivations& a, void* scratch, const float* x, const QuantMatrixView& w) {
  const int64_t cols = w.cols, group = w.group, groups = cols / group, chunks = chunk_count(w);
  // max |x|, and whether x is finite (x * 0 is NaN otherwise)
  __m512 top = _mm512_setzero_ps(), finite = _mm512_setzero_ps();
  for (int64_t k = 0; k < cols; k += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(mask16(cols - k), x + k);
    top = _mm512_max_ps(top, _mm512_abs_ps(v));
    finite = _mm512_add_ps(finite, _mm512_mul_ps(v, _mm512_setzero_ps()));
  }
  const float m = _mm512_reduce_max_ps(top);
  // Not finite, or so small that sigma's inverse would overflow: the f32 kernel takes it.
  if (_mm512_reduce_add_ps(finite) != 0.0f || !(m <= 3.0e38f) || (m != 0.0f && m < 0x1p-100f)) return false;
  int e = 0;
  if (m != 0.0f) std::frexp(m / 127.0f, &e);  // 2^e > m / 127
  const __m512 inv_sigma = _mm512_set1_ps(std::ldexp(1.0f, -e));
  a.unit = std::ldexp(1.0f, e - 14);
  a.chunks = chunks;

  auto* bytes = static_cast<uint8_t*>(scratch);
  auto* terms = reinterpret_cast<int8_t*>(bytes);
  auto* lane_groups = reinterpret_cast<int32_t*>(bytes + chunks * kChunkTermBytes);
  int32_t* chunk_groups = lane_groups + 16 * chunks;
  int32_t* pair_sums = chunk_groups + 2 * chunks;
  auto* group_sums = reinterpret_cast<float*>(pair_sums + 64 * chunks);
  a.terms = terms;
  a.lane_groups = lane_groups;
  a.chunk_groups = chunk_groups;
  a.group_sums = group_sums;

  // Terms: per chunk [a1 even | a1 odd | a2 even | a2 odd | a3 even | a3 odd], 64 bytes each; byte j
  // of "even" is column 128 c + 2 j, of "odd" column 128 c + 2 j + 1 (zeros past cols).
  const __m512i even_cols = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_cols = _mm512_add_epi32(even_cols, _mm512_set1_epi32(1));
  for (int64_t c = 0; c < chunks; ++c) {
    int8_t* t = terms + kChunkTermBytes * c;
    for (int p = 0; p < 4; ++p) {  // 32 columns: 16 even and 16 odd
      const int64_t k = kChunkCols * c + 32 * p;
      const __m512 x0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask16(cols - k), x + k), inv_sigma);
      const __m512 x1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask16(cols - k - 16), x + k + 16), inv_sigma);
      const __m512i e_sum = split_terms(_mm512_permutex2var_ps(x0, even_cols, x1), t + 16 * p);
      const __m512i o_sum = split_terms(_mm512_permutex2var_ps(x0, odd_cols, x1), t + 64 + 16 * p);
      _mm512_storeu_si512(pair_sums + 64 * c + 16 * p, _mm512_add_epi32(e_sum, o_sum));
    }
    // Lane i covers columns 128 c + 8 i .. + 7, all in group (128 c + 8 i) / group; lanes past the
    // end keep the last column's group (their products are zero).
    const int64_t g0 = kChunkCols * c / group;
    int32_t last = 0;
    for (int i = 0; i < 16; ++i) {
      const int64_t col = kChunkCols * c + 8 * i;
      lane_groups[16 * c + i] = static_cast<int32_t>((col < cols ? col : cols - 1) / group - g0);
      last = lane_groups[16 * c + i];
    }
    chunk_groups[2 * c] = static_cast<int32_t>(g0);
    chunk_groups[2 * c + 1] = last + 1;
  }
  // A_g: the sum of a1 2^14 + a2 2^7 + a3 over the group's columns (pairs of columns), exact in int64.
  for (int64_t g = 0; g < groups; ++g) {
    int64_t sum = 0;
    for (int64_t p = g * group / 2; p < (g + 1) * group / 2; ++p) sum += pair_sums[p];
    group_sums[g] = static_cast<float>(sum);
  }
  return true;
}

void quant_int4_gemv_rows_vnni(float* y, const Int4VnniActivations& a, const QuantMatrixView& w, int64_t n0,
                               int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) tile<4>(y, a, w, n);
  for (; n < n1; ++n) tile<1>(y, a, w, n);
}

#else  // not an x86 compiler given AVX-512 VNNI: never chosen

const bool kQuantInt4VnniCompiled = false;

bool quant_int4_vnni_prepare(Int4VnniActivations&, void*, const float*, const QuantMatrixView&) { return false; }
void quant_int4_gemv_rows_vnni(float* y, const Int4VnniActivations&, const QuantMatrixView&, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) y[n] = 0.0f;  // unreachable: prepare refuses
}

#endif

}  // namespace tessera::kernels::cpu
