// Unit tests of the CPU AdamW through ops::adamw: three steps with weight decay and grad_scale
// against a scalar double reference written in torch.optim.AdamW's order, on 1 and 3 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Tensor;

namespace {

using Threads = tessera::testing::ScopedThreads;

// torch.optim.AdamW, one element, in double:
//   p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
void adamw_ref(double& p, double g, double& m, double& v, const tessera::ops::AdamWArgs& a) {
  g *= a.grad_scale;
  p *= 1.0 - double(a.lr) * a.weight_decay;
  m = double(a.beta1) * m + (1.0 - a.beta1) * g;
  v = double(a.beta2) * v + (1.0 - a.beta2) * g * g;
  const double bc1 = 1.0 - std::pow(double(a.beta1), double(a.step));
  const double bc2 = 1.0 - std::pow(double(a.beta2), double(a.step));
  p -= double(a.lr) / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + a.eps);
}

TEST(AdamW, ThreeStepsMatchScalarReference) {
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{70001}}) {
    for (int threads : {1, 3}) {
      Threads scope(threads);
      Tensor param = Tensor::empty({n}), m = Tensor::zeros({n}), v = Tensor::zeros({n}), grad = Tensor::empty({n});
      tessera::philox_fill_normal(param.data<float>(), n, 17, 1, 0, 0.0f, 1.0f);
      std::vector<double> p_ref(param.data<float>(), param.data<float>() + n), m_ref(n, 0.0), v_ref(n, 0.0);
      tessera::ops::AdamWArgs args;
      args.lr = 1e-2f;
      args.beta1 = 0.9f;
      args.beta2 = 0.95f;
      args.eps = 1e-8f;
      args.weight_decay = 0.1f;
      args.grad_scale = 0.5f;
      for (int64_t step = 1; step <= 3; ++step) {
        tessera::philox_fill_normal(grad.data<float>(), n, 17, 10 + step, 0, 0.0f, 2.0f);
        args.step = step;
        tessera::ops::adamw(param, grad, m, v, args);
        for (int64_t i = 0; i < n; ++i) adamw_ref(p_ref[i], grad.data<float>()[i], m_ref[i], v_ref[i], args);
      }
      for (int64_t i = 0; i < n; ++i) {
        // One step moves p by ~lr; the wrong bias correction, decay or grad scale moves it by
        // >= 1e-4 relative, far beyond float rounding (1e-6).
        ASSERT_NEAR(param.data<float>()[i], p_ref[i], 1e-6 * (std::fabs(p_ref[i]) + 1e-2)) << "n=" << n << " i=" << i;
        // m can cancel to far below the O(1) gradients it is made of: absolute against those.
        ASSERT_NEAR(m.data<float>()[i], m_ref[i], 1e-6 * (std::fabs(m_ref[i]) + 1.0)) << "i=" << i;
        ASSERT_NEAR(v.data<float>()[i], v_ref[i], 1e-6 * std::fabs(v_ref[i]) + 1e-12) << "i=" << i;
      }
    }
  }
}

// With zero gradients the moments stay zero and only the decoupled weight decay acts.
TEST(AdamW, ZeroGradientOnlyDecays) {
  Tensor param = Tensor::empty({5}), m = Tensor::zeros({5}), v = Tensor::zeros({5}), grad = Tensor::zeros({5});
  for (int i = 0; i < 5; ++i) param.data<float>()[i] = float(i) - 2.0f;
  tessera::ops::AdamWArgs args;
  args.lr = 0.1f;
  args.weight_decay = 0.5f;
  tessera::ops::adamw(param, grad, m, v, args);
  for (int i = 0; i < 5; ++i) {
    EXPECT_FLOAT_EQ(param.data<float>()[i], (float(i) - 2.0f) * 0.95f);
    EXPECT_EQ(m.data<float>()[i], 0.0f);
    EXPECT_EQ(v.data<float>()[i], 0.0f);
  }
}

}  // namespace
