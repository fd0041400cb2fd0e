// Unit tests of the CPU classifier loss (ops::classifier_xent_forward/backward): losses and lse
// against a double reference of the label-smoothed cross-entropy, with ignored labels and large
// logits, on 1 and 3 threads; the in-place backward against central finite differences
// (gradcheck.h); smoothing 0 is the plain softmax cross-entropy; bad labels and smoothing throw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "gradcheck.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::DType;
using tessera::Tensor;
namespace gc = tessera::testing;
using Threads = tessera::testing::ScopedThreads;

namespace {

struct Case {
  int64_t rows, classes;
  float smoothing, offset;  // offset: added to every logit (softmax must neither overflow nor lose precision)
};

class ClassifierXent : public ::testing::TestWithParam<Case> {};

// Logits N(offset, 2^2); labels in [0, K), every fourth row ignored (-1).
void make_inputs(const Case& c, Tensor& logits, Tensor& labels) {
  logits = gc::random_tensor({c.rows, c.classes}, 23, 1, c.offset, 2.0f);
  labels = Tensor::empty({c.rows}, DType::i32);
  for (int64_t r = 0; r < c.rows; ++r)
    labels.data<int32_t>()[r] =
        r % 4 == 2 ? -1 : static_cast<int32_t>(tessera::philox_uniform(23, 2, r) * static_cast<double>(c.classes));
}

// -sum_j q_j log p_j with q = (1 - eps) onehot + eps / K, in double; 0 for an ignored row.
double loss_ref(const float* x, int64_t k, int32_t label, double eps, double* lse_out = nullptr) {
  double mx = -INFINITY, s = 0;
  for (int64_t j = 0; j < k; ++j) mx = std::max(mx, static_cast<double>(x[j]));
  for (int64_t j = 0; j < k; ++j) s += std::exp(x[j] - mx);
  const double lse = mx + std::log(s);
  if (lse_out) *lse_out = lse;
  if (label < 0) return 0.0;
  double loss = 0;
  for (int64_t j = 0; j < k; ++j) loss -= ((j == label ? 1.0 - eps : 0.0) + eps / k) * (x[j] - lse);
  return loss;
}

TEST_P(ClassifierXent, ForwardMatchesDoubleReference) {
  const Case c = GetParam();
  Tensor logits, labels;
  make_inputs(c, logits, labels);
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor losses = Tensor::empty({c.rows}), lse = Tensor::empty({c.rows});
    tessera::ops::classifier_xent_forward(losses, lse, logits, labels, c.smoothing);
    for (int64_t r = 0; r < c.rows; ++r) {
      double lse_ref = 0;
      const int32_t y = labels.data<int32_t>()[r];
      const double want = loss_ref(logits.data<float>() + r * c.classes, c.classes, y, c.smoothing, &lse_ref);
      EXPECT_NEAR(lse.data<float>()[r], lse_ref, 1e-6 * (std::fabs(lse_ref) + 1.0)) << "row " << r;
      // Relative to the maximum, the loss keeps its precision whatever the offset.
      EXPECT_NEAR(losses.data<float>()[r], want, 2e-6 * (want + 1.0)) << "row " << r;
      if (y < 0) {
        EXPECT_EQ(losses.data<float>()[r], 0.0f);
      }
    }
  }
}

// L = scale * sum_r loss_r: the in-place backward against central differences of the float
// forward (gradcheck.h, every element), ignored rows exactly 0.
TEST_P(ClassifierXent, InPlaceBackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  const float scale = 1.0f / 3.0f;
  Tensor logits, labels;
  make_inputs(c, logits, labels);
  // The forward in double from the float logits: the finite differences then see no fp32 rounding.
  auto f = [&] {
    double sum = 0;
    for (int64_t r = 0; r < c.rows; ++r)
      sum += loss_ref(logits.data<float>() + r * c.classes, c.classes, labels.data<int32_t>()[r], c.smoothing);
    return scale * sum;
  };
  const auto idx = gc::sample_indices(logits.numel(), 600);
  const std::vector<double> numeric = gc::numeric_grad(logits.data<float>(), idx, 1.0f / 64, f);
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor work = logits.clone();
    Tensor losses = Tensor::empty({c.rows}), lse = Tensor::empty({c.rows});
    tessera::ops::classifier_xent_forward(losses, lse, work, labels, c.smoothing);
    tessera::ops::classifier_xent_backward(work, work, labels, lse, c.smoothing, scale);
    const gc::Comparison cmp = gc::compare(gc::gather(work, idx), numeric);
    gc::report("classifier_xent.dlogits", cmp);
    EXPECT_LT(cmp.rel_err, 1e-5) << threads << " threads";
    for (int64_t r = 0; r < c.rows; ++r) {
      double row_sum = 0;
      for (int64_t j = 0; j < c.classes; ++j) {
        const float g = work.data<float>()[r * c.classes + j];
        if (labels.data<int32_t>()[r] < 0) {
          ASSERT_EQ(g, 0.0f) << "ignored row " << r;
        }
        row_sum += g;
      }
      // softmax and the smoothed target both sum to 1: each row's gradient sums to 0 (up to the
      // rounding of x - lse, which grows with the logits' size, and of the sum over K terms).
      EXPECT_NEAR(row_sum, 0.0, 1e-7 * (std::sqrt(static_cast<double>(c.classes)) + std::fabs(c.offset)))
          << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Classifiers, ClassifierXent,
                         ::testing::Values(Case{8, 10, 0.1f, 0.0f},      // CIFAR-10 with smoothing
                                           Case{5, 3, 0.0f, 0.0f},       // no smoothing
                                           Case{6, 2, 0.5f, 0.0f},       // two classes, strong smoothing
                                           Case{7, 10, 0.1f, 80.0f},     // near exp overflow
                                           Case{9, 17, 0.2f, -90.0f},    // and underflow
                                           Case{40, 1000, 0.1f, 0.0f}),  // threaded
                         [](const auto& info) { return "case" + std::to_string(info.index); });

// Without smoothing the loss and its gradient are those of ops::softmax_xent (the LM loss).
TEST(ClassifierXentOps, NoSmoothingIsThePlainCrossEntropy) {
  Tensor logits, labels;
  make_inputs({12, 7, 0.0f, 0.0f}, logits, labels);
  Tensor a = Tensor::empty({12}), lse_a = Tensor::empty({12}), b = Tensor::empty({12}), lse_b = Tensor::empty({12});
  tessera::ops::classifier_xent_forward(a, lse_a, logits, labels, 0.0f);
  tessera::ops::softmax_xent_forward(b, lse_b, logits, labels, 7);
  Tensor da = Tensor::empty({12, 7}), db = Tensor::empty({12, 7});
  tessera::ops::classifier_xent_backward(da, logits, labels, lse_a, 0.0f, 0.5f);
  tessera::ops::softmax_xent_backward(db, logits, labels, lse_b, 7, 0.5f);
  for (int64_t r = 0; r < 12; ++r) {
    EXPECT_NEAR(a.data<float>()[r], b.data<float>()[r], 1e-6) << r;
    EXPECT_EQ(lse_a.data<float>()[r], lse_b.data<float>()[r]) << r;
  }
  for (int64_t i = 0; i < da.numel(); ++i) EXPECT_NEAR(da.data<float>()[i], db.data<float>()[i], 1e-7) << i;
}

TEST(ClassifierXentOps, RejectsBadLabelsSmoothingAndShapes) {
  const Tensor logits = Tensor::zeros({2, 5});
  Tensor labels = Tensor::empty({2}, DType::i32);
  labels.data<int32_t>()[0] = 4;
  labels.data<int32_t>()[1] = 5;  // 5 classes: labels 0..4
  Tensor losses = Tensor::empty({2}), lse = Tensor::empty({2});
  EXPECT_THROW(tessera::ops::classifier_xent_forward(losses, lse, logits, labels, 0.1f), tessera::Error);
  labels.data<int32_t>()[1] = -7;  // ignored
  EXPECT_NO_THROW(tessera::ops::classifier_xent_forward(losses, lse, logits, labels, 0.1f));
  EXPECT_THROW(tessera::ops::classifier_xent_forward(losses, lse, logits, labels, 1.0f), tessera::Error);
  EXPECT_THROW(tessera::ops::classifier_xent_forward(losses, lse, logits, labels, -0.1f), tessera::Error);
  Tensor short_lse = Tensor::empty({1});
  EXPECT_THROW(tessera::ops::classifier_xent_forward(losses, short_lse, logits, labels, 0.1f), tessera::Error);
  // Uniform logits: the loss is log K whatever the smoothing.
  tessera::ops::classifier_xent_forward(losses, lse, logits, labels, 0.3f);
  EXPECT_NEAR(losses.data<float>()[0], std::log(5.0), 1e-6);
  EXPECT_EQ(losses.data<float>()[1], 0.0f);
}

}  // namespace
