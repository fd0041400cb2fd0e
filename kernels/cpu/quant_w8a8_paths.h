// Quantised products with int8 activations (generate --activations int8): y = x W^T for W int8, or
// int4 with zero points, in groups along the columns, and x quantised per row and group to symmetric
// int8 (scale = max|x| / 127 over the group, round to nearest even). Each (row, weight row, group)
// product is an exact int32 sum of int8 x (int8 or int4) products, the weights' offsets taken out
// through the group's activation sum, then scaled by the two f32 scales and summed in f32:
//   y[i, n] = sum_g f32(sx[i, g] sw[n, g]) * f32(sum_k xq[i, k] (q[n, k] - z[n, g]))   (z = 0 for int8)
// so y is the product of the dequantised activations and the dequantised weights within the rounding
// of f32 sums (tests/unit/test_kernels_quant_w8a8.cpp). Paths: portable (plain loops) and AVX-512
// VNNI (vpdpbusd: weights as unsigned bytes, int8 offset by +128 and the offset taken out with the
// activation sum; activations as signed bytes), chosen at run time. The kernels read blocks of 32
// weight rows in the layout the dot-product instruction wants (4 columns of 16 rows a vector; int4: 8
// columns, two nibbles a byte). quant_w8a8_gemm packs them per call, per thread; generate packs each
// matrix once at load (quant_w8a8_packed.h) and calls the kernels on those blocks.
#pragma once
#include <cstdint>

#include "kernels/op_devices.h"

namespace tessera::kernels::cpu {

// quant_w8a8_matmul: from this many activation rows the integer kernel (a batch, a prefill); below it
// the activations are quantised alike, dequantised to f32 and multiplied by the weight-only kernels
// (quant_gemv, quant_gemm: one token's product reads the weights once whatever it does with them),
// so every row is computed from the same int8 activations whatever the batch or layout around it.
inline constexpr int64_t kW8A8MinRows = 4;

// x [m, cols] quantised per row and group of `group` columns, each group padded with zeros to
// `padded` = group rounded up to 8 (the int4 blocks' step): xq [m, groups, padded], scales and sums
// [m, groups] (sums: the int32 sum of the group's xq). A group of zeros gets scale 0.
// quantize_activations_int8 runs the AVX-512 copy where w8a8_best_path() is VNNI, else the portable
// one; the two give the same bytes, scales and sums.
int64_t w8a8_padded_group(int64_t group);
void quantize_activations_int8(int8_t* xq, float* scales, int32_t* sums, const float* x, int64_t m, int64_t cols,
                               int64_t group);
void quantize_activations_int8_portable(int8_t* xq, float* scales, int32_t* sums, const float* x, int64_t m,
                                        int64_t cols, int64_t group);
void quantize_activations_int8_avx512(int8_t* xq, float* scales, int32_t* sums, const float* x, int64_t m,
                                      int64_t cols, int64_t group);

// One block of up to 32 weight rows as the kernels read it (w8a8_pack_block), unsigned levels
// (int8: q + 128; int4: the level), w8a8_group_bytes apart per group:
//   int8: [groups][padded / 4][32 rows][4 bytes], byte c of a word column 4j + c;
//   int4: [groups][padded / 8][32 rows][4 bytes], byte c of a word columns 8j + c (low nibble) and
//         8j + 4 + c (high nibble): one AND and one shift give two int8-style words;
// scales and offsets (int8: 128; int4: the zero point) [groups][32]; rows past `count` are zeros.
inline constexpr int64_t kW8A8BlockRows = 32;
inline int64_t w8a8_group_bytes(int64_t padded, int bits) {
  return bits == 8 ? padded * kW8A8BlockRows : padded * kW8A8BlockRows / 2;
}
void w8a8_pack_block(uint8_t* packed, float* scales, int32_t* offsets, const QuantMatrixView& w, int64_t n0,
                     int64_t count);
// The same with AVX-512 (16 x 16 word transposes), for int8 in groups of a multiple of 8 columns only.
void w8a8_pack_block_vnni(uint8_t* packed, float* scales, int32_t* offsets, const QuantMatrixView& w, int64_t n0,
                          int64_t count);
// y[i * ldy + r] for i < m, r < count: the block's products with every activation row (each row's
// sums the same whatever m: a row's result never depends on the rows beside it).
using W8A8BlockFn = void (*)(float* y, int64_t ldy, const int8_t* xq, const float* xscales, const int32_t* xsums,
                             int64_t m, int64_t groups, int64_t padded, int bits, const uint8_t* packed,
                             const float* scales, const int32_t* offsets, int64_t count);
void w8a8_block_scalar(float* y, int64_t ldy, const int8_t* xq, const float* xscales, const int32_t* xsums, int64_t m,
                       int64_t groups, int64_t padded, int bits, const uint8_t* packed, const float* scales,
                       const int32_t* offsets, int64_t count);
void w8a8_block_vnni(float* y, int64_t ldy, const int8_t* xq, const float* xscales, const int32_t* xsums, int64_t m,
                     int64_t groups, int64_t padded, int bits, const uint8_t* packed, const float* scales,
                     const int32_t* offsets, int64_t count);
extern const bool kW8A8VnniCompiled;  // quant_w8a8_vnni.cpp built with AVX-512 VNNI (x86 only)

enum class W8A8Path { scalar, avx512_vnni };
const char* w8a8_path_name(W8A8Path path);
bool w8a8_path_supported(W8A8Path path);  // compiled in and run by this CPU
// VNNI where the quantised kernels run AVX-512 (quant_best_path: TESSERA_CPU_ISA=base|avx2 gives the
// portable path) and the CPU has AVX-512 VNNI; chosen on the first call.
W8A8Path w8a8_best_path();
W8A8BlockFn w8a8_block_fn(W8A8Path path);
// y [m, w.rows] = x [m, w.cols] W^T as above, OpenMP threads over blocks of weight rows; checks the
// view first (check_quant_view). quant_w8a8_gemm runs w8a8_best_path().
void quant_w8a8_gemm_on_path(W8A8Path path, float* y, const float* x, int64_t m, const QuantMatrixView& w);
void quant_w8a8_gemm(float* y, const float* x, int64_t m, const QuantMatrixView& w);
// What generate --activations int8 calls for every product with a quantised matrix: quant_w8a8_gemm
// from kW8A8MinRows rows, the dequantised int8 activations through quant_gemv / quant_gemm below;
// both equal the quantised activations times the dequantised weights within f32 rounding.
void quant_w8a8_matmul(float* y, const float* x, int64_t m, const QuantMatrixView& w);

}  // namespace tessera::kernels::cpu
