// The quantised matmuls' code paths (portable scalar, AVX-512), each in its own translation unit
// compiled for its instruction set, and the choice among them: AVX-512 where the kernel copies run
// AVX-512 (kernels/cpu/isa.h, so TESSERA_CPU_ISA=base|avx2 runs the portable path), else scalar.
// Both dequantise each weight exactly as dequantize_weights does, (q [- zero]) * scale in f32 (the
// AVX-512 int8 GEMV takes the scale out of the group's sum instead: sum_g s_g sum_k x_k q_k), and
// sum in f32, so every result is within the rounding of K f32 sums of the dequantised product:
// |y - sum_k x_k w_k| <= (gamma_K + u) sum_k |x_k w_k| (tests/unit/test_kernels_quant.cpp).
// On CPUs with AVX-512 VNNI the AVX-512 path's int4 GEMV (groups a multiple of 8) is an integer
// product instead (quant_int4_gemv_vnni.cpp): x is split once per call into three int8 terms scaled
// by powers of two, exact but for a remainder of at most max|x| 2^-21 per element, each weight's
// level multiplies them in vpdpbusd (exact int32 sums), and the zero points come out through the
// groups' activation sums. Its bound adds the remainder's product and the rounding of f32 sums of
// the integer sums (tests/unit/test_kernels_quant_int4_vnni.cpp states it).
// Products of 4 or more activation rows (prefill, batched decode) dequantise each block of weight
// rows once into an f32 panel and multiply it by the GEMM library's sgemm (quant_gemm.cpp).
#pragma once
#include <cstdint>

#include "kernels/op_devices.h"

namespace tessera::kernels::cpu {

// y[n] = sum_k x[k] W[n, k] for the rows n in [n0, n1), one thread.
using QuantGemvRowsFn = void (*)(float* y, const float* x, const QuantMatrixView& w, int64_t n0, int64_t n1);
// y[i, n] = sum_k x[i, k] W[n, k] for i in [0, m), n in [n0, n1) (y's rows w.rows apart), one thread.
using QuantGemmRowsFn = void (*)(float* y, const float* x, int64_t m, const QuantMatrixView& w, int64_t n0,
                                 int64_t n1);

void quant_gemv_rows_scalar(float* y, const float* x, const QuantMatrixView& w, int64_t n0, int64_t n1);
void quant_gemm_rows_scalar(float* y, const float* x, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1);
void quant_gemv_rows_avx512(float* y, const float* x, const QuantMatrixView& w, int64_t n0, int64_t n1);
void quant_gemm_rows_avx512(float* y, const float* x, int64_t m, const QuantMatrixView& w, int64_t n0, int64_t n1);
// panel[(n - n0) * w.cols + k] = W[n, k] dequantised (dequantize_weights' values) for n in [n0, n1).
using QuantDequantRowsFn = void (*)(float* panel, const QuantMatrixView& w, int64_t n0, int64_t n1);
void quant_dequantize_rows_scalar(float* panel, const QuantMatrixView& w, int64_t n0, int64_t n1);
void quant_dequantize_rows_avx512(float* panel, const QuantMatrixView& w, int64_t n0, int64_t n1);
extern const bool kQuantAvx512Compiled;  // quant_dot_avx512.cpp built with AVX-512 (x86 only)

// The int4 GEMV on AVX-512 VNNI (above). The activations prepared once per call for every thread:
// per 128-column chunk the three terms' even and odd columns (6 x 64 bytes), each of its 16 lanes'
// group (from the chunk's first group, and how many groups it touches), and each group's sum of the
// integer activations; x ~= unit * (a1 2^14 + a2 2^7 + a3).
struct Int4VnniActivations {
  const int8_t* terms = nullptr;
  const int32_t* lane_groups = nullptr;   // [chunks][16]
  const int32_t* chunk_groups = nullptr;  // [chunks][first group, groups touched]
  const float* group_sums = nullptr;      // [groups]
  float unit = 0.0f;
  int64_t chunks = 0;
};
extern const bool kQuantInt4VnniCompiled;           // quant_int4_gemv_vnni.cpp built with AVX-512 VNNI
bool quant_int4_vnni_fits(const QuantMatrixView& w);  // int4, groups a multiple of 8 columns
bool quant_int4_vnni_supported();                     // compiled in and run by this CPU
int64_t quant_int4_vnni_scratch_bytes(const QuantMatrixView& w);
// Fills `a` in `scratch` (quant_int4_vnni_scratch_bytes); false where x is not finite or its largest
// element is under 2^-100 (the f32 kernel takes those).
bool quant_int4_vnni_prepare(Int4VnniActivations& a, void* scratch, const float* x, const QuantMatrixView& w);
void quant_int4_gemv_rows_vnni(float* y, const Int4VnniActivations& a, const QuantMatrixView& w, int64_t n0,
                               int64_t n1);

// The bf16 products' register kernel (quant_bf16_gemv_avx512.cpp, declared in bf16_matmul_paths.h)
// with its way of unpacking int4 indices named: multishift (AVX512-VBMI, on CPUs where
// quant_bf16_gemv_multishift_supported()) or widened; the same bits either way (the tests run both).
bool quant_bf16_gemv_multishift_supported();
void quant_bf16_gemv_rows_avx512_unpacked(float* y, const uint16_t* xb, int64_t m, const QuantMatrixView& w,
                                          int64_t n0, int64_t n1, bool multishift);

enum class QuantPath { scalar, avx512 };
const char* quant_path_name(QuantPath path);
bool quant_path_supported(QuantPath path);  // compiled in and run by this CPU
QuantPath quant_best_path();                // chosen on the first call, as above
// The ops on a given (supported) path, OpenMP threads over output rows; quant_gemv / quant_gemm
// run quant_best_path(). Each checks the view first (check_quant_view).
void quant_gemv_on_path(QuantPath path, float* y, const float* x, const QuantMatrixView& w);
void quant_gemm_on_path(QuantPath path, float* y, const float* x, int64_t m, const QuantMatrixView& w);
// Throws naming the problem: bits not 8 or 4, a group that does not divide cols (or is odd for
// int4), a null pointer where data is needed.
void check_quant_view(const QuantMatrixView& w, const char* op);

}  // namespace tessera::kernels::cpu
