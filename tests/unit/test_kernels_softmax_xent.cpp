// Unit tests of the CPU softmax cross-entropy through ops::softmax_xent_forward/backward: a padded
// vocabulary (padding masked), ignored targets (< 0), large logits, the in-place backward, the
// gradient against central finite differences of the double loss, a target past the vocabulary,
// and the vocab-parallel pieces (row maxima, partial sums, shard backward) against the whole.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::DType;
using tessera::Shape;
using tessera::Tensor;

namespace {

using Threads = tessera::testing::ScopedThreads;

struct Case {
  int64_t rows, padded, valid;
  float offset;  // added to every logit: softmax must not overflow
};

class CrossEntropy : public ::testing::TestWithParam<Case> {};

// Logits N(offset, 3^2) with padding columns holding huge values (masked, so they must not matter);
// targets in [0, valid) with every third row ignored (-1, or -100 as PyTorch writes it).
void make_inputs(const Case& c, Tensor& logits, Tensor& targets) {
  logits = Tensor::empty({c.rows, c.padded});
  tessera::philox_fill_normal(logits.data<float>(), logits.numel(), 11, 1, 0, c.offset, 3.0f);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = c.valid; j < c.padded; ++j) logits.data<float>()[r * c.padded + j] = 1e4f;
  targets = Tensor::empty({c.rows}, DType::i32);
  for (int64_t r = 0; r < c.rows; ++r)
    targets.data<int32_t>()[r] =
        r % 3 == 1 ? (r % 2 ? -1 : -100) : static_cast<int32_t>(tessera::philox_uniform(11, 2, r) * c.valid);
}

// lse and loss per row in double (loss 0 for ignored rows).
void forward_ref(const Case& c, const std::vector<double>& x, const int32_t* targets, std::vector<double>& lse,
                 std::vector<double>& loss) {
  lse.assign(c.rows, 0.0);
  loss.assign(c.rows, 0.0);
  for (int64_t r = 0; r < c.rows; ++r) {
    double mx = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < c.valid; ++j) mx = std::max(mx, x[r * c.padded + j]);
    for (int64_t j = 0; j < c.valid; ++j) s += std::exp(x[r * c.padded + j] - mx);
    lse[r] = mx + std::log(s);
    loss[r] = targets[r] >= 0 ? lse[r] - x[r * c.padded + targets[r]] : 0.0;
  }
}

TEST_P(CrossEntropy, ForwardMatchesDoubleReference) {
  const Case c = GetParam();
  Tensor logits, targets;
  make_inputs(c, logits, targets);
  std::vector<double> lse_ref, loss_ref;
  forward_ref(c, {logits.data<float>(), logits.data<float>() + logits.numel()}, targets.data<int32_t>(), lse_ref,
              loss_ref);
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor losses = Tensor::empty({c.rows}), lse = Tensor::empty({c.rows});
    tessera::ops::softmax_xent_forward(losses, lse, logits, targets, c.valid);
    for (int64_t r = 0; r < c.rows; ++r) {
      // lse is O(offset): relative 1e-6; the loss is a difference of two O(offset) numbers.
      EXPECT_NEAR(lse.data<float>()[r], lse_ref[r], 1e-6 * (std::fabs(lse_ref[r]) + 1.0)) << "row " << r;
      EXPECT_NEAR(losses.data<float>()[r], loss_ref[r], 1e-6 * (std::fabs(lse_ref[r]) + 1.0)) << "row " << r;
      if (targets.data<int32_t>()[r] < 0) {
        EXPECT_EQ(losses.data<float>()[r], 0.0f);
      }
    }
  }
}

// L = scale * sum_r loss_r; dlogits against central differences of the double L, computed in
// place (dlogits is the logits tensor itself); padding columns and ignored rows must be 0.
TEST_P(CrossEntropy, InPlaceBackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  const float scale = 1.0f / 7.0f;
  Tensor logits, targets;
  make_inputs(c, logits, targets);
  std::vector<double> x(logits.data<float>(), logits.data<float>() + logits.numel());
  // L is a sum over rows: a logit of row r moves only row r's term, so only that term is evaluated.
  auto row_loss = [&](int64_t r) {
    const int32_t t = targets.data<int32_t>()[r];
    if (t < 0) return 0.0;
    const double* row = x.data() + r * c.padded;
    double mx = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < c.valid; ++j) mx = std::max(mx, row[j]);
    for (int64_t j = 0; j < c.valid; ++j) s += std::exp(row[j] - mx);
    return scale * (mx + std::log(s) - row[t]);
  };
  std::vector<double> grad(x.size(), 0.0);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = 0; j < c.valid; ++j) {
      const size_t i = r * c.padded + j;
      const double keep = x[i];
      x[i] = keep + 1e-4;
      const double up = row_loss(r);
      x[i] = keep - 1e-4;
      const double down = row_loss(r);
      x[i] = keep;
      grad[i] = (up - down) / 2e-4;
    }
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor work = logits.clone();
    Tensor losses = Tensor::empty({c.rows}), lse = Tensor::empty({c.rows});
    tessera::ops::softmax_xent_forward(losses, lse, work, targets, c.valid);
    tessera::ops::softmax_xent_backward(work, work, targets, lse, c.valid, scale);
    for (int64_t r = 0; r < c.rows; ++r) {
      const bool ignored = targets.data<int32_t>()[r] < 0;
      for (int64_t j = 0; j < c.padded; ++j) {
        const float got = work.data<float>()[r * c.padded + j];
        if (ignored || j >= c.valid) {
          ASSERT_EQ(got, 0.0f) << "row " << r << " col " << j;
        } else {
          // Probabilities are in [0, 1]: absolute error against the scale, and relative.
          ASSERT_NEAR(got, grad[r * c.padded + j], 2e-6 * scale + 1e-5 * std::fabs(grad[r * c.padded + j]))
              << "row " << r << " col " << j;
        }
      }
    }
  }
}

// The vocab-parallel pieces (what nn::LmHead does over a tensor-parallel group, here with the
// group's all-reduces done by hand): shards of the padded vocabulary, each with its row maxima and
// sums, combine to the whole vocabulary's lse and losses; each shard's backward with the combined
// lse equals its columns of the whole backward. 1 to 4 shards, some holding only padding.
TEST_P(CrossEntropy, VocabParallelShardsEqualTheWholeVocabulary) {
  const Case c = GetParam();
  Tensor logits, targets;
  make_inputs(c, logits, targets);
  Tensor losses = Tensor::empty({c.rows}), lse = Tensor::empty({c.rows});
  tessera::ops::softmax_xent_forward(losses, lse, logits, targets, c.valid);
  const float scale = 0.25f;
  Tensor dwhole = Tensor::empty({c.rows, c.padded});
  tessera::ops::softmax_xent_backward(dwhole, logits, targets, lse, c.valid, scale);
  for (int64_t parts = 1; parts <= 4; ++parts) {
    const int64_t width = (c.padded + parts - 1) / parts;
    std::vector<Tensor> shards;
    Tensor max = Tensor::empty({c.rows});
    std::fill(max.data<float>(), max.data<float>() + c.rows, -INFINITY);
    for (int64_t p = 0; p < parts; ++p) {
      Tensor shard = Tensor::zeros({c.rows, width});
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t j = 0; j < width && p * width + j < c.padded; ++j)
          shard.data<float>()[r * width + j] = logits.data<float>()[r * c.padded + p * width + j];
      const int64_t valid = std::clamp<int64_t>(c.valid - p * width, 0, width);
      Tensor m = Tensor::empty({c.rows});
      tessera::ops::softmax_xent_row_max(m, shard, valid);
      for (int64_t r = 0; r < c.rows; ++r) max.data<float>()[r] = std::max(max.data<float>()[r], m.data<float>()[r]);
      shards.push_back(shard);
    }
    std::vector<double> sum(c.rows, 0.0), target(c.rows, 0.0);
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t valid = std::clamp<int64_t>(c.valid - p * width, 0, width);
      Tensor sums = Tensor::empty({2, c.rows});
      tessera::ops::softmax_xent_partial(sums, shards[p], targets, max, valid, p * width, c.valid);
      for (int64_t r = 0; r < c.rows; ++r) {
        sum[r] += sums.data<float>()[r];
        target[r] += sums.data<float>()[c.rows + r];
      }
    }
    Tensor combined = Tensor::empty({c.rows});
    for (int64_t r = 0; r < c.rows; ++r) {
      const double row_lse = max.data<float>()[r] + std::log(sum[r]);
      combined.data<float>()[r] = static_cast<float>(row_lse);
      EXPECT_NEAR(row_lse, lse.data<float>()[r], 2e-6 * (1 + std::abs(row_lse))) << parts << " shards, row " << r;
      const double loss = targets.data<int32_t>()[r] >= 0 ? row_lse - target[r] : 0.0;
      EXPECT_NEAR(loss, losses.data<float>()[r], 2e-6 * (1 + std::abs(row_lse))) << parts << " shards, row " << r;
    }
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t valid = std::clamp<int64_t>(c.valid - p * width, 0, width);
      Tensor d = Tensor::empty({c.rows, width});
      tessera::ops::softmax_xent_backward(d, shards[p], targets, combined, valid, scale, p * width);
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t j = 0; j < width; ++j) {
          const int64_t col = p * width + j;
          const float want = col < c.padded ? dwhole.data<float>()[r * c.padded + col] : 0.0f;
          // The two lse differ by rounding at most a few ulp of |lse| (large near exp's overflow).
          const float tol = 1e-6f + 2e-7f * std::abs(combined.data<float>()[r]);
          ASSERT_NEAR(d.data<float>()[r * width + j], want, tol) << parts << " shards, row " << r << ", column " << col;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, CrossEntropy,
                         ::testing::Values(Case{1, 16, 16, 0.0f},     // one row, no padding
                                           Case{7, 40, 33, 0.0f},     // padded, odd vocabulary
                                           Case{5, 64, 50, 80.0f},    // logits near exp overflow
                                           Case{9, 24, 17, -90.0f},   // and underflow
                                           Case{12, 520, 515, 0.0f}), // threaded (rows x vocab > 2^12)
                         [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(CrossEntropyOps, RejectsTargetOutsideTheValidVocabulary) {
  Tensor logits = Tensor::zeros({2, 8});
  Tensor targets = Tensor::empty({2}, DType::i32);
  targets.data<int32_t>()[0] = 1;
  targets.data<int32_t>()[1] = 6;  // valid_vocab 6: index 6 is padding
  Tensor losses = Tensor::empty({2}), lse = Tensor::empty({2});
  EXPECT_THROW(tessera::ops::softmax_xent_forward(losses, lse, logits, targets, 6), tessera::Error);
}

}  // namespace
