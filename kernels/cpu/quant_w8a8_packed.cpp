// W8A8PackedMatrix (quant_w8a8_packed.h): packing every block once, and the product on the packed
// blocks with the activations quantised into the caller's scratch.
#include "kernels/cpu/quant_w8a8_packed.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/quant_paths.h"

namespace tessera::kernels::cpu {

W8A8PackedMatrix w8a8_pack(const QuantMatrixView& w) {
  check_quant_view(w, "w8a8_pack");
  W8A8PackedMatrix p;
  p.rows = w.rows, p.cols = w.cols, p.group = w.group, p.bits = w.bits;
  const int64_t blocks = p.blocks(), block_bytes = p.block_bytes(), block_groups = p.groups() * kW8A8BlockRows;
  p.bytes.resize(static_cast<size_t>(blocks * block_bytes));
  p.scales.resize(static_cast<size_t>(blocks * block_groups));
  p.offsets.resize(p.scales.size());
  // The AVX-512 packing gives the same bytes as the portable one (int8 in groups of 8k only).
  const bool vector_pack = w.bits == 8 && w.group % 8 == 0 && w8a8_path_supported(W8A8Path::avx512_vnni);
#pragma omp parallel for schedule(static) if (blocks > 1 && w.rows * w.cols > (1 << 20))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n0 = b * kW8A8BlockRows, count = std::min(kW8A8BlockRows, w.rows - n0);
    uint8_t* bytes = p.bytes.data() + b * block_bytes;
    float* scales = p.scales.data() + b * block_groups;
    int32_t* offsets = p.offsets.data() + b * block_groups;
    if (vector_pack)
      w8a8_pack_block_vnni(bytes, scales, offsets, w, n0, count);
    else
      w8a8_pack_block(bytes, scales, offsets, w, n0, count);
  }
  return p;
}

void quant_w8a8_gemm_packed_on_path(W8A8Path path, float* y, const float* x, int64_t m, const W8A8PackedMatrix& w,
                                    W8A8Scratch& scratch) {
  TESSERA_CHECK(m >= 0, "quant_w8a8_gemm_packed: a negative row count ", m);
  TESSERA_CHECK(w8a8_path_supported(path), "quant_w8a8_gemm_packed: the ", w8a8_path_name(path),
                " path is not compiled in or not supported by this CPU");
  TESSERA_CHECK(w.bytes.size() == static_cast<size_t>(w.blocks() * w.block_bytes()) &&
                    w.scales.size() == static_cast<size_t>(w.blocks() * w.groups() * kW8A8BlockRows) &&
                    w.offsets.size() == w.scales.size(),
                "quant_w8a8_gemm_packed: a packed matrix [", w.rows, ", ", w.cols, "] whose pieces do not fit it");
  if (m == 0 || w.rows == 0) return;
  if (w.cols == 0) {
    std::fill_n(y, m * w.rows, 0.0f);
    return;
  }
  const int64_t groups = w.groups(), padded = w.padded(), R = kW8A8BlockRows;
  const auto need = static_cast<size_t>(m * groups);
  if (scratch.xq.size() < need * static_cast<size_t>(padded)) scratch.xq.resize(need * static_cast<size_t>(padded));
  if (scratch.scales.size() < need) scratch.scales.resize(need);
  if (scratch.sums.size() < need) scratch.sums.resize(need);
  quantize_activations_int8(scratch.xq.data(), scratch.scales.data(), scratch.sums.data(), x, m, w.cols, w.group);
  const W8A8BlockFn run = w8a8_block_fn(path);
  const int64_t blocks = w.blocks(), block_bytes = w.block_bytes();
  const int8_t* xq = scratch.xq.data();
  const float* xscales = scratch.scales.data();
  const int32_t* xsums = scratch.sums.data();
#pragma omp parallel for schedule(static) if (blocks > 1 && m * w.rows * w.cols > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n0 = b * R, count = std::min(R, w.rows - n0);
    run(y + n0, w.rows, xq, xscales, xsums, m, groups, padded, w.bits, w.bytes.data() + b * block_bytes,
        w.scales.data() + b * groups * R, w.offsets.data() + b * groups * R, count);
  }
}

void quant_w8a8_gemm_packed(float* y, const float* x, int64_t m, const W8A8PackedMatrix& w, W8A8Scratch& scratch) {
  quant_w8a8_gemm_packed_on_path(w8a8_best_path(), y, x, m, w, scratch);
}

}  // namespace tessera::kernels::cpu
