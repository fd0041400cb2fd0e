// LayerNorm on the CPU: forward (saving mean and rstd per row) and backward, parallel over rows; and
// the pieces of a layer norm whose columns are split across ranks (the caller all-reduces the sums).
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {
namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread does it all
}

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

// With xhat = (x - mean) rstd and g = weight * dout:
//   dinp += rstd (g - mean(g) - xhat mean(g xhat)),  dweight += dout xhat,  dbias += dout.
// dweight/dbias: each thread sums its rows into a private pair of vectors, added up at the end.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t rows,
                        int64_t cols) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int threads = rows * cols > kParallelMin ? omp_get_max_threads() : 1;
  std::vector<float> partial(threads > 1 ? static_cast<size_t>(threads) * 2 * cols : 0, 0.0f);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int nt = omp_get_num_threads();
    float* dw = nt > 1 ? partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * cols : dweight;
    float* db = nt > 1 ? dw + cols : dbias;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = inp + r * cols;
      const float* dy = dout + r * cols;
      float* dx = dinp + r * cols;
      const float mu = mean[r], rs = rstd[r];
      float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t c = 0; c < cols; ++c) {
        const float g = weight[c] * dy[c];
        sum_g += g;
        sum_gx += g * (x[c] - mu) * rs;
      }
      const float mean_g = sum_g * inv_cols, mean_gx = sum_gx * inv_cols;
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
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = inp + r * cols;
    const float* dy = dout + r * cols;
    const float mu = mean[r], rs = rstd[r];
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t c = 0; c < cols; ++c) {
      const float g = weight[c] * dy[c];
      sum_g += g;
      sum_gx += g * (x[c] - mu) * rs;
    }
    sums[r] = sum_g;
    sums[rows + r] = sum_gx;
  }
}

// As layernorm_backward after its row sums, with sums all-reduced over every rank's columns.
void layernorm_split_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, const float* sums,
                              int64_t rows, int64_t cols, int64_t total_cols) {
  const float inv_cols = 1.0f / static_cast<float>(total_cols);
  const int threads = rows * cols > kParallelMin ? omp_get_max_threads() : 1;
  std::vector<float> partial(threads > 1 ? static_cast<size_t>(threads) * 2 * cols : 0, 0.0f);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int nt = omp_get_num_threads();
    float* dw = nt > 1 ? partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * cols : dweight;
    float* db = nt > 1 ? dw + cols : dbias;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = inp + r * cols;
      const float* dy = dout + r * cols;
      float* dx = dinp + r * cols;
      const float mu = mean[r], rs = rstd[r];
      const float mean_g = sums[r] * inv_cols, mean_gx = sums[rows + r] * inv_cols;
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

}  // namespace tessera::kernels::cpu
