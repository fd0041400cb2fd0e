// The products by bf16 weights (generate --weights bf16): y = bf16(x) W^T with W [rows, cols] held
// as bf16 bits, on a portable path, AVX-512 BF16 (vdpbf16ps) or AMX (TDPBF16PS), each in its own
// translation unit compiled for its instruction set, and the choice among them (as quant_paths.h:
// where the kernel copies run AVX-512, kernels/cpu/isa.h, the dense products take AMX where the CPU
// has AMX-BF16 and Linux grants the tiles, else AVX-512 BF16 where the CPU has it; else portable;
// the quantised products never choose AMX: quant_bf16_best_path).
//
// The contract, the same on every path and for every row count (so a row's result does not depend
// on the rows beside it, nor on the layout, beyond f32 summation order): the activations are
// rounded to bf16 first (x~ = bf16(x), nearest even), every product x~_k w_k of two bf16 values is
// exact in f32, and the K products are summed in f32 in some order:
//   |y - sum_k x~_k w_k| <= gamma_K sum_k |x~_k w_k| + K 2^-126,  gamma_K = K u / (1 - K u), u = 2^-24
// (the last term: vdpbf16ps and TDPBF16PS flush subnormal inputs and results to zero; the portable
// path does not). Against the f32 activations and the f32 weights w0 the bf16 copy was rounded from (each
// |w_k - w0_k| <= 2^-8 |w0_k|): |y - sum_k x_k w0_k| <= (gamma_K + (2^-7 + 2^-16)(1 + gamma_K))
// sum_k |x_k w0_k| + K 2^-126 (tests/unit/test_kernels_bf16_matmul.cpp checks both).
#pragma once
#include <cstdint>

#include "kernels/cpu/quant_paths.h"

namespace tessera::kernels::cpu {

// y[m, rows] = bf16(x)[m, cols] W^T, W [rows, cols] bf16 bits, on bf16_matmul_best_path(). (Declared
// here rather than in kernels/op_list.h, beside the quantised products' paths, while it has no CUDA
// twin.)
void bf16_weight_matmul(float* y, const float* x, int64_t m, const uint16_t* w, int64_t rows, int64_t cols);

// y[i, n] = sum_k xb[i, k] W[n, k] for i in [0, m), n in [n0, n1) (y's rows `rows` apart), one
// thread; xb: the activations already rounded to bf16 bits [m, cols].
using Bf16MatmulRowsFn = void (*)(float* y, const uint16_t* xb, int64_t m, const uint16_t* w, int64_t rows,
                                  int64_t cols, int64_t n0, int64_t n1);
void bf16_matmul_rows_scalar(float* y, const uint16_t* xb, int64_t m, const uint16_t* w, int64_t rows, int64_t cols,
                             int64_t n0, int64_t n1);
void bf16_matmul_rows_avx512(float* y, const uint16_t* xb, int64_t m, const uint16_t* w, int64_t rows, int64_t cols,
                             int64_t n0, int64_t n1);
extern const bool kBf16Avx512Compiled;  // bf16_matmul_avx512.cpp built with AVX512-BF16 (x86 only)

// The AMX path (bf16_matmul_amx.cpp): weights as TDPBF16PS's A tiles, the activations packed once
// per call into its B tiles' layout: chunks of 16 rows (the last one mc = the rows left), chunk c
// at dword c * 16 * cols / 2, its column pair k of row j at dword k * mc + j (one row: the bf16
// activations themselves). Only for cols a multiple of 32 (bf16_amx_fits); other matrices take the
// avx512_bf16 kernels on this path whatever m, so the bits never depend on m.
extern const bool kBf16AmxCompiled;  // bf16_matmul_amx.cpp built with AMX-TILE/BF16 (x86-64 Linux only)
bool bf16_amx_runs();                // the CPU reports AMX-TILE, AMX-BF16, AVX512-BF16 and Linux grants the tiles
bool bf16_amx_fits(int64_t cols);
void bf16_amx_pack_activations(uint32_t* xp, const uint16_t* xb, int64_t m, int64_t cols);  // xp: m * cols / 2
void bf16_matmul_rows_amx(float* y, const uint32_t* xp, int64_t m, const uint16_t* w, int64_t rows, int64_t cols,
                          int64_t n0, int64_t n1);
// The same for a quantised W dequantised in registers (quant_bf16_gemv_fits), once per chunk of 16
// activation rows, y's rows w.rows apart.
void quant_bf16_rows_amx(float* y, const uint32_t* xp, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1);

enum class Bf16MatmulPath { scalar, avx512_bf16, amx_bf16 };
const char* bf16_matmul_path_name(Bf16MatmulPath path);
bool bf16_matmul_path_supported(Bf16MatmulPath path);  // compiled in and run by this CPU
Bf16MatmulPath bf16_matmul_best_path();                // chosen on the first call, as above
// bf16_weight_matmul on a given (supported) path, OpenMP threads over output rows.
void bf16_matmul_on_path(Bf16MatmulPath path, float* y, const float* x, int64_t m, const uint16_t* w, int64_t rows,
                         int64_t cols);

// The same products for a quantised W (int8 / int4 groups, quant_paths.h) under generate --weights
// bf16: y[m, w.rows] = bf16(x) bf16(W)^T, W's dequantize_weights values rounded to bf16 (nearest
// even), blocks of rows dequantised into a bf16 panel once per call for all m rows; the contract
// above with w = bf16(dequantised W) (each within 2^-8 of the dequantised value), for every m.
void quant_bf16_matmul(float* y, const float* x, int64_t m, const QuantMatrixView& w);
// quant_bf16_matmul's bf16 path: avx512_bf16 where supported (even where amx_bf16 is: at batch 1,
// decode's shape, dequantising into AMX tiles ran at about half the register kernel's speed,
// validation/bench/README.md), else scalar. A quantised product then need not have the bits of
// bf16_weight_matmul on its rounded weights; on one path (quant_bf16_matmul_on_paths) it does.
Bf16MatmulPath quant_bf16_best_path();
// On given (supported) paths: qpath dequantises, bpath multiplies. On amx_bf16, up to 128 rows with
// qpath avx512 and a matrix that fits quant_bf16_gemv_fits, the weights are dequantised in
// registers into the A tiles (quant_bf16_rows_amx), else into panels. Under 4 rows, where qpath is
// avx512, bpath avx512_bf16 and the matrix fits quant_bf16_gemv_fits, the weights are dequantised in
// registers (quant_bf16_gemv_rows_avx512) instead of into panels: the same bits, no panel.
void quant_bf16_matmul_on_paths(QuantPath qpath, Bf16MatmulPath bpath, float* y, const float* x, int64_t m,
                                const QuantMatrixView& w);
// y[i, n] = sum_k xb[i, k] bf16(W[n, k]) for i < m (1 to 3), n in [n0, n1) (y's rows w.rows
// apart), one thread, the weights dequantised in registers: quant_bf16_gemv_avx512.cpp. Only for a
// group that is a multiple of 32 (quant_bf16_gemv_fits) on a CPU that runs avx512_bf16.
void quant_bf16_gemv_rows_avx512(float* y, const uint16_t* xb, int64_t m, const QuantMatrixView& w, int64_t n0,
                                 int64_t n1);
bool quant_bf16_gemv_fits(const QuantMatrixView& w);

}  // namespace tessera::kernels::cpu
