// f32_gemv (f32_gemv_paths.h): the path chosen once, the checks, and OpenMP threads over blocks of
// output rows; the library path is the GEMM library's sgemm at m = 1.
#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/f32_gemv_paths.h"
#include "kernels/cpu/quant_paths.h"

namespace tessera::kernels::cpu {

const char* f32_gemv_path_name(F32GemvPath path) { return path == F32GemvPath::avx512 ? "avx512" : "library"; }

bool f32_gemv_path_supported(F32GemvPath path) {
  return path == F32GemvPath::library || quant_path_supported(QuantPath::avx512);
}

F32GemvPath f32_gemv_best_path() {
  static const F32GemvPath best =
      quant_best_path() == QuantPath::avx512 ? F32GemvPath::avx512 : F32GemvPath::library;
  return best;
}

void f32_gemv_on_path(F32GemvPath path, float* y, const float* x, const float* w, int64_t rows, int64_t cols) {
  TESSERA_CHECK(rows >= 0 && cols >= 0, "f32_gemv: a negative extent [", rows, ", ", cols, "]");
  TESSERA_CHECK(f32_gemv_path_supported(path), "f32_gemv: the ", f32_gemv_path_name(path),
                " path is not compiled in or not supported by this CPU");
  if (rows == 0) return;
  if (cols == 0) {
    std::fill_n(y, rows, 0.0f);
    return;
  }
  TESSERA_CHECK(x && w && y, "f32_gemv: a null pointer");
  if (path == F32GemvPath::library) return gemm(false, true, 1, rows, cols, 1.0f, x, w, 0.0f, y);
  // 64 rows a block (a multiple of the tile's 4): enough work per block to outweigh scheduling.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1 && rows * cols > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) f32_gemv_rows_avx512(y, x, w, cols, b * kBlock, std::min(rows, (b + 1) * kBlock));
}

void f32_gemv(float* y, const float* x, const float* w, int64_t rows, int64_t cols) {
  f32_gemv_on_path(f32_gemv_best_path(), y, x, w, rows, cols);
}

}  // namespace tessera::kernels::cpu
