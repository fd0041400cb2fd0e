// y = x W^T with W quantised (int8 / int4 groups), several activation rows: prefill and batched
// decode. Under kPanelRows rows, the chosen path's register tiles (each weight dequantised once per
// tile of activation rows); from kPanelRows rows on, each block of weight rows is dequantised once
// into an f32 panel that stays in cache and multiplied by the GEMM library's sgemm, so a batch runs at
// the f32 GEMM's rate with a quarter (int8) or an eighth (int4) of its weight bytes. The register
// tiles: OpenMP threads over blocks of output rows (quant_paths.h); the panels: one after another,
// OpenMP threads over each panel's dequantisation, the library's threads inside its sgemm.
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quant_paths.h"

namespace tessera::kernels::cpu {
namespace {

// From this many activation rows the panel path wins: the dequantisation (a few instructions per
// weight) is shared by the rows, and the sgemm's micro-kernel runs at several times the register
// tiles' rate (validation/bench/README.md, quant_gemv.sh's batched lines).
constexpr int64_t kPanelRows = 4;

// Weight rows per panel: about 512 KiB of f32 (half a Zen 4 L2; 192 KiB and 1 MiB were within the
// noise of it on the shared VM), a multiple of 16, at least 16.
int64_t panel_rows(int64_t cols) { return std::max<int64_t>(16, (131072 / std::max<int64_t>(cols, 1)) / 16 * 16); }

void panel_gemm(QuantPath path, float* y, const float* x, int64_t m, const QuantMatrixView& w) {
  const QuantDequantRowsFn dequantize =
      path == QuantPath::avx512 ? quant_dequantize_rows_avx512 : quant_dequantize_rows_scalar;
  const int64_t nb = panel_rows(w.cols), blocks = (w.rows + nb - 1) / nb;
  // The blocks in turn, each sgemm on the library's own threads: sgemm calls made side by side from
  // threads of ours gave wrong blocks now and then (oneDNN's matmul on 4 threads, 1 call in a few
  // hundred: tests/unit/test_kernels_quant_gemm_threads.cpp). Our threads share the dequantisation.
  std::vector<float> panel(static_cast<size_t>(nb * w.cols)), out(static_cast<size_t>(m * nb));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n0 = b * nb, n1 = std::min(w.rows, n0 + nb), count = n1 - n0, chunks = (count + 15) / 16;
#pragma omp parallel for schedule(static) if (chunks > 1 && count * w.cols > (1 << 15))
    for (int64_t c = 0; c < chunks; ++c)
      dequantize(panel.data() + c * 16 * w.cols, w, n0 + c * 16, std::min(n1, n0 + (c + 1) * 16));
    gemm(false, true, m, count, w.cols, 1.0f, x, panel.data(), 0.0f, out.data());  // out [m, count] = x panel^T
    for (int64_t i = 0; i < m; ++i) std::copy_n(out.data() + i * count, count, y + i * w.rows + n0);
  }
}

}  // namespace

void quant_gemm_on_path(QuantPath path, float* y, const float* x, int64_t m, const QuantMatrixView& w) {
  check_quant_view(w, "quant_gemm");
  TESSERA_CHECK(m >= 0, "quant_gemm: a negative row count ", m);
  TESSERA_CHECK(quant_path_supported(path), "quant_gemm: the ", quant_path_name(path),
                " path is not compiled in or not supported by this CPU");
  if (m == 0 || w.rows == 0) return;
  if (m >= kPanelRows && w.cols > 0) return panel_gemm(path, y, x, m, w);
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
