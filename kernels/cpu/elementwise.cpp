// Elementwise kernels and small reductions on the CPU: add, scale, bias broadcast and its
// backward, GELU (tanh approximation) forward/backward and bias + GELU, sum of squares (also of
// values as they are rounded to bf16 in place).
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/bf16_bits.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_math.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)

namespace {
// Below this many elements a loop runs on the calling thread (a parallel region costs microseconds).
constexpr int64_t kParallelMin = 1 << 15;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// The logistic pieces of GELU at 2u, written without branches (a branch next to the simd_exp call
// stops vectorisation) and without overflow: t = exp(-2|u|) is in (0, 1], and
//   sigmoid(2u) = (u < 0 ? t : 1) / (1 + t),   sigmoid(2u) (1 - sigmoid(2u)) = t / (1 + t)^2.
struct Logistic {
  float sigmoid;  // sigmoid(2u) = 0.5 (1 + tanh u)
  float slope;    // sigmoid(2u) (1 - sigmoid(2u)) = (1 - tanh^2 u) / 4
};
inline Logistic gelu_logistic(float u) {
  const float t = simd_exp(-2.0f * std::fabs(u));
  const float negative = static_cast<float>(std::bit_cast<uint32_t>(u) >> 31);  // 1 if u < 0, else 0
  const float inv = 1.0f / (1.0f + t);
  return {(negative * t + (1.0f - negative)) * inv, t * inv * inv};
}

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed through the identity
// 0.5 (1 + tanh(u)) = sigmoid(2u): exact algebra, and no cancellation in the negative tail.
inline float gelu(float x) { return x * gelu_logistic(kGeluScale * (x + kGeluCubic * x * x * x)).sigmoid; }
}  // namespace

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* acc, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

void scale_inplace(float* x, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void broadcast_rows(float* out, const float* bias, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out + r * cols, bias, static_cast<size_t>(cols) * sizeof(float));
}

// dbias[c] += sum_r dout[r, c]. Wide rows: each thread owns blocks of columns and walks all rows.
// Narrow rows (too few column blocks to share): each thread sums a range of rows into its own
// partial vector, then the partials are added column by column. No atomics either way.
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 128;
  const int64_t col_blocks = (cols + kBlock - 1) / kBlock;
  const int threads = rows * cols > kParallelMin ? omp_get_max_threads() : 1;
  if (threads == 1 || col_blocks >= 2 * threads) {
#pragma omp parallel for schedule(static) if (threads > 1)
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t c0 = cb * kBlock, width = std::min(kBlock, cols - c0);
      float acc[kBlock] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = dout + r * cols + c0;
#pragma omp simd
        for (int64_t c = 0; c < width; ++c) acc[c] += row[c];
      }
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) dbias[c0 + c] += acc[c];
    }
    return;
  }
  std::vector<float> partial(static_cast<size_t>(threads) * cols, 0.0f);
#pragma omp parallel num_threads(threads)
  {
    const int nt = omp_get_num_threads();
    float* mine = partial.data() + static_cast<int64_t>(omp_get_thread_num()) * cols;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dout + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) mine[c] += row[c];
    }
#pragma omp for schedule(static)
    for (int64_t c = 0; c < cols; ++c) {
      float s = 0.0f;
      for (int t = 0; t < nt; ++t) s += partial[static_cast<size_t>(t) * cols + c];
      dbias[c] += s;
    }
  }
}

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = gelu(inp[i]);
}

// gelu after pre += bias (written back: backward needs the biased value).
void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    float* p = pre + r * cols;
    float* o = out + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      p[c] += bias[c];
      o[c] = gelu(p[c]);
    }
  }
}

// d gelu / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u' = sigmoid + 2 x slope u',
// u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const Logistic g = gelu_logistic(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = dout[i] * (g.sigmoid + 2.0f * x * g.slope * du);
  }
}

double sum_squares(const float* x, int64_t n) {
  double acc = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : acc) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return acc;
}

// sum_squares's loop over the values as it rounds them, one pass instead of two: the same
// reduction (the compiler may still order its vector lanes differently, so tests allow 1e-12).
double round_bf16_inplace_sum_squares(float* x, int64_t n) {
  double acc = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : acc) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float rounded = bf16_rounded(x[i]);
    x[i] = rounded;
    acc += static_cast<double>(rounded) * static_cast<double>(rounded);
  }
  return acc;
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(add)
TESSERA_ISA_DECLARE(add_inplace)
TESSERA_ISA_DECLARE(scale_inplace)
TESSERA_ISA_DECLARE(broadcast_rows)
TESSERA_ISA_DECLARE(bias_backward)
TESSERA_ISA_DECLARE(gelu_forward)
TESSERA_ISA_DECLARE(bias_gelu_forward)
TESSERA_ISA_DECLARE(gelu_backward)
TESSERA_ISA_DECLARE(sum_squares)
TESSERA_ISA_DECLARE(round_bf16_inplace_sum_squares)

void add(float* out, const float* a, const float* b, int64_t n) {
  TESSERA_ISA_CALL(add, out, a, b, n);
}
void add_inplace(float* acc, const float* x, int64_t n) {
  TESSERA_ISA_CALL(add_inplace, acc, x, n);
}
void scale_inplace(float* x, float s, int64_t n) {
  TESSERA_ISA_CALL(scale_inplace, x, s, n);
}
void broadcast_rows(float* out, const float* bias, int64_t rows, int64_t cols) {
  TESSERA_ISA_CALL(broadcast_rows, out, bias, rows, cols);
}
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t cols) {
  TESSERA_ISA_CALL(bias_backward, dbias, dout, rows, cols);
}
void gelu_forward(float* out, const float* inp, int64_t n) {
  TESSERA_ISA_CALL(gelu_forward, out, inp, n);
}
void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t rows, int64_t cols) {
  TESSERA_ISA_CALL(bias_gelu_forward, out, pre, bias, rows, cols);
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  TESSERA_ISA_CALL(gelu_backward, dinp, inp, dout, n);
}
double sum_squares(const float* x, int64_t n) {
  TESSERA_ISA_CALL(sum_squares, x, n);
}
double round_bf16_inplace_sum_squares(float* x, int64_t n) {
  TESSERA_ISA_CALL(round_bf16_inplace_sum_squares, x, n);
}
#endif

}  // namespace tessera::kernels::cpu
