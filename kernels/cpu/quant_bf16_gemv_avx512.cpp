// A quantised matrix's bf16 products for a few activation rows (decode: quant_bf16_matmul under 4
// rows) on AVX-512 BF16, with no panel: tiles of MR activation rows by NR weight rows, 32 columns a
// step, each weight row's 32 values dequantised in registers (dequantize_weights' values, then
// rounded to bf16, nearest even) straight into vdpbf16ps. int8: (q * scale) in f32, two halves
// packed to bf16 by vcvtne2ps2bf16; int4: a group's 16 levels (l - zero) * scale rounded to bf16
// once into a table, and each column's level (low nibble first) looked up with vpermw. The
// columns, pairs, accumulators and lane sums are those of bf16_matmul_avx512.cpp's tiles on the
// rounded panel, so a row's result has the same bits on either path and for any row count.
//
// An int4 step's lookup indices come one of two ways (Int4Unpack): widened (any AVX512-BW CPU: the
// byte holding columns 2j, 2j+1 widened to dword j and split by one vpmaddwd), or, where the CPU
// has AVX512-VBMI, multishifted: the step's 16 bytes broadcast to the four 128-bit lanes by the
// load itself and one vpmultishiftqb cutting each dword's two nibbles out of its own qword, one
// instruction fewer per 32 weights. A qword can only cut from its own 8 bytes, so dword p holds the
// columns of byte sigma(p) (int4_lane_byte); the activations are permuted alike once per call and
// each accumulator permuted back before its lanes are summed, so every lane adds the same products
// in the same order as on the panels: the same bits.
//
// Needs a group that is a multiple of 32 (quant_bf16_gemv_fits). Compiled with
// -mavx512f/bw/vl/dq/bf16 (kernels/CMakeLists.txt), chosen only on CPUs that run them; the one VBMI
// instruction is written as inline assembly (the file is not compiled with -mavx512vbmi) and run
// only where the CPU reports VBMI. No std:: templates here (see adamw_avx512.cpp).
#include "kernels/cpu/bf16_matmul_paths.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512BF16__)
#include <immintrin.h>

#include "core/error.h"
#include "kernels/cpu/avx512_lane_sums.h"
#include "kernels/cpu/quant_bf16_unpack_avx512.h"
#include "kernels/cpu/quant_tile_rows.h"
#else
#include "core/error.h"
#endif

namespace tessera::kernels::cpu {

bool quant_bf16_gemv_fits(const QuantMatrixView& w) { return w.group > 0 && w.group % 32 == 0; }

bool quant_bf16_gemv_multishift_supported() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512BF16__)
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  return vbmi;
#else
  return false;
#endif
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512BF16__)

namespace {

// The byte of a step's 16 whose two columns the multishifted dword p holds: p = 4 lane + 2 half +
// d (lane: its 128-bit lane, half: its qword's in the lane, d: its dword's in the qword) cuts from
// its qword's copy of bytes 8 half .. 8 half + 7 the byte 8 half + 2 lane + d.
constexpr int int4_lane_byte(int p) { return 8 * ((p >> 1) & 1) + 2 * (p >> 2) + (p & 1); }

struct Int4LanePermutations {
  alignas(64) int32_t to_lanes[16];    // dword p of a permuted step: the step's dword int4_lane_byte(p)
  alignas(64) int32_t from_lanes[16];  // lane j of a column-order accumulator: permuted lane j came from
  alignas(64) uint8_t cuts[64];        // vpmultishiftqb's bit offsets: per dword, the byte's low and high nibble
  constexpr Int4LanePermutations() : to_lanes(), from_lanes(), cuts() {
    for (int p = 0; p < 16; ++p) {
      const int byte = int4_lane_byte(p), in_qword = byte & 7;
      to_lanes[p] = byte;
      from_lanes[byte] = p;
      // Index words: bits 0-4 read (vpermw), bit 4 the next nibble's (the table holds its values twice).
      for (int b = 0; b < 4; ++b) cuts[4 * p + b] = static_cast<uint8_t>(8 * in_qword + (b < 2 ? 0 : 4));
    }
  }
};
constexpr Int4LanePermutations kInt4Lanes;

// The same indices with dword p holding byte int4_lane_byte(p): a broadcast load (no shuffle) and
// one vpmultishiftqb (AVX512-VBMI, as inline assembly: AT&T order data, cuts, result).
struct Multishifted {
  static constexpr bool kPermuted = true;
  static __m512i index(const uint8_t* q, __m512i cuts) {
    const __m512i bytes = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    __m512i index;
    __asm__("vpmultishiftqb %2, %1, %0" : "=v"(index) : "v"(cuts), "v"(bytes));
    return index;
  }
};

// y[i * ldy + n + r] for i < MR, r < NR: activation rows xb + i * cols (bf16; for an Unpack whose
// lanes are permuted, each step's dwords permuted alike) times weight rows n + r.
template <int Bits, class Unpack, int MR, int NR>
void tile(float* y, int64_t ldy, const uint16_t* xb, const QuantMatrixView& w, int64_t n) {
  const QuantTileRows<Bits, NR> rows(w, n);  // the rows' pointers and the prefetch distance
  const int64_t cols = w.cols, group = w.group, groups = rows.groups, ahead = rows.ahead;
  const uint8_t* const* q = rows.q;
  const float* const* scales = rows.scales;
  const uint8_t* const* zeros = rows.zeros;
  const uint16_t* xs[MR];
  for (int i = 0; i < MR; ++i) xs[i] = xb + i * cols;
  const __m512i cuts = _mm512_load_si512(kInt4Lanes.cuts);
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512 scale[NR];
    __m512i table[NR];
    for (int r = 0; r < NR; ++r) {
      if constexpr (Bits == 8)
        scale[r] = _mm512_set1_ps(scales[r][g]);
      else
        table[r] = int4_bf16_table(zeros[r][g], scales[r] + g);
    }
    for (int64_t k = g * group, end = k + group; k < end; k += 32) {
      // Each row's line one tile ahead, once a line (as quant_int4_gemv_vnni.cpp: the next tile's
      // row at this column, for rows up to 2 KiB, so every line is asked for a whole tile early).
      const int64_t byte = Bits == 8 ? k : k / 2;
      if constexpr (NR > 1)
        if (byte % 64 == 0)
          for (int r = 0; r < NR; ++r) _mm_prefetch(reinterpret_cast<const char*>(q[r] + ahead + byte), _MM_HINT_T0);
      __m512bh wv[NR];
      for (int r = 0; r < NR; ++r) {
        const uint8_t* p = q[r] + byte;
        if constexpr (Bits == 8)
          wv[r] = int8_bf16(p, scale[r]);
        else
          wv[r] = (__m512bh)_mm512_permutexvar_epi16(Unpack::index(p, cuts), table[r]);
      }
      for (int i = 0; i < MR; ++i) {
        const __m512bh xv = (__m512bh)_mm512_loadu_si512(xs[i] + k);
        for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv, wv[r]);
      }
    }
  }
  if constexpr (Bits == 4 && Unpack::kPermuted) {  // back to column order before the lane sums
    const __m512i from = _mm512_load_si512(kInt4Lanes.from_lanes);
    for (int i = 0; i < MR; ++i)
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_permutexvar_ps(from, acc[i][r]);
  }
  store_lane_sums<MR, NR>(y + n, ldy, acc);
}

// MR activation rows against weight rows [n0, n1): 4 at a time, then one by one (as bf16_matmul_avx512.cpp).
template <int Bits, class Unpack, int MR>
void rows_of(float* y, int64_t ldy, const uint16_t* xb, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) tile<Bits, Unpack, MR, 4>(y, ldy, xb, w, n);
  for (; n < n1; ++n) tile<Bits, Unpack, MR, 1>(y, ldy, xb, w, n);
}

template <int Bits, class Unpack>
void gemv_rows(float* y, const uint16_t* xb, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  switch (m) {
    case 3: rows_of<Bits, Unpack, 3>(y, w.rows, xb, w, n0, n1); break;
    case 2: rows_of<Bits, Unpack, 2>(y, w.rows, xb, w, n0, n1); break;
    case 1: rows_of<Bits, Unpack, 1>(y, w.rows, xb, w, n0, n1); break;
    default: break;
  }
}

// The multishifted int4 rows: the activations' dwords permuted step by step into a buffer on the
// stack (rows of up to this many columns; wider ones take the widened indices).
constexpr int64_t kPermutedColsMax = 8192;

void int4_multishifted_rows(float* y, const uint16_t* xb, int64_t m, const QuantMatrixView& w, int64_t n0,
                            int64_t n1) {
  alignas(64) uint16_t xp[3 * kPermutedColsMax];
  const __m512i to = _mm512_load_si512(kInt4Lanes.to_lanes);
  for (int64_t i = 0; i < m * w.cols; i += 32)  // cols is a multiple of 32 (the group's)
    _mm512_store_si512(xp + i, _mm512_permutexvar_epi32(to, _mm512_loadu_si512(xb + i)));
  gemv_rows<4, Multishifted>(y, xp, m, w, n0, n1);
}

}  // namespace

void quant_bf16_gemv_rows_avx512_unpacked(float* y, const uint16_t* xb, int64_t m, const QuantMatrixView& w,
                                          int64_t n0, int64_t n1, bool multishift) {
  TESSERA_CHECK(m >= 1 && m <= 3, "quant_bf16_gemv_rows_avx512: ", m, " activation rows (1 to 3)");
  TESSERA_CHECK(!multishift || quant_bf16_gemv_multishift_supported(),
                "quant_bf16_gemv_rows_avx512: multishifted indices asked for on a CPU without AVX512-VBMI");
  if (w.bits == 8)
    gemv_rows<8, Widened>(y, xb, m, w, n0, n1);
  else if (multishift && w.cols <= kPermutedColsMax)
    int4_multishifted_rows(y, xb, m, w, n0, n1);
  else
    gemv_rows<4, Widened>(y, xb, m, w, n0, n1);
}

void quant_bf16_gemv_rows_avx512(float* y, const uint16_t* xb, int64_t m, const QuantMatrixView& w, int64_t n0,
                                 int64_t n1) {
  quant_bf16_gemv_rows_avx512_unpacked(y, xb, m, w, n0, n1, quant_bf16_gemv_multishift_supported());
}

#else  // not an x86 compiler given AVX512-BF16: never chosen (quant_bf16_matmul keeps its panels)

void quant_bf16_gemv_rows_avx512_unpacked(float*, const uint16_t*, int64_t, const QuantMatrixView&, int64_t, int64_t,
                                          bool) {
  throw Error("quant_bf16_gemv_rows_avx512: not compiled in (no AVX512-BF16 compiler support)");
}

void quant_bf16_gemv_rows_avx512(float*, const uint16_t*, int64_t, const QuantMatrixView&, int64_t, int64_t) {
  throw Error("quant_bf16_gemv_rows_avx512: not compiled in (no AVX512-BF16 compiler support)");
}

#endif

}  // namespace tessera::kernels::cpu
