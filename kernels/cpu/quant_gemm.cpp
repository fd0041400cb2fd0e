// y = x W^T with W quantised (int8 / int4 groups), several activation rows: prefill and batched
// decode. OpenMP threads over blocks of output rows (each thread all activation rows, so a weight
// is dequantised once per 4 of them), each on the chosen path (quant_paths.h).
#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quant_paths.h"

namespace tessera::kernels::cpu {

void quant_gemm_on_path(QuantPath path, float* y, const float* x, int64_t m, const QuantMatrixView& w) {
  check_quant_view(w, "quant_gemm");
  TESSERA_CHECK(m >= 0, "quant_gemm: a negative row count ", m);
  TESSERA_CHECK(quant_path_supported(path), "quant_gemm: the ", quant_path_name(path),
                " path is not compiled in or not supported by this CPU");
  if (m == 0) return;
  const QuantGemmRowsFn run = path == QuantPath::avx512 ? quant_gemm_rows_avx512 : quant_gemm_rows_scalar;
  constexpr int64_t kBlock = 32;  // output rows a block (a multiple of the tile's 4)
  const int64_t blocks = (w.rows + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1 && m * w.rows * w.cols > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) run(y, x, m, w, b * kBlock, std::min(w.rows, (b + 1) * kBlock));
}

void quant_gemm(float* y, const float* x, int64_t m, const QuantMatrixView& w) {
  quant_gemm_on_path(quant_best_path(), y, x, m, w);
}

}  // namespace tessera::kernels::cpu
