// The weight rows a quantised tile reads (kernels/cpu/quant_dot_avx512.cpp and
// quant_bf16_gemv_avx512.cpp, quant_int4_gemv_vnni.cpp): each row's bytes, group scales and (int4)
// zero points, and how far ahead its software prefetch asks for lines (quant_dot_avx512.cpp: of the
// tile's linear position; the faster bf16 and VNNI tiles: of each row's position, the next tile's
// row at the same column).
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/op_devices.h"

namespace tessera::kernels::cpu {

// Weight rows n .. n + NR - 1 of `w` (Bits 8 or 4).
template <int Bits, int NR>
struct QuantTileRows {
  static constexpr int64_t kAheadMax = 8192;  // the prefetch distance, at most (bytes)
  int64_t groups, row_bytes, ahead;
  const uint8_t* q[NR];
  const float* scales[NR];
  const uint8_t* zeros[NR];  // int4 only

  QuantTileRows(const QuantMatrixView& w, int64_t n)
      : groups(w.cols / w.group), row_bytes(Bits == 8 ? w.cols : w.cols / 2),
        // The tile's NR rows are contiguous bytes read NR at a time: asking for lines as far ahead
        // as the next tile's (at most kAheadMax) requests every line of it before it is read.
        ahead(std::min(NR * row_bytes, kAheadMax)) {
    for (int r = 0; r < NR; ++r) {
      q[r] = w.q + (n + r) * row_bytes;
      scales[r] = w.scales + (n + r) * groups;
      zeros[r] = Bits == 4 ? w.zeros + (n + r) * groups : nullptr;
    }
  }
};

}  // namespace tessera::kernels::cpu
