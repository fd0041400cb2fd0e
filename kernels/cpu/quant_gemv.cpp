// y = W x with W quantised (int8 / int4 groups), one activation row: the decode step's product.
// OpenMP threads over blocks of output rows, each on the chosen path (quant_paths.h); on AVX-512 VNNI
// an int4 matrix's product is the integer one (quant_int4_gemv_vnni.cpp), its activations prepared once.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quant_paths.h"

namespace tessera::kernels::cpu {

void quant_gemv_on_path(QuantPath path, float* y, const float* x, const QuantMatrixView& w) {
  check_quant_view(w, "quant_gemv");
  TESSERA_CHECK(quant_path_supported(path), "quant_gemv: the ", quant_path_name(path),
                " path is not compiled in or not supported by this CPU");
  // 64 rows a block (a multiple of the tile's 4): enough work per block to outweigh scheduling.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (w.rows + kBlock - 1) / kBlock;
  if (path == QuantPath::avx512 && w.rows > 0 && quant_int4_vnni_fits(w) && quant_int4_vnni_supported()) {
    // The calling thread's prepared activations, kept between calls (a decode step allocates nothing).
    thread_local std::vector<uint8_t> scratch;
    const auto need = static_cast<size_t>(quant_int4_vnni_scratch_bytes(w));
    if (scratch.size() < need) scratch.resize(need);
    Int4VnniActivations a;
    if (quant_int4_vnni_prepare(a, scratch.data(), x, w)) {
#pragma omp parallel for schedule(static) if (blocks > 1 && w.rows * w.cols > (1 << 16))
      for (int64_t b = 0; b < blocks; ++b)
        quant_int4_gemv_rows_vnni(y, a, w, b * kBlock, std::min(w.rows, (b + 1) * kBlock));
      return;
    }
  }
  const QuantGemvRowsFn run = path == QuantPath::avx512 ? quant_gemv_rows_avx512 : quant_gemv_rows_scalar;
#pragma omp parallel for schedule(static) if (blocks > 1 && w.rows * w.cols > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) run(y, x, w, b * kBlock, std::min(w.rows, (b + 1) * kBlock));
}

void quant_gemv(float* y, const float* x, const QuantMatrixView& w) {
  quant_gemv_on_path(quant_best_path(), y, x, w);
}

}  // namespace tessera::kernels::cpu
