// gradcheck.h: central finite differences of a scalar objective and the norm-relative comparison
// with an analytic gradient, shared by the gradient-check tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"

namespace tessera::testing {

// Fills a host f32 tensor with mean + std * N(0, 1) from Philox, keyed by `name` (deterministic).
inline void fill_normal(Tensor& t, std::string_view name, float std, float mean = 0.0f, uint64_t seed = 2718) {
  philox_fill_normal(t.data<float>(), t.numel(), seed, stream_id(name), 0, mean, std);
}
inline Tensor normal(Shape shape, std::string_view name, float std, float mean = 0.0f) {
  Tensor t = Tensor::empty(std::move(shape));
  fill_normal(t, name, std, mean);
  return t;
}

// sum(out * r) in double: the scalar objective whose gradient w.r.t. out is r.
inline double dot(const Tensor& out, const Tensor& r) {
  const float* a = out.data<float>();
  const float* b = r.data<float>();
  double s = 0.0;
  for (int64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

// Which of n elements to check: all of them when n <= max_checks, else max_checks indices spread
// evenly over [0, n) (deterministic; the stride is chosen odd-ish so rows and columns both vary).
inline std::vector<int64_t> sample_indices(int64_t n, int64_t max_checks) {
  std::vector<int64_t> idx;
  if (n <= max_checks) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  for (int64_t k = 0; k < max_checks; ++k) idx.push_back((k * n + n / (2 * max_checks)) / max_checks);
  return idx;
}

// The derivative of f at x[i], for each i in idx, by central differences: the quotients
// D(h) = (f(x + h) - f(x - h)) / (x+ - x-), with x+- the float values actually stored (so the
// rounding of x +- h does not bias them), combined as (4 D(h) - D(2h)) / 3 (Richardson: the
// five-point central stencil, truncation error O(h^4) instead of O(h^2), which lets h be large
// enough for fp32 rounding in f to matter little). x[i] is restored bit-exactly afterwards.
template <typename F>
std::vector<double> numeric_grad(float* x, const std::vector<int64_t>& idx, float h, F&& f) {
  std::vector<double> g;
  g.reserve(idx.size());
  for (int64_t i : idx) {
    const float x0 = x[i];
    auto quotient = [&](float step) {
      const float xp = x0 + step, xm = x0 - step;
      x[i] = xp;
      const double fp = f();
      x[i] = xm;
      const double fm = f();
      x[i] = x0;
      return (fp - fm) / (static_cast<double>(xp) - static_cast<double>(xm));
    };
    const double d1 = quotient(h), d2 = quotient(2.0f * h);
    g.push_back((4.0 * d1 - d2) / 3.0);
  }
  return g;
}

inline std::vector<double> gather(const Tensor& t, const std::vector<int64_t>& idx) {
  std::vector<double> v;
  v.reserve(idx.size());
  for (int64_t i : idx) v.push_back(t.data<float>()[i]);
  return v;
}

struct Comparison {
  double rel_err = 0;   // ||a - n|| / ||n||
  double num_norm = 0;  // ||n||
  double max_abs = 0;   // max |a - n|
  int64_t count = 0;
};

inline Comparison compare(const std::vector<double>& analytic, const std::vector<double>& numeric) {
  Comparison c;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double d = analytic[i] - numeric[i];
    diff += d * d;
    norm += numeric[i] * numeric[i];
    c.max_abs = std::max(c.max_abs, std::fabs(d));
  }
  c.num_norm = std::sqrt(norm);
  c.rel_err = norm > 0 ? std::sqrt(diff) / c.num_norm : std::sqrt(diff);
  c.count = static_cast<int64_t>(numeric.size());
  return c;
}

// One line per checked tensor, so the test log shows the measured errors.
inline void report(const std::string& what, const Comparison& c) {
  std::printf("  gradcheck %-40s n=%-5lld |num|=%-10.4g rel_err=%.3g max_abs=%.3g\n", what.c_str(),
              static_cast<long long>(c.count), c.num_norm, c.rel_err, c.max_abs);
}

// The analytic gradient of f with respect to x against the five-point stencil with step h, on up to
// max_checks elements of x (all by default), reported; the caller asserts on the comparison.
template <typename F>
Comparison compare_gradient(const std::string& what, Tensor& x, const Tensor& analytic, float h, F&& f,
                            int64_t max_checks = -1) {
  const std::vector<int64_t> idx = sample_indices(x.numel(), max_checks < 0 ? x.numel() : max_checks);
  const Comparison c = compare(gather(analytic, idx), numeric_grad(x.data<float>(), idx, h, f));
  report(what, c);
  return c;
}

}  // namespace tessera::testing
