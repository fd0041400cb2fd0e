// quant_bf16_matmul (bf16_matmul_paths.h): a quantised matrix's products under generate --weights
// bf16. Each block of weight rows is dequantised (the quantised path's dequantize_weights values)
// and rounded to bf16 into a panel that stays in L2 while every activation row passes it, then
// multiplied as bf16 weights are: AVX-512 BF16 tiles (vdpbf16ps), or on the portable path the
// panel's values as f32 against the rounded activations (a loop under 4 rows, sgemm from 4), the
// same exact products summed in f32. Under 4 rows on AVX-512 BF16 (decode) there is no panel: the
// weights are dequantised in registers (quant_bf16_gemv_avx512.cpp, the same bits), so a token
// reads each weight byte once. On AMX (bf16_matmul_amx.cpp) the panels' rows are multiplied as
// A tiles, and up to 128 rows the weights are dequantised in registers into the A tiles instead
// (the same bits). OpenMP threads over blocks of output rows.
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/bf16_matmul_paths.h"
#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {
namespace {
// Under this many activation rows the AVX-512 BF16 path dequantises in registers (no panel).
constexpr int64_t kGemvRows = 4;
// Up to this many activation rows the AMX path dequantises in registers, once per chunk of 16 rows
// (the B tile's); from more into panels, dequantised once for all the chunks. The same bits either
// way. Measured (int4 and int8, 768 x 3072, one thread): in registers 2.4x the panels' speed at 32
// rows, 1.7x at 64.
constexpr int64_t kAmxRegisterRows = 128;
}  // namespace

void quant_bf16_matmul_on_paths(QuantPath qpath, Bf16MatmulPath bpath, float* y, const float* x, int64_t m,
                                const QuantMatrixView& w) {
  check_quant_view(w, "quant_bf16_matmul");
  TESSERA_CHECK(m >= 0, "quant_bf16_matmul: a negative row count ", m);
  TESSERA_CHECK(quant_path_supported(qpath) && bf16_matmul_path_supported(bpath), "quant_bf16_matmul: the ",
                quant_path_name(qpath), " and ", bf16_matmul_path_name(bpath),
                " paths are not both compiled in and supported by this CPU");
  if (m == 0 || w.rows == 0) return;
  const int64_t cols = w.cols;
  if (cols == 0) {
    std::fill_n(y, m * w.rows, 0.0f);
    return;
  }
  // amx_bf16 on a matrix whose rows do not fit the tiles: the avx512_bf16 kernels, for every m (as
  // bf16_matmul_on_path).
  if (bpath == Bf16MatmulPath::amx_bf16 && !bf16_amx_fits(cols)) bpath = Bf16MatmulPath::avx512_bf16;
  const bool amx = bpath == Bf16MatmulPath::amx_bf16;
  const bool dots = bpath != Bf16MatmulPath::scalar;
  // The activations rounded to bf16, for the AMX tiles and the panels (the register kernel below
  // keeps its own per thread), and the AMX tiles' packing of them (bf16_matmul_paths.h: one row is
  // its own packing).
  std::vector<uint16_t> rounded;
  const auto round_activations = [&] {
    rounded.resize(static_cast<size_t>(m * cols));
    f32_to_bf16(rounded.data(), x, m * cols);
  };
  std::vector<uint32_t> packed;
  const uint32_t* xp = nullptr;
  if (amx) {
    round_activations();
    xp = reinterpret_cast<const uint32_t*>(rounded.data());
    if (m > 1) {
      packed.resize(static_cast<size_t>(m * cols / 2));
      bf16_amx_pack_activations(packed.data(), rounded.data(), m, cols);
      xp = packed.data();
    }
  }
  if (amx && qpath == QuantPath::avx512 && m <= kAmxRegisterRows && quant_bf16_gemv_fits(w)) {
    // 64 weight rows a block (4 of the tiles' 16).
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (w.rows + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1 && m * w.rows * cols > (1 << 16))
    for (int64_t b = 0; b < blocks; ++b)
      quant_bf16_rows_amx(y, xp, m, w, b * kBlock, std::min(w.rows, (b + 1) * kBlock));
    return;
  }
  if (bpath == Bf16MatmulPath::avx512_bf16 && qpath == QuantPath::avx512 && m < kGemvRows && quant_bf16_gemv_fits(w)) {
    // The calling thread's activations as bf16, kept between calls (a decode step allocates nothing).
    thread_local std::vector<uint16_t> xb;
    if (xb.size() < static_cast<size_t>(m * cols)) xb.resize(static_cast<size_t>(m * cols));
    f32_to_bf16(xb.data(), x, m * cols);
    // 64 weight rows a block (a multiple of the tiles' 4, so the tiles fall as on the panels).
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (w.rows + kBlock - 1) / kBlock;
    const uint16_t* xbits = xb.data();
#pragma omp parallel for schedule(static) if (blocks > 1 && m * w.rows * cols > (1 << 16))
    for (int64_t b = 0; b < blocks; ++b)
      quant_bf16_gemv_rows_avx512(y, xbits, m, w, b * kBlock, std::min(w.rows, (b + 1) * kBlock));
    return;
  }
  if (!amx) round_activations();
  std::vector<float> xr(dots ? 0 : static_cast<size_t>(m * cols));
  if (!dots) bf16_to_f32(xr.data(), rounded.data(), m * cols);
  const QuantDequantRowsFn dequantize =
      qpath == QuantPath::avx512 ? quant_dequantize_rows_avx512 : quant_dequantize_rows_scalar;
  // Weight rows per panel: about 128 KiB of bf16 (beside the activations in L2), a multiple of 4.
  const int64_t nb = std::max<int64_t>(4, (65536 / cols) / 4 * 4), blocks = (w.rows + nb - 1) / nb;
  // The GEMM library's calls are not made from threads of our own (concurrent sgemm calls on
  // panels gave wrong blocks now and then on 3 threads): there the blocks run in turn, each sgemm
  // on the library's threads.
  const bool library = !dots && m >= 4;
#pragma omp parallel if (!library && blocks > 1 && m * w.rows * cols > (1 << 16))
  {
    std::vector<float> panel(static_cast<size_t>(nb * cols));
    std::vector<uint16_t> bits(dots ? static_cast<size_t>(nb * cols) : 0);
    std::vector<float> out(!dots && m >= 4 ? static_cast<size_t>(m * nb) : 0);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t n0 = b * nb, n1 = std::min(w.rows, n0 + nb), count = n1 - n0;
      dequantize(panel.data(), w, n0, n1);
      if (dots) {
        f32_to_bf16(bits.data(), panel.data(), count * cols);
        // Rows [0, count) of the panel are W's rows [n0, n1): y + n0, y's rows w.rows apart.
        if (amx)
          bf16_matmul_rows_amx(y + n0, xp, m, bits.data(), w.rows, cols, 0, count);
        else
          bf16_matmul_rows_avx512(y + n0, rounded.data(), m, bits.data(), w.rows, cols, 0, count);
        continue;
      }
      for (int64_t i = 0; i < count * cols; ++i) panel[static_cast<size_t>(i)] = bf16_rounded(panel[static_cast<size_t>(i)]);
      if (m >= 4) {
        // out [m, count] = xr [m, cols] panel^T; inside the parallel region the library runs on one thread.
        gemm(false, true, m, count, cols, 1.0f, xr.data(), panel.data(), 0.0f, out.data());
        for (int64_t i = 0; i < m; ++i) std::copy_n(out.data() + i * count, count, y + i * w.rows + n0);
        continue;
      }
      for (int64_t i = 0; i < m; ++i)
        for (int64_t n = 0; n < count; ++n) {
          const float* xi = xr.data() + i * cols;
          const float* row = panel.data() + n * cols;
          float acc = 0.0f;
          for (int64_t k = 0; k < cols; ++k) acc += xi[k] * row[k];
          y[i * w.rows + n0 + n] = acc;
        }
    }
  }
}

Bf16MatmulPath quant_bf16_best_path() {
  const Bf16MatmulPath dense = bf16_matmul_best_path();
  return dense == Bf16MatmulPath::amx_bf16 ? Bf16MatmulPath::avx512_bf16 : dense;
}

void quant_bf16_matmul(float* y, const float* x, int64_t m, const QuantMatrixView& w) {
  quant_bf16_matmul_on_paths(quant_best_path(), quant_bf16_best_path(), y, x, m, w);
}

}  // namespace tessera::kernels::cpu
