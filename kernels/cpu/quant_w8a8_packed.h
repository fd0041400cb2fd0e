// A quantised matrix packed once for the int8-activation kernels (quant_w8a8_paths.h), and its
// product: generate --activations int8 packs every quantised matrix at load (lib/infer/linear.h), so
// a product packs nothing and, once its scratch fits, allocates nothing. The blocks are the ones
// quant_w8a8_gemm packs per call (w8a8_pack_block), one after the other, so the two give the same
// bits (tests/unit/test_kernels_quant_w8a8.cpp).
//
// Memory against the quantised matrix it comes from (whose bytes generate then drops): the values
// take the same bytes (int8 one a weight, int4 two a byte) but each group is padded to 8 columns
// and the rows to a block of 32; the scales stay f32 and the offsets (int8: 128, int4: the zero
// point) are int32, 8 bytes a (row, group) against 4 (int8) or 5 (int4). At groups of 64: int8
// 72 bytes a group's row against 68 (+6%), int4 40 against 37 (+8%).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/quant_w8a8_paths.h"

namespace tessera::kernels::cpu {

struct W8A8PackedMatrix {
  int64_t rows = 0, cols = 0, group = 0;
  int bits = 8;
  std::vector<uint8_t> bytes;    // block b's values at b * block_bytes()
  std::vector<float> scales;     // block b's [groups][32] at b * groups() * 32, as offsets
  std::vector<int32_t> offsets;

  int64_t groups() const { return group > 0 ? cols / group : 0; }
  int64_t padded() const { return w8a8_padded_group(group); }
  int64_t blocks() const { return (rows + kW8A8BlockRows - 1) / kW8A8BlockRows; }
  int64_t block_bytes() const { return groups() * w8a8_group_bytes(padded(), bits); }
  int64_t memory_bytes() const {
    return static_cast<int64_t>(bytes.size() + scales.size() * sizeof(float) + offsets.size() * sizeof(int32_t));
  }
};

// Every block of w packed (checks the view first; OpenMP threads over blocks).
W8A8PackedMatrix w8a8_pack(const QuantMatrixView& w);

// The quantised activations of one product, grown to the largest product so far and reused.
struct W8A8Scratch {
  std::vector<int8_t> xq;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

// y [m, w.rows] = x [m, w.cols] W^T for any m >= 0 (one row too: each row's result is the same
// whatever rows are beside it), OpenMP threads over blocks; quant_w8a8_gemm_packed runs
// w8a8_best_path(). Equal bit for bit to quant_w8a8_gemm_on_path on the same path and matrix.
void quant_w8a8_gemm_packed_on_path(W8A8Path path, float* y, const float* x, int64_t m, const W8A8PackedMatrix& w,
                                    W8A8Scratch& scratch);
void quant_w8a8_gemm_packed(float* y, const float* x, int64_t m, const W8A8PackedMatrix& w, W8A8Scratch& scratch);

}  // namespace tessera::kernels::cpu
