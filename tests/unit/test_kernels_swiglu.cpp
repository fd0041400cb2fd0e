// Unit tests of the CPU SwiGLU through ops::swiglu_forward/backward: out = silu(gate) * up and its
// gradients against a double reference over gates from the far negative tail to the far positive
// one, on one and three threads (sizes above the kernel's parallel threshold); the backward with
// dgate written over dout; shapes that do not fit.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Tensor;
using tessera::testing::expect_error;
using Threads = tessera::testing::ScopedThreads;

namespace {

Tensor random_tensor(tessera::Shape shape, uint64_t stream, float mean = 0.0f, float std = 1.0f) {
  return tessera::testing::random_tensor(std::move(shape), 71, stream, mean, std);
}

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// A gate of n values: normal(0, 3) draws, and from element 0 a sweep of fixed values (the tails
// where exp over- or underflows in float, zero, and values around the sigmoid's knee).
Tensor gates(int64_t n) {
  Tensor g = random_tensor({n}, 1, 0.0f, 3.0f);
  const float fixed[] = {-1000.0f, -120.0f, -89.0f, -88.0f, -87.5f, -87.0f, -60.0f, -20.0f, -5.0f, -1.0f, -1e-3f,
                         0.0f,     1e-3f,   1.0f,   5.0f,   20.0f,  60.0f,  87.5f,  89.0f,  120.0f, 1000.0f};
  for (size_t i = 0; i < std::size(fixed) && static_cast<int64_t>(i) < n; ++i) g.data<float>()[i] = fixed[i];
  return g;
}

// Per element: |got - want| <= tol * scale + 1e-30, scale >= |want| being the size of the terms
// that make want (where they cancel, the result is good to their size only); 1e-30: where the
// sigmoid is below float's normal range the kernel may return 0.
void expect_close(const Tensor& got, const std::vector<double>& want, const std::vector<double>& scale, double tol,
                  const char* what) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got.data<float>()[i];
    if (!(std::fabs(g - want[i]) <= tol * scale[i] + 1e-30) && bad++ < 5)  // NaN fails too
      ADD_FAILURE() << what << "[" << i << "] = " << g << ", want " << want[i];
  }
}

std::vector<double> magnitudes(const std::vector<double>& v) {
  std::vector<double> m(v.size());
  for (size_t i = 0; i < v.size(); ++i) m[i] = std::fabs(v[i]);
  return m;
}

class SwiGlu : public ::testing::TestWithParam<int64_t> {};

TEST_P(SwiGlu, ForwardMatchesDoubleReference) {
  const int64_t n = GetParam();
  const Tensor gate = gates(n), up = random_tensor({n}, 2);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate.data<float>()[i];
    want[i] = g * sigmoid(g) * up.data<float>()[i];
  }
  for (int threads : {1, 3}) {
    Threads scope(threads);
    SCOPED_TRACE(testing::Message() << "threads " << threads);
    Tensor out = Tensor::empty({n});
    tessera::ops::swiglu_forward(out, gate, up);
    expect_close(out, want, magnitudes(want), 1e-6, "out");
  }
}

// d out / d gate = up silu'(g), silu'(g) = s (1 + g (1 - s)); d out / d up = silu(g); both times
// dout. Written apart, and with dgate over dout (the MLP's buffer reused).
TEST_P(SwiGlu, BackwardMatchesDoubleReference) {
  const int64_t n = GetParam();
  const Tensor gate = gates(n), up = random_tensor({n}, 3), dout = random_tensor({n}, 4);
  std::vector<double> want_dgate(n), want_dup(n), dgate_scale(n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate.data<float>()[i], s = sigmoid(g), dy = dout.data<float>()[i];
    want_dup[i] = dy * g * s;
    want_dgate[i] = dy * up.data<float>()[i] * s * (1.0 + g * (1.0 - s));
    dgate_scale[i] = std::fabs(dy * up.data<float>()[i]) * s * (1.0 + std::fabs(g) * (1.0 - s));
  }
  for (int threads : {1, 3}) {
    Threads scope(threads);
    for (bool alias : {false, true}) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << (alias ? ", dgate over dout" : ""));
      Tensor dgate = alias ? dout.clone() : Tensor::empty({n}), dup = Tensor::empty({n});
      const Tensor dy = alias ? dgate : dout;
      tessera::ops::swiglu_backward(dgate, dup, dy, gate, up);
      expect_close(dgate, want_dgate, dgate_scale, 2e-6, "dgate");
      expect_close(dup, want_dup, magnitudes(want_dup), 1e-6, "dup");
    }
  }
}

// Below the fixed sweep's length; odd; above the kernels' 1 << 14 elements (the threaded path).
INSTANTIATE_TEST_SUITE_P(Sizes, SwiGlu, ::testing::Values(int64_t{7}, int64_t{1001}, int64_t{70001}),
                         [](const auto& info) { return std::to_string(info.param) + "_elements"; });


TEST(SwiGluShapes, RefusesShapesThatDoNotFit) {
  const Tensor g = random_tensor({4, 6}, 5), u = random_tensor({4, 5}, 6);
  Tensor out = Tensor::empty({4, 6}), dg = Tensor::empty({4, 6}), du = Tensor::empty({4, 5});
  expect_error([&] { tessera::ops::swiglu_forward(out, g, u); }, "swiglu_forward: shapes do not fit");
  expect_error([&] { tessera::ops::swiglu_backward(dg, du, out, g, g); }, "swiglu_backward: shapes do not fit");
}

}  // namespace
