// Shared by the kernel tests: Philox-filled tensors, a scoped OpenMP thread count (kernels are
// run on 1 and 3 threads so that a race shows even though CTest pins one), cutting positions out
// of a sequence, a max-relative comparison, and expecting an error that names the problem.
#pragma once
#include <omp.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace tessera::testing {

// A [shape] tensor of mean + std * normal(seed, stream, i).
inline Tensor random_tensor(Shape shape, uint64_t seed, uint64_t stream, float mean = 0.0f, float std = 1.0f) {
  Tensor t = Tensor::empty(std::move(shape));
  philox_fill_normal(t.data<float>(), t.numel(), seed, stream, 0, mean, std);
  return t;
}

// Sets the OpenMP thread count for a scope.
struct ScopedThreads {
  int saved = omp_get_max_threads();
  explicit ScopedThreads(int n) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(saved); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;
};

// Positions [t0, t0 + n) of every batch of x [B, T, ...], as a [B, n, ...] copy.
inline Tensor take_positions(const Tensor& x, int64_t t0, int64_t n) {
  std::vector<int64_t> dims = x.shape().dims();
  const int64_t seq = dims[1], w = x.numel() / (dims[0] * seq);
  dims[1] = n;
  Tensor out = Tensor::empty(Shape(dims));
  for (int64_t b = 0; b < dims[0]; ++b)
    std::copy_n(x.data<float>() + (b * seq + t0) * w, n * w, out.data<float>() + b * n * w);
  return out;
}

// max |got - want| / max |want| of want.size() values against a double-precision reference: a
// relative error that does not blow up at near-zero entries.
inline double rel_error(const float* got, const std::vector<double>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::fabs(got[i] - want[i]));
    den = std::max(den, std::fabs(want[i]));
  }
  return num / den;
}

// max |got - want| / max |want| over columns [col0, col0 + cols) (all: cols < 0) of both viewed as
// [rows, last dim]: a relative error that does not blow up at near-zero entries.
inline double max_rel_error(const Tensor& got, const Tensor& want, int64_t col0 = 0, int64_t cols = -1) {
  const int64_t w = want.shape()[-1], rows = want.numel() / w;
  if (cols < 0) cols = w - col0;
  double num = got.numel() == want.numel() ? 0.0 : INFINITY, den = 0.0;
  for (int64_t r = 0; r < rows && got.numel() == want.numel(); ++r)
    for (int64_t c = col0; c < col0 + cols; ++c) {
      const double g = got.data<float>()[r * w + c], x = want.data<float>()[r * w + c];
      num = std::max(num, std::fabs(g - x));
      den = std::max(den, std::fabs(x));
    }
  return den > 0 ? num / den : num;
}

// call() throws a tessera::Error whose message contains `expected`.
template <typename F>
void expect_error(F&& call, const std::string& expected) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing: " << expected;
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << "message: " << e.what();
  }
}

}  // namespace tessera::testing
