// quant::QuantizedMatrix: one weight matrix W [rows, cols] of a quantised checkpoint (int8, or int4
// with zero points, per group of `group_size` columns: docs/checkpoints.md), owned in host memory
// with f32 scales (bf16 scales are widened on load), and quant::matmul, y = x W^T on the quantised
// CPU kernels (kernels/cpu/quant_*.cpp). What the generate app calls for the blocks' GEMMs (and the
// head, when quantised): it owns the weights' bytes and nothing else; activations and outputs are
// the caller's.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint_file.h"
#include "kernels/op_devices.h"

namespace tessera::quant {

class QuantizedMatrix {
 public:
  QuantizedMatrix() = default;
  // The tensor `name` ("blocks.0.attn.qkv.weight", as under /params) of a quantised checkpoint;
  // throws naming the file and tensor when it is not quantised there or its pieces disagree.
  static QuantizedMatrix load(const io::CheckpointReader& reader, const std::string& name);
  // w [rows, cols] quantised round-to-nearest (kernels: quantize_weights); bf16_scales: scales
  // rounded up to bf16 values, as a checkpoint with bf16 scales stores them.
  static QuantizedMatrix quantize(const float* w, int64_t rows, int64_t cols, int64_t group_size, int bits,
                                  bool bf16_scales = false);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t group_size() const { return group_; }
  int bits() const { return bits_; }
  // The bytes a product reads: quantised values, scales (f32 here) and zero points.
  int64_t bytes() const;
  kernels::QuantMatrixView view() const;
  void dequantize(float* w) const;  // w [rows, cols]

  // A tensor-parallel rank's part: the rows of each (first, count) range one after the other (the
  // heads or features it owns), or columns [first, first + count) of every row, which must fall on
  // whole groups (throws naming the group size otherwise).
  QuantizedMatrix rows_of(const std::vector<std::pair<int64_t, int64_t>>& ranges) const;
  QuantizedMatrix columns_of(int64_t first, int64_t count) const;

  // The pieces as stored (tests and the writer): q as bytes, scales f32, zeros (int4) uint8.
  const std::vector<uint8_t>& q() const { return q_; }
  const std::vector<float>& scales() const { return scales_; }
  const std::vector<uint8_t>& zeros() const { return zeros_; }

 private:
  std::vector<uint8_t> q_, zeros_;
  std::vector<float> scales_;
  int64_t rows_ = 0, cols_ = 0, group_ = 0;
  int bits_ = 8;
};

// y [M, W.rows()] = x [M, W.cols()] W^T: quant_gemv for M = 1, quant_gemm otherwise; equal to x
// times the dequantised W within the rounding of f32 sums (kernels/op_list.h).
void matmul(const float* x, int64_t M, const QuantizedMatrix& W, float* y);

}  // namespace tessera::quant
