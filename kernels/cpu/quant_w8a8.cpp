// quant_w8a8_gemm (quant_w8a8_paths.h): the activations' quantisation, the packing of a block of
// weight rows, the portable block kernel, the choice of path and the threads over blocks.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quant_paths.h"
#include "kernels/cpu/quant_w8a8_paths.h"

namespace tessera::kernels::cpu {

// w8a8_pack_block moves int4 levels as words (4 bytes in, 4 out) in little-endian byte order.
static_assert(std::endian::native == std::endian::little, "quant_w8a8.cpp packs int4 words little-endian");

int64_t w8a8_padded_group(int64_t group) { return (group + 7) / 8 * 8; }

void quantize_activations_int8_portable(int8_t* xq, float* scales, int32_t* sums, const float* x, int64_t m,
                                        int64_t cols, int64_t group) {
  const int64_t groups = cols / group, padded = w8a8_padded_group(group);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      const float* in = x + i * cols + g * group;
      int8_t* out = xq + (i * groups + g) * padded;
      float amax = 0.0f;
      for (int64_t k = 0; k < group; ++k) amax = std::max(amax, std::fabs(in[k]));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      // Round to nearest even by adding and taking away 1.5 * 2^23 (exact for |v| <= 2^22, here
      // <= 127 and a little: v = x * inv), which vectorises where a call of nearbyint does not.
      constexpr float kRound = 12582912.0f;
      int32_t sum = 0;
      for (int64_t k = 0; k < group; ++k) {
        const float v = std::min(127.0f, std::max(-127.0f, in[k] * inv));
        out[k] = static_cast<int8_t>((v + kRound) - kRound);  // IEEE: not folded (no -ffast-math here)
        sum += out[k];
      }
      for (int64_t k = group; k < padded; ++k) out[k] = 0;
      scales[i * groups + g] = amax / 127.0f;
      sums[i * groups + g] = sum;
    }
}

namespace {
// 4 levels in the low nibbles of 4 bytes from 4 nibbles of v (nibble c to byte c).
uint32_t spread_nibbles(uint32_t v) {
  return (v & 0xFu) | ((v & 0xF0u) << 4) | ((v & 0xF00u) << 8) | ((v & 0xF000u) << 12);
}
}  // namespace

void w8a8_pack_block(uint8_t* packed, float* scales, int32_t* offsets, const QuantMatrixView& w, int64_t n0,
                     int64_t count) {
  const int64_t groups = w.cols / w.group, padded = w8a8_padded_group(w.group), R = kW8A8BlockRows;
  const int64_t group_bytes = w8a8_group_bytes(padded, w.bits);
  std::memset(packed, 0, static_cast<size_t>(groups * group_bytes));
  std::fill_n(scales, groups * R, 0.0f);
  std::fill_n(offsets, groups * R, 0);
  for (int64_t r = 0; r < count; ++r) {
    const int64_t n = n0 + r;
    for (int64_t g = 0; g < groups; ++g) {
      scales[g * R + r] = w.scales[n * groups + g];
      offsets[g * R + r] = w.bits == 8 ? 128 : w.zeros[n * groups + g];
      uint8_t* out = packed + g * group_bytes + r * 4;  // row r's word of each step
      const int64_t first = n * w.cols + g * w.group;   // the group's first column, counted over the matrix
      if (w.bits == 8 && w.group % 4 == 0) {  // 4 int8 bytes a word, offset by +128
        for (int64_t k = 0; k < w.group; k += 4) {
          uint32_t word;
          std::memcpy(&word, w.q + first + k, 4);
          word ^= 0x80808080u;
          std::memcpy(out + (k / 4) * 4 * R, &word, 4);
        }
      } else if (w.bits == 8) {
        for (int64_t k = 0; k < w.group; ++k) out[(k / 4) * 4 * R + k % 4] = static_cast<uint8_t>(w.q[first + k] ^ 0x80u);
      } else if (w.group % 8 == 0) {  // 4 int4 bytes (8 levels, little-endian) to one word
        for (int64_t k = 0; k < w.group; k += 8) {
          uint32_t v;
          std::memcpy(&v, w.q + (first + k) / 2, 4);
          const uint32_t word = spread_nibbles(v & 0xFFFFu) | (spread_nibbles(v >> 16) << 4);
          std::memcpy(out + (k / 8) * 4 * R, &word, 4);
        }
      } else {
        for (int64_t k = 0; k < w.group; ++k) {
          const uint8_t pair = w.q[(first + k) / 2];
          const uint8_t level = (first + k) % 2 ? pair >> 4 : pair & 0x0Fu;
          out[(k / 8) * 4 * R + k % 4] |= static_cast<uint8_t>(k % 8 < 4 ? level : level << 4);
        }
      }
    }
  }
}

void w8a8_block_scalar(float* y, int64_t ldy, const int8_t* xq, const float* xscales, const int32_t* xsums, int64_t m,
                       int64_t groups, int64_t padded, int bits, const uint8_t* packed, const float* scales,
                       const int32_t* offsets, int64_t count) {
  const int64_t R = kW8A8BlockRows, group_bytes = w8a8_group_bytes(padded, bits);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < count; ++r) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        const int8_t* a = xq + (i * groups + g) * padded;
        const uint8_t* b = packed + g * group_bytes + r * 4;
        int32_t dot = 0;
        for (int64_t k = 0; k < padded; ++k) {
          const int32_t level = bits == 8 ? b[(k / 4) * 4 * R + k % 4]
                                          : (b[(k / 8) * 4 * R + k % 4] >> (k % 8 < 4 ? 0 : 4)) & 0x0F;
          dot += level * a[k];
        }
        dot -= offsets[g * R + r] * xsums[i * groups + g];
        acc += static_cast<float>(dot) * (scales[g * R + r] * xscales[i * groups + g]);
      }
      y[i * ldy + r] = acc;
    }
}

namespace {
bool cpu_has_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}
}  // namespace

const char* w8a8_path_name(W8A8Path path) { return path == W8A8Path::avx512_vnni ? "avx512_vnni" : "scalar"; }

bool w8a8_path_supported(W8A8Path path) {
  return path == W8A8Path::scalar || (kW8A8VnniCompiled && cpu_has_vnni());
}

W8A8Path w8a8_best_path() {
  static const W8A8Path best = quant_best_path() == QuantPath::avx512 && w8a8_path_supported(W8A8Path::avx512_vnni)
                                   ? W8A8Path::avx512_vnni
                                   : W8A8Path::scalar;
  return best;
}

void quantize_activations_int8(int8_t* xq, float* scales, int32_t* sums, const float* x, int64_t m, int64_t cols,
                               int64_t group) {
  if (w8a8_best_path() == W8A8Path::avx512_vnni)
    quantize_activations_int8_avx512(xq, scales, sums, x, m, cols, group);
  else
    quantize_activations_int8_portable(xq, scales, sums, x, m, cols, group);
}

W8A8BlockFn w8a8_block_fn(W8A8Path path) {
  return path == W8A8Path::avx512_vnni ? w8a8_block_vnni : w8a8_block_scalar;
}

void quant_w8a8_gemm_on_path(W8A8Path path, float* y, const float* x, int64_t m, const QuantMatrixView& w) {
  check_quant_view(w, "quant_w8a8_gemm");
  TESSERA_CHECK(m >= 0, "quant_w8a8_gemm: a negative row count ", m);
  TESSERA_CHECK(w8a8_path_supported(path), "quant_w8a8_gemm: the ", w8a8_path_name(path),
                " path is not compiled in or not supported by this CPU");
  if (m == 0 || w.rows == 0) return;
  if (w.cols == 0) {
    std::fill_n(y, m * w.rows, 0.0f);
    return;
  }
  const int64_t groups = w.cols / w.group, padded = w8a8_padded_group(w.group), R = kW8A8BlockRows;
  std::vector<int8_t> xq(static_cast<size_t>(m * groups * padded));
  std::vector<float> xscales(static_cast<size_t>(m * groups));
  std::vector<int32_t> xsums(xscales.size());
  quantize_activations_int8(xq.data(), xscales.data(), xsums.data(), x, m, w.cols, w.group);
  const W8A8BlockFn run = w8a8_block_fn(path);
  const bool vector_pack = path == W8A8Path::avx512_vnni && w.bits == 8 && w.group % 8 == 0;
  const int64_t blocks = (w.rows + R - 1) / R;
  // Each thread packs its blocks into buffers of its own; no library call inside.
#pragma omp parallel if (blocks > 1 && m * w.rows * w.cols > (1 << 16))
  {
    std::vector<uint8_t> packed(static_cast<size_t>(groups * w8a8_group_bytes(padded, w.bits)));
    std::vector<float> scales(static_cast<size_t>(groups * R));
    std::vector<int32_t> offsets(scales.size());
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t n0 = b * R, count = std::min(R, w.rows - n0);
      if (vector_pack)
        w8a8_pack_block_vnni(packed.data(), scales.data(), offsets.data(), w, n0, count);
      else
        w8a8_pack_block(packed.data(), scales.data(), offsets.data(), w, n0, count);
      run(y + n0, w.rows, xq.data(), xscales.data(), xsums.data(), m, groups, padded, w.bits, packed.data(),
          scales.data(), offsets.data(), count);
    }
  }
}

void quant_w8a8_gemm(float* y, const float* x, int64_t m, const QuantMatrixView& w) {
  quant_w8a8_gemm_on_path(w8a8_best_path(), y, x, m, w);
}

void quant_w8a8_matmul(float* y, const float* x, int64_t m, const QuantMatrixView& w) {
  if (m >= kW8A8MinRows) return quant_w8a8_gemm(y, x, m, w);
  check_quant_view(w, "quant_w8a8_matmul");
  TESSERA_CHECK(m >= 0, "quant_w8a8_matmul: a negative row count ", m);
  if (m == 0 || w.rows == 0) return;
  const int64_t groups = w.cols / w.group, padded = w8a8_padded_group(w.group);
  std::vector<int8_t> xq(static_cast<size_t>(m * groups * padded));
  std::vector<float> xscales(static_cast<size_t>(m * groups)), xd(static_cast<size_t>(m * w.cols));
  std::vector<int32_t> xsums(xscales.size());
  quantize_activations_int8(xq.data(), xscales.data(), xsums.data(), x, m, w.cols, w.group);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = 0; k < w.cols; ++k) {
      const int64_t g = i * groups + k / w.group;
      xd[static_cast<size_t>(i * w.cols + k)] = static_cast<float>(xq[g * padded + k % w.group]) * xscales[g];
    }
  if (m == 1)
    quant_gemv(y, xd.data(), w);
  else
    quant_gemm(y, xd.data(), m, w);
}

}  // namespace tessera::kernels::cpu
