// RMSNorm on the CPU (Llama's norm: no centring, no bias): forward saving rstd per row, and
// backward, parallel over rows; and the same cut for columns split across ranks (grid tensor
// parallelism: the caller all-reduces the row sums).
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)
namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread does it all
}  // namespace

// rstd = 1 / sqrt(mean_c x^2 + eps); y = x rstd weight.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t rows, int64_t cols,
                     float eps) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    float* y = out + r * cols;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < cols; ++c) sq += x[c] * x[c];
    const float rs = 1.0f / std::sqrt(sq * inv_cols + eps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] = x[c] * rs * weight[c];
    rstd[r] = rs;
  }
}

namespace {
// The backward's loop over rows, given each row's mean_c(g xhat) over all columns (g = weight *
// dout, xhat = x rstd): dinp += rstd (g - xhat mean_gx), dweight += dout xhat. dweight: each thread
// sums its rows into a private vector (kept between calls), added up at the end, as
// layernorm_backward does. mean_gx(r, x, dy) gives row r's mean.
template <class MeanGx>
void backward_rows(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                   const float* rstd, int64_t rows, int64_t cols, MeanGx mean_gx) {
  const int threads = rows * cols > kParallelMin ? omp_get_max_threads() : 1;
  thread_local std::vector<float> scratch;
  if (threads > 1) scratch.assign(static_cast<size_t>(threads) * cols, 0.0f);
  float* const partial = scratch.data();
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int nt = omp_get_num_threads();
    float* dw = nt > 1 ? partial + static_cast<size_t>(omp_get_thread_num()) * cols : dweight;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = inp + r * cols;
      const float* dy = dout + r * cols;
      float* dx = dinp + r * cols;
      const float rs = rstd[r];
      const float mean = mean_gx(r, x, dy);
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const float xhat = x[c] * rs;
        dx[c] += rs * (weight[c] * dy[c] - xhat * mean);
        dw[c] += dy[c] * xhat;
      }
    }
    if (nt > 1) {
#pragma omp for schedule(static)
      for (int64_t c = 0; c < cols; ++c) {
        float sw = 0.0f;
        for (int t = 0; t < nt; ++t) sw += partial[static_cast<size_t>(t) * cols + c];
        dweight[c] += sw;
      }
    }
  }
}

// sum_c g xhat of one row (this row's columns).
float gx_row_sum(const float* x, const float* dy, const float* weight, float rs, int64_t cols) {
  float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
  for (int64_t c = 0; c < cols; ++c) sum_gx += weight[c] * dy[c] * x[c] * rs;
  return sum_gx;
}
}  // namespace

// With xhat = x rstd and g = weight * dout: dinp += rstd (g - xhat mean_c(g xhat)), dweight += dout xhat.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t rows, int64_t cols) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  backward_rows(dinp, dweight, dout, inp, weight, rstd, rows, cols, [&](int64_t r, const float* x, const float* dy) {
    return gx_row_sum(x, dy, weight, rstd[r], cols) * inv_cols;
  });
}

// ---- columns split across ranks: this rank's block of `cols` of the `total_cols` columns ----------
// rmsnorm_forward/backward's loops cut where a sum over all columns is needed (the caller
// all-reduces it between the calls), so that with one piece the results are theirs.

void rmsnorm_split_squares(float* sums, const float* inp, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < cols; ++c) sq += x[c] * x[c];
    sums[r] = sq;
  }
}

// squares may alias rstd (each row's square read before its rstd is written).
void rmsnorm_split_forward(float* out, float* rstd, const float* inp, const float* weight, const float* squares,
                           int64_t rows, int64_t cols, int64_t total_cols, float eps) {
  const float inv_cols = 1.0f / static_cast<float>(total_cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    float* y = out + r * cols;
    const float rs = 1.0f / std::sqrt(squares[r] * inv_cols + eps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] = x[c] * rs * weight[c];
    rstd[r] = rs;
  }
}

void rmsnorm_split_backward_sums(float* sums, const float* dout, const float* inp, const float* weight,
                                 const float* rstd, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) sums[r] = gx_row_sum(inp + r * cols, dout + r * cols, weight, rstd[r], cols);
}

void rmsnorm_split_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                            const float* rstd, const float* sums, int64_t rows, int64_t cols, int64_t total_cols) {
  const float inv_cols = 1.0f / static_cast<float>(total_cols);
  backward_rows(dinp, dweight, dout, inp, weight, rstd, rows, cols,
                [&](int64_t r, const float*, const float*) { return sums[r] * inv_cols; });
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(rmsnorm_forward)
TESSERA_ISA_DECLARE(rmsnorm_backward)
TESSERA_ISA_DECLARE(rmsnorm_split_squares)
TESSERA_ISA_DECLARE(rmsnorm_split_forward)
TESSERA_ISA_DECLARE(rmsnorm_split_backward_sums)
TESSERA_ISA_DECLARE(rmsnorm_split_backward)

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t rows, int64_t cols,
                     float eps) {
  TESSERA_ISA_CALL(rmsnorm_forward, out, rstd, inp, weight, rows, cols, eps);
}
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t rows, int64_t cols) {
  TESSERA_ISA_CALL(rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd, rows, cols);
}
void rmsnorm_split_squares(float* sums, const float* inp, int64_t rows, int64_t cols) {
  TESSERA_ISA_CALL(rmsnorm_split_squares, sums, inp, rows, cols);
}
void rmsnorm_split_forward(float* out, float* rstd, const float* inp, const float* weight, const float* squares,
                           int64_t rows, int64_t cols, int64_t total_cols, float eps) {
  TESSERA_ISA_CALL(rmsnorm_split_forward, out, rstd, inp, weight, squares, rows, cols, total_cols, eps);
}
void rmsnorm_split_backward_sums(float* sums, const float* dout, const float* inp, const float* weight,
                                 const float* rstd, int64_t rows, int64_t cols) {
  TESSERA_ISA_CALL(rmsnorm_split_backward_sums, sums, dout, inp, weight, rstd, rows, cols);
}
void rmsnorm_split_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                            const float* rstd, const float* sums, int64_t rows, int64_t cols, int64_t total_cols) {
  TESSERA_ISA_CALL(rmsnorm_split_backward, dinp, dweight, dout, inp, weight, rstd, sums, rows, cols, total_cols);
}
#endif

}  // namespace tessera::kernels::cpu
