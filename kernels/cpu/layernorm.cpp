// LayerNorm on the CPU: forward (saving mean and rstd per row) and backward, parallel over rows; and
// the pieces of a layer norm whose columns are split across ranks (the caller all-reduces the sums).
#include <omp.h>

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu {
namespace TESSERA_ISA {  // compiled once per instruction set (isa.h)
namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread does it all
}  // namespace

// mean = sum x / C; var = sum (x - mean)^2 / C (biased, two passes); rstd = 1 / sqrt(var + eps).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t rows, int64_t cols, float eps) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    float* y = out + r * cols;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += x[c];
    const float mu = sum * inv_cols;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < cols; ++c) sq += (x[c] - mu) * (x[c] - mu);
    const float rs = 1.0f / std::sqrt(sq * inv_cols + eps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] = (x[c] - mu) * rs * weight[c] + bias[c];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

namespace {

// Per row, with xhat = (x - mean) rstd and g = weight * dout: sum_c g and sum_c g xhat.
inline std::pair<float, float> gradient_row_sums(const float* x, const float* dy, const float* weight, float mu,
                                                 float rs, int64_t cols) {
  float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int64_t c = 0; c < cols; ++c) {
    const float g = weight[c] * dy[c];
    sum_g += g;
    sum_gx += g * (x[c] - mu) * rs;
  }
  return {sum_g, sum_gx};
}

// What both backward kernels share, given each row's (mean_c g, mean_c g xhat) from row_means(r, x, dy):
//   dinp += rstd (g - mean(g) - xhat mean(g xhat)),  dweight += dout xhat,  dbias += dout.
// dweight/dbias: each thread sums its rows into a private pair of vectors (kept between calls, so
// a training step allocates nothing here), added up at the end.
template <typename RowMeans>
void backward_rows(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                   const float* mean, const float* rstd, int64_t rows, int64_t cols, RowMeans row_means) {
  const int threads = rows * cols > kParallelMin ? omp_get_max_threads() : 1;
  thread_local std::vector<float> scratch;  // the calling thread's: the team reads it through `partial`
  if (threads > 1) scratch.assign(static_cast<size_t>(threads) * 2 * cols, 0.0f);
  float* const partial = scratch.data();
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int nt = omp_get_num_threads();
    float* dw = nt > 1 ? partial + static_cast<size_t>(omp_get_thread_num()) * 2 * cols : dweight;
    float* db = nt > 1 ? dw + cols : dbias;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = inp + r * cols;
      const float* dy = dout + r * cols;
      float* dx = dinp + r * cols;
      const float mu = mean[r], rs = rstd[r];
      // (not a structured binding: clang cannot capture one into the simd region below)
      const std::pair<float, float> means = row_means(r, x, dy);
      const float mean_g = means.first, mean_gx = means.second;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const float xhat = (x[c] - mu) * rs;
        dx[c] += rs * (weight[c] * dy[c] - mean_g - xhat * mean_gx);
        dw[c] += dy[c] * xhat;
        db[c] += dy[c];
      }
    }
    if (nt > 1) {
#pragma omp for schedule(static)
      for (int64_t c = 0; c < cols; ++c) {
        float sw = 0.0f, sb = 0.0f;
        for (int t = 0; t < nt; ++t) {
          sw += partial[static_cast<size_t>(t) * 2 * cols + c];
          sb += partial[static_cast<size_t>(t) * 2 * cols + cols + c];
        }
        dweight[c] += sw;
        dbias[c] += sb;
      }
    }
  }
}

}  // namespace

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t rows,
                        int64_t cols) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  backward_rows(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, cols,
                [&](int64_t r, const float* x, const float* dy) {
                  const auto [sum_g, sum_gx] = gradient_row_sums(x, dy, weight, mean[r], rstd[r], cols);
                  return std::pair{sum_g * inv_cols, sum_gx * inv_cols};
                });
}

// ---- columns split across ranks: this rank's block of `cols` of the `total_cols` columns ----------
// The loops are layernorm_forward/backward's, cut where a sum over all columns is needed, so that
// with one piece (cols == total_cols) the results are theirs.

void layernorm_split_row_sums(float* sums, const float* inp, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += x[c];
    sums[r] = sum;
  }
}

void layernorm_split_centered_squares(float* sums, const float* inp, const float* row_sums, int64_t rows,
                                      int64_t cols, int64_t total_cols) {
  const float inv_cols = 1.0f / static_cast<float>(total_cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    const float mu = row_sums[r] * inv_cols;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < cols; ++c) sq += (x[c] - mu) * (x[c] - mu);
    sums[r] = sq;
  }
}

void layernorm_split_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                             const float* bias, const float* row_sums, const float* squares, int64_t rows,
                             int64_t cols, int64_t total_cols, float eps) {
  const float inv_cols = 1.0f / static_cast<float>(total_cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    float* y = out + r * cols;
    const float mu = row_sums[r] * inv_cols;
    const float rs = 1.0f / std::sqrt(squares[r] * inv_cols + eps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] = (x[c] - mu) * rs * weight[c] + bias[c];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// sums [2, rows]: sum_c g, then sum_c g xhat (g = weight * dout, xhat = (x - mean) rstd).
void layernorm_split_backward_sums(float* sums, const float* dout, const float* inp, const float* weight,
                                   const float* mean, const float* rstd, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    std::tie(sums[r], sums[rows + r]) = gradient_row_sums(inp + r * cols, dout + r * cols, weight, mean[r], rstd[r], cols);
}

// As layernorm_backward after its row sums, with sums all-reduced over every rank's columns.
void layernorm_split_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, const float* sums,
                              int64_t rows, int64_t cols, int64_t total_cols) {
  const float inv_cols = 1.0f / static_cast<float>(total_cols);
  backward_rows(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, cols,
                [&](int64_t r, const float*, const float*) {
                  return std::pair{sums[r] * inv_cols, sums[rows + r] * inv_cols};
                });
}

}  // namespace TESSERA_ISA

#if defined(TESSERA_ISA_DISPATCHER)
TESSERA_ISA_DECLARE(layernorm_forward)
TESSERA_ISA_DECLARE(layernorm_backward)
TESSERA_ISA_DECLARE(layernorm_split_row_sums)
TESSERA_ISA_DECLARE(layernorm_split_centered_squares)
TESSERA_ISA_DECLARE(layernorm_split_forward)
TESSERA_ISA_DECLARE(layernorm_split_backward_sums)
TESSERA_ISA_DECLARE(layernorm_split_backward)

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t rows, int64_t cols, float eps) {
  TESSERA_ISA_CALL(layernorm_forward, out, mean, rstd, inp, weight, bias, rows, cols, eps);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t rows, int64_t cols) {
  TESSERA_ISA_CALL(layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, cols);
}
void layernorm_split_row_sums(float* sums, const float* inp, int64_t rows, int64_t cols) {
  TESSERA_ISA_CALL(layernorm_split_row_sums, sums, inp, rows, cols);
}
void layernorm_split_centered_squares(float* sums, const float* inp, const float* row_sums, int64_t rows,
                                      int64_t cols, int64_t total_cols) {
  TESSERA_ISA_CALL(layernorm_split_centered_squares, sums, inp, row_sums, rows, cols, total_cols);
}
void layernorm_split_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                             const float* bias, const float* row_sums, const float* squares, int64_t rows,
                             int64_t cols, int64_t total_cols, float eps) {
  TESSERA_ISA_CALL(layernorm_split_forward, out, mean, rstd, inp, weight, bias, row_sums, squares, rows, cols,
                   total_cols, eps);
}
void layernorm_split_backward_sums(float* sums, const float* dout, const float* inp, const float* weight,
                                   const float* mean, const float* rstd, int64_t rows, int64_t cols) {
  TESSERA_ISA_CALL(layernorm_split_backward_sums, sums, dout, inp, weight, mean, rstd, rows, cols);
}
void layernorm_split_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, const float* sums,
                              int64_t rows, int64_t cols, int64_t total_cols) {
  TESSERA_ISA_CALL(layernorm_split_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, sums, rows, cols,
                   total_cols);
}
#endif

}  // namespace tessera::kernels::cpu
