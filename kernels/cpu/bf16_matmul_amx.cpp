// The products by bf16 weights on AMX (bf16_matmul_paths.h: the amx_bf16 path): TDPBF16PS with the
// weights as the A tile (16 output rows x 32 columns of K) and the activations as the B tile (16
// column pairs x up to 16 activation rows, bf16_amx_pack_activations' layout), each C tile (16
// output rows x the activation rows, f32) kept over the whole K and written to y transposed. Up to
// 4 blocks of 16 output rows in flight (C tiles 0-3, A tiles 4 and 5 in turn, B tile 6; 2 blocks
// for quantised weights). Each
// output is its K products added one after another in K order, whatever the blocks and activation
// rows beside it: a row's result has the same bits for any m, and the quantised weights (here
// dequantised 16 rows x 32 columns at a time in registers into staging lines, the same values as
// quant_bf16_gemv_avx512.cpp's, quant_bf16_unpack_avx512.h) give the bits of the dense product on
// the rounded weights. Dense weights are loaded straight from W (row stride cols * 2 bytes).
//
// Needs cols a multiple of 32 (bf16_amx_fits) and, dequantising in registers, a group a multiple of
// 32 (quant_bf16_gemv_fits); the tile configuration is loaded per call and released at its end.
// Compiled with -mavx512f/bw/vl/dq/bf16 -mamx-tile -mamx-bf16 (kernels/CMakeLists.txt) where the
// compiler takes them, chosen only where the CPU reports AMX-TILE, AMX-BF16 and AVX512-BF16 and
// Linux grants the process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, once). No std::
// templates here (see adamw_avx512.cpp).
#include "kernels/cpu/bf16_matmul_paths.h"

#include "core/error.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
#define TESSERA_AMX_BF16 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/quant_bf16_unpack_avx512.h"
#endif

namespace tessera::kernels::cpu {

bool bf16_amx_fits(int64_t cols) { return cols > 0 && cols % 32 == 0; }

#if defined(TESSERA_AMX_BF16)

namespace {

// CPUID leaf 7: AMX-BF16 (EDX 22), AMX-TILE (EDX 24).
bool cpu_reports_amx_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 22)) != 0 && (edx & (1u << 24)) != 0 && __builtin_cpu_supports("avx512bf16") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
}

// Linux hands out the 8 KiB of tile data only to a process that asks (once, for all its threads).
bool tile_data_granted() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The tiles: C (0-3) and A (4, 5) `a_rows` rows, B (6) 16 column pairs; C and B `mc` activation rows wide.
void configure(int a_rows, int mc) {
  struct alignas(64) Config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } cfg = {};
  cfg.palette = 1;
  for (int t = 0; t < 4; ++t) {
    cfg.colsb[t] = static_cast<uint16_t>(mc * 4);
    cfg.rows[t] = static_cast<uint8_t>(a_rows);
  }
  for (int t = 4; t < 6; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = static_cast<uint8_t>(a_rows);
  }
  cfg.colsb[6] = static_cast<uint16_t>(mc * 4);
  cfg.rows[6] = 16;
  // GCC 12 does not count ldtilecfg as reading its operand and may drop the stores above: keep them.
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// Staging lines for the A tiles of quantised weights: a step's lines, up to 4 blocks of 16 rows x 32
// bf16, stored just before its tiles load them (measured, int4, one thread, 768 x 3072: staging 1, 2
// or 6 steps ahead in turn ran 5% to 20% slower).
struct alignas(64) Staging {
  uint16_t lines[4][16 * 32];
};
// How far ahead of its reads each quantised row's stream is prefetched (64-byte lines).
constexpr int kPrefetchLines = 4;

// Block j's A tile for step s: dense weights straight from W, or the staged lines.
struct DenseA {
  const uint16_t* w;  // the first block's first row
  int64_t cols;
  const uint16_t* tile(int j, int64_t s, Staging&) const { return w + j * 16 * cols + s * 32; }
  int64_t stride() const { return cols * 2; }
  void stage(int, int64_t, int, Staging&) const {}
  void group(int, int64_t, int) {}
};

// Quantised rows dequantised into the staging lines (Bits 8 or 4), the int4 tables built per group.
template <int Bits>
struct QuantA {
  static constexpr int64_t kStepBytes = Bits == 8 ? 32 : 16;  // a row's bytes per 32 columns
  const QuantMatrixView* w;
  int64_t n;  // the first block's first row
  alignas(64) uint16_t tables[4 * 16][32];  // int4: row r's group table (quant_bf16_unpack_avx512.h)
  float scale[4 * 16];                       // int8: row r's group scale
  const uint16_t* tile(int j, int64_t, Staging& st) const { return st.lines[j]; }
  int64_t stride() const { return 64; }
  // Rows [0, rows_in) of the blocks, group g.
  void group(int rows_in, int64_t g, int) {
    const int64_t groups = w->cols / w->group;
    const float* scales = w->scales + n * groups + g;
    const uint8_t* zeros = Bits == 4 ? w->zeros + n * groups + g : nullptr;
    for (int r = 0; r < rows_in; ++r) {
      if constexpr (Bits == 8)
        scale[r] = scales[r * groups];
      else
        _mm512_store_si512(tables[r], int4_bf16_table(zeros[r * groups], scales + r * groups));
    }
  }
  // Block j's a_rows rows at step s (columns 32 s ...) into the staging lines. Each row's line
  // kPrefetchLines ahead is asked for as the step enters a new line: the blocks read 16 to 64 rows
  // side by side, too many streams for the hardware prefetchers.
  void stage(int j, int64_t s, int a_rows, Staging& st) const {
    uint16_t* out = st.lines[j];
    const int64_t row_bytes = Bits == 8 ? w->cols : w->cols / 2, byte = s * kStepBytes;
    const uint8_t* q = w->q + (n + j * 16) * row_bytes + byte;
    if (byte % 64 == 0)
      for (int r = 0; r < a_rows; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(q + r * row_bytes) + kPrefetchLines * 64, _MM_HINT_T0);
    const __m512i pairs = _mm512_set1_epi32(0x1001);
    auto row = [&](int r) {
      const uint8_t* p = q + r * row_bytes;
      __m512i v;
      if constexpr (Bits == 8) {
        v = (__m512i)int8_bf16(p, _mm512_set1_ps(scale[j * 16 + r]));
      } else {
        const __m512i index =
            _mm512_madd_epi16(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), pairs);
        v = _mm512_permutexvar_epi16(index, _mm512_load_si512(tables[j * 16 + r]));
      }
      _mm512_store_si512(out + r * 32, v);
    };
    if (a_rows == 16) {  // unrolled: the rows' addresses are constant offsets
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) row(r);
    } else {
      for (int r = 0; r < a_rows; ++r) row(r);
    }
  }
};

// A C tile stored as out (a_rows x mc f32) into y[i * ldy + n + r], transposed. (The tile
// intrinsics take their tile numbers as literal text, hence the numbers written out below.)
void store_block(const float (*out)[16], float* y, int64_t ldy, int64_t n, int a_rows, int mc) {
  for (int r = 0; r < a_rows; ++r)
    for (int i = 0; i < mc; ++i) y[i * ldy + n + r] = out[r][i];
}

// NB blocks of a_rows output rows from row n (A's weights), mc activation rows xc (packed), over
// the whole K; the configuration loaded for (a_rows, mc).
template <int NB, class A>
void sweep(float* y, int64_t ldy, const uint32_t* xc, int mc, A& a, int64_t cols, int64_t group, int64_t n,
           int a_rows) {
  Staging staging;
  if constexpr (NB > 0) _tile_zero(0);
  if constexpr (NB > 1) _tile_zero(1);
  if constexpr (NB > 2) _tile_zero(2);
  if constexpr (NB > 3) _tile_zero(3);
  const int64_t steps = cols / 32, steps_per_group = group / 32;
  const int rows_in = (NB - 1) * 16 + a_rows;
  const int64_t bstride = static_cast<int64_t>(mc) * 4;
  auto stage = [&](int64_t s) {
    if (s % steps_per_group == 0) a.group(rows_in, s / steps_per_group, a_rows);
    for (int j = 0; j < NB; ++j) a.stage(j, s, a_rows, staging);
  };
  for (int64_t s = 0; s < steps; ++s) {
    stage(s);
    _tile_loadd(6, xc + s * 16 * mc, bstride);
    _tile_loadd(4, a.tile(0, s, staging), a.stride());
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB > 1) {
      _tile_loadd(5, a.tile(1, s, staging), a.stride());
      _tile_dpbf16ps(1, 5, 6);
    }
    if constexpr (NB > 2) {
      _tile_loadd(4, a.tile(2, s, staging), a.stride());
      _tile_dpbf16ps(2, 4, 6);
    }
    if constexpr (NB > 3) {
      _tile_loadd(5, a.tile(3, s, staging), a.stride());
      _tile_dpbf16ps(3, 5, 6);
    }
  }
  alignas(64) float out[4][16][16];
  _tile_stored(0, out[0], 64);
  if constexpr (NB > 1) _tile_stored(1, out[1], 64);
  if constexpr (NB > 2) _tile_stored(2, out[2], 64);
  if constexpr (NB > 3) _tile_stored(3, out[3], 64);
  for (int j = 0; j < NB; ++j) store_block(out[j], y, ldy, n + 16 * j, a_rows, mc);
}

// Blocks of 16 rows a quantised sweep dequantises side by side: 2 read memory faster than 4 (the
// rows' streams are fewer; dense sweeps take 4, their A tiles straight from memory).
constexpr int kQuantBlocks = 2;

// Rows [n0, n1) for every chunk of 16 activation rows: blocks of 16 kBlocks rows, then the last whole
// blocks, then the rows past the last whole block (their own configuration). make(n) gives the A
// source for the blocks from row n.
template <int kBlocks, class Make>
void all_rows(float* y, int64_t ldy, const uint32_t* xp, int64_t m, int64_t cols, int64_t group, int64_t n0,
              int64_t n1, Make make) {
  for (int64_t c = 0; c < m; c += 16) {
    const int mc = static_cast<int>(m - c < 16 ? m - c : 16);
    const uint32_t* xc = xp + c * (cols / 2);
    float* yc = y + c * ldy;
    int64_t n = n0;
    if (n1 - n >= 16) {
      configure(16, mc);
      for (; n + 16 * kBlocks <= n1; n += 16 * kBlocks) {
        auto a = make(n);
        sweep<kBlocks>(yc, ldy, xc, mc, a, cols, group, n, 16);
      }
      auto a = make(n);
      switch ((n1 - n) / 16) {
        case 3: sweep<3>(yc, ldy, xc, mc, a, cols, group, n, 16); break;
        case 2: sweep<2>(yc, ldy, xc, mc, a, cols, group, n, 16); break;
        case 1: sweep<1>(yc, ldy, xc, mc, a, cols, group, n, 16); break;
        default: break;
      }
      n += (n1 - n) / 16 * 16;
    }
    if (n < n1) {
      const int tail = static_cast<int>(n1 - n);
      configure(tail, mc);
      auto a = make(n);
      sweep<1>(yc, ldy, xc, mc, a, cols, group, n, tail);
    }
  }
  _tile_release();
}

}  // namespace

const bool kBf16AmxCompiled = true;

bool bf16_amx_runs() {
  static const bool runs = cpu_reports_amx_bf16() && tile_data_granted();
  return runs;
}

void bf16_matmul_rows_amx(float* y, const uint32_t* xp, int64_t m, const uint16_t* w, int64_t rows, int64_t cols,
                          int64_t n0, int64_t n1) {
  all_rows<4>(y, rows, xp, m, cols, cols, n0, n1, [&](int64_t n) { return DenseA{w + n * cols, cols}; });
}

void quant_bf16_rows_amx(float* y, const uint32_t* xp, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1) {
  TESSERA_CHECK(quant_bf16_gemv_fits(w) && bf16_amx_fits(w.cols), "quant_bf16_rows_amx: a group of ", w.group,
                " and ", w.cols, " columns (multiples of 32 needed)");
  if (w.bits == 8)
    all_rows<kQuantBlocks>(y, w.rows, xp, m, w.cols, w.group, n0, n1,
                           [&](int64_t n) { return QuantA<8>{&w, n, {}, {}}; });
  else
    all_rows<kQuantBlocks>(y, w.rows, xp, m, w.cols, w.group, n0, n1,
                           [&](int64_t n) { return QuantA<4>{&w, n, {}, {}}; });
}

#else  // no AMX compiler support or not Linux: never chosen

const bool kBf16AmxCompiled = false;

bool bf16_amx_runs() { return false; }

void bf16_matmul_rows_amx(float*, const uint32_t*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, int64_t) {
  throw Error("bf16_matmul_rows_amx: not compiled in (no AMX-BF16 compiler support)");
}

void quant_bf16_rows_amx(float*, const uint32_t*, int64_t, const QuantMatrixView&, int64_t, int64_t) {
  throw Error("quant_bf16_rows_amx: not compiled in (no AMX-BF16 compiler support)");
}

#endif

}  // namespace tessera::kernels::cpu
