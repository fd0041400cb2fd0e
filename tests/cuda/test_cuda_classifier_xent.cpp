// CUDA classifier loss (label-smoothed softmax cross-entropy) against the CPU twin, with ignored
// labels: losses and lse within 1e-5 + 1e-5 |x|, dlogits within 1e-7 + 1e-5 |x|, ignored rows
// exactly 0, in place bit-equal to out of place; a label past the classes throws.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

TEST(CudaClassifierXent, ForwardAndBackwardMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  struct Case {
    int64_t rows, classes;
    float smoothing, std;
  };
  for (const Case& c : {Case{37, 10, 0.1f, 3.0f}, Case{5, 1000, 0.2f, 4.0f}, Case{256, 2, 0.0f, 1.0f},
                        Case{3, 1, 0.5f, 1.0f}, Case{64, 100, 0.1f, 30.0f}}) {
    SCOPED_TRACE(testing::Message() << c.rows << " rows, " << c.classes << " classes, smoothing " << c.smoothing);
    const auto logits = normal(c.rows * c.classes, 91, c.std);
    const auto u = normal(c.rows, 92);
    std::vector<int32_t> labels(c.rows);
    for (int64_t r = 0; r < c.rows; ++r)
      labels[r] = r % 5 == 2 ? -1 : static_cast<int32_t>(static_cast<int64_t>(std::fabs(u[r]) * 7919.0f) % c.classes);
    DeviceBuffer<float> d_logits(logits), d_losses(c.rows), d_lse(c.rows), d_dlogits(logits.size());
    DeviceBuffer<int32_t> d_labels(labels);
    d_dlogits.fill_bytes(0xff);
    std::vector<float> losses(c.rows), lse(c.rows), dlogits(logits.size());

    cpu::classifier_xent_forward(losses.data(), lse.data(), logits.data(), labels.data(), c.rows, c.classes,
                                 c.smoothing);
    gpu::classifier_xent_forward(d_losses.get(), d_lse.get(), d_logits.get(), d_labels.get(), c.rows, c.classes,
                                 c.smoothing);
    EXPECT_TRUE(all_close(d_losses.host(), losses, 1e-5, 1e-5)) << "losses";
    EXPECT_TRUE(all_close(d_lse.host(), lse, 1e-5, 1e-5)) << "lse";

    const float scale = 1.0f / static_cast<float>(c.rows);
    cpu::classifier_xent_backward(dlogits.data(), logits.data(), labels.data(), lse.data(), c.rows, c.classes,
                                  c.smoothing, scale);
    gpu::classifier_xent_backward(d_dlogits.get(), d_logits.get(), d_labels.get(), d_lse.get(), c.rows, c.classes,
                                  c.smoothing, scale);
    const auto got = d_dlogits.host();
    EXPECT_TRUE(all_close(got, dlogits, 1e-7, 1e-5)) << "dlogits";
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.classes && labels[r] < 0; ++j) ASSERT_EQ(got[r * c.classes + j], 0.0f) << "row " << r;

    gpu::classifier_xent_backward(d_logits.get(), d_logits.get(), d_labels.get(), d_lse.get(), c.rows, c.classes,
                                  c.smoothing, scale);
    EXPECT_TRUE(bit_equal(d_logits.host(), got)) << "in place differs from out of place";
  }
}

TEST(CudaClassifierXent, LabelPastTheClassesThrows) {
  TESSERA_REQUIRE_CUDA();
  const int64_t rows = 4, classes = 10;
  DeviceBuffer<float> logits(normal(rows * classes, 93)), losses(rows), lse(rows);
  DeviceBuffer<int32_t> labels(std::vector<int32_t>{1, -1, 10, 3});
  EXPECT_THROW(gpu::classifier_xent_forward(losses.get(), lse.get(), logits.get(), labels.get(), rows, classes, 0.1f),
               tessera::Error);
}
