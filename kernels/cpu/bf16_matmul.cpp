// bf16_weight_matmul (bf16_matmul_paths.h): y = bf16(x) W^T by bf16 weights, the path chosen once
// (bf16_matmul_paths.h), OpenMP threads over blocks of output rows; and the portable path: each
// product of two bf16 values formed exactly in f32 and summed in f32, a row at a time under 4
// activation rows, from 4 rows on blocks of W widened (exactly) into f32 panels for the GEMM
// library's sgemm, as the quantised products do (quant_gemm.cpp).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/bf16_matmul_paths.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu {
namespace {

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

inline float widen(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

// The calling thread's buffer number Tag, grown to the largest call and kept (a decode step
// allocates nothing).
template <typename T, int Tag = 0>
T* scratch(int64_t n) {
  thread_local std::vector<T> buffer;
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

// From this many activation rows the portable path multiplies f32 panels with sgemm.
constexpr int64_t kPanelRows = 4;

// The portable path from kPanelRows rows: xr [m, cols] the rounded activations as f32 (exact).
void panel_gemm(float* y, const float* xr, int64_t m, const uint16_t* w, int64_t rows, int64_t cols) {
  // Weight rows per panel: about 512 KiB of f32, a multiple of 16, at least 16 (as quant_gemm.cpp).
  const int64_t nb = std::max<int64_t>(16, (131072 / std::max<int64_t>(cols, 1)) / 16 * 16);
  const int64_t blocks = (rows + nb - 1) / nb;
  // The blocks in turn, each sgemm on the library's own threads (concurrent sgemm calls from threads
  // of ours gave wrong blocks now and then: quant_bf16_matmul.cpp).
  float* panel = scratch<float, 1>(nb * cols + m * nb);
  float* out = panel + nb * cols;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n0 = b * nb, n1 = std::min(rows, n0 + nb), count = n1 - n0;
    for (int64_t i = 0; i < count * cols; ++i) panel[i] = widen(w[n0 * cols + i]);
    gemm(false, true, m, count, cols, 1.0f, xr, panel, 0.0f, out);  // out [m, count] = xr panel^T
    for (int64_t i = 0; i < m; ++i) std::copy_n(out + i * count, count, y + i * rows + n0);
  }
}

}  // namespace

void bf16_matmul_rows_scalar(float* y, const uint16_t* xb, int64_t m, const uint16_t* w, int64_t rows, int64_t cols,
                             int64_t n0, int64_t n1) {
  for (int64_t i = 0; i < m; ++i) {
    const uint16_t* x = xb + i * cols;
    for (int64_t n = n0; n < n1; ++n) {
      const uint16_t* row = w + n * cols;
      float acc = 0.0f;
      for (int64_t k = 0; k < cols; ++k) acc += widen(x[k]) * widen(row[k]);
      y[i * rows + n] = acc;
    }
  }
}

const char* bf16_matmul_path_name(Bf16MatmulPath path) {
  switch (path) {
    case Bf16MatmulPath::amx_bf16: return "amx_bf16";
    case Bf16MatmulPath::avx512_bf16: return "avx512_bf16";
    case Bf16MatmulPath::scalar: break;
  }
  return "scalar";
}

bool bf16_matmul_path_supported(Bf16MatmulPath path) {
  const bool avx512 = kBf16Avx512Compiled && cpu_has_avx512_bf16();
  switch (path) {
    case Bf16MatmulPath::amx_bf16: return avx512 && kBf16AmxCompiled && bf16_amx_runs();
    case Bf16MatmulPath::avx512_bf16: return avx512;
    case Bf16MatmulPath::scalar: break;
  }
  return true;
}

// Never wider than the other kernels' copy (isa.h), as quant_best_path.
Bf16MatmulPath bf16_matmul_best_path() {
  static const Bf16MatmulPath best = [] {
    if (isa_copies() && kernel_isa() != Isa::avx512) return Bf16MatmulPath::scalar;
    for (Bf16MatmulPath path : {Bf16MatmulPath::amx_bf16, Bf16MatmulPath::avx512_bf16})
      if (bf16_matmul_path_supported(path)) return path;
    return Bf16MatmulPath::scalar;
  }();
  return best;
}

void bf16_amx_pack_activations(uint32_t* xp, const uint16_t* xb, int64_t m, int64_t cols) {
  const int64_t pairs = cols / 2;
  for (int64_t c = 0; c < m; c += 16) {
    const int64_t mc = std::min<int64_t>(16, m - c);
    uint32_t* chunk = xp + c * pairs;
    for (int64_t j = 0; j < mc; ++j) {
      const uint16_t* row = xb + (c + j) * cols;
      for (int64_t k = 0; k < pairs; ++k) std::memcpy(chunk + k * mc + j, row + 2 * k, 4);
    }
  }
}

void bf16_matmul_on_path(Bf16MatmulPath path, float* y, const float* x, int64_t m, const uint16_t* w, int64_t rows,
                         int64_t cols) {
  TESSERA_CHECK(m >= 0 && rows >= 0 && cols >= 0, "bf16_weight_matmul: a negative extent: ", m, " rows of x, W [",
                rows, ", ", cols, "]");
  TESSERA_CHECK(bf16_matmul_path_supported(path), "bf16_weight_matmul: the ", bf16_matmul_path_name(path),
                " path is not compiled in or not supported by this CPU");
  if (m == 0 || rows == 0) return;
  if (cols == 0) {
    std::fill_n(y, m * rows, 0.0f);
    return;
  }
  TESSERA_CHECK(x && w && y, "bf16_weight_matmul: a null pointer");
  uint16_t* xb = scratch<uint16_t>(m * cols);
  f32_to_bf16(xb, x, m * cols);
  if (path == Bf16MatmulPath::scalar && m >= kPanelRows) {
    float* xr = scratch<float>(m * cols);
    bf16_to_f32(xr, xb, m * cols);
    return panel_gemm(y, xr, m, w, rows, cols);
  }
  // 64 weight rows a block (a multiple of the tiles' 4 and the AMX tiles' 16): each block's rows
  // stay in L1/L2 while every activation row passes them.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  if (path == Bf16MatmulPath::amx_bf16 && bf16_amx_fits(cols)) {
    // One row is its own packing (bf16_matmul_paths.h).
    const uint32_t* xp = reinterpret_cast<const uint32_t*>(xb);
    if (m > 1) {
      uint32_t* packed = scratch<uint32_t>(m * cols / 2);
      bf16_amx_pack_activations(packed, xb, m, cols);
      xp = packed;
    }
#pragma omp parallel for schedule(static) if (blocks > 1 && m * rows * cols > (1 << 16))
    for (int64_t b = 0; b < blocks; ++b)
      bf16_matmul_rows_amx(y, xp, m, w, rows, cols, b * kBlock, std::min(rows, (b + 1) * kBlock));
    return;
  }
  // amx_bf16 on a matrix that does not fit the tiles: its avx512_bf16 kernels, for every m.
  const Bf16MatmulRowsFn run = path == Bf16MatmulPath::scalar ? bf16_matmul_rows_scalar : bf16_matmul_rows_avx512;
#pragma omp parallel for schedule(static) if (blocks > 1 && m * rows * cols > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) run(y, xb, m, w, rows, cols, b * kBlock, std::min(rows, (b + 1) * kBlock));
}

void bf16_weight_matmul(float* y, const float* x, int64_t m, const uint16_t* w, int64_t rows, int64_t cols) {
  bf16_matmul_on_path(bf16_matmul_best_path(), y, x, m, w, rows, cols);
}

}  // namespace tessera::kernels::cpu
