// CUDA softmax cross-entropy against the CPU twin over a padded vocabulary with ignored targets:
// losses and lse within 1e-5 + 1e-5 |x|, dlogits within 1e-7 + 1e-5 |x| (out of place and in
// place); padding columns and ignored rows exactly 0; a target past the vocabulary throws.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

namespace {

std::vector<int32_t> targets_for(int64_t rows, int64_t valid_vocab) {
  std::vector<int32_t> t(rows);
  const auto u = normal(rows, 51);
  for (int64_t r = 0; r < rows; ++r)
    t[r] = r % 7 == 3 ? -1 : static_cast<int32_t>(static_cast<int64_t>(std::fabs(u[r]) * 7919.0f) % valid_vocab);
  return t;
}

}  // namespace

TEST(CudaSoftmaxXent, ForwardAndBackwardMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  struct Case {
    int64_t rows, padded, valid;
  };
  for (const Case& c : {Case{37, 1024, 1000}, Case{5, 50304, 50257}, Case{64, 96, 96}, Case{1, 1, 1}}) {
    SCOPED_TRACE(testing::Message() << c.rows << " rows, vocab " << c.valid << " padded to " << c.padded);
    const auto logits = normal(c.rows * c.padded, 52, 4.0f);
    const auto targets = targets_for(c.rows, c.valid);
    std::vector<float> losses(c.rows), lse(c.rows), dlogits(c.rows * c.padded);
    DeviceBuffer<float> dlog(logits), dlosses(c.rows), dlse(c.rows), ddlog(c.rows * c.padded);
    DeviceBuffer<int32_t> dtargets(targets);
    ddlog.fill_bytes(0xff);

    cpu::softmax_xent_forward(losses.data(), lse.data(), logits.data(), targets.data(), c.rows, c.padded, c.valid);
    gpu::softmax_xent_forward(dlosses.get(), dlse.get(), dlog.get(), dtargets.get(), c.rows, c.padded, c.valid);
    EXPECT_TRUE(all_close(dlosses.host(), losses, 1e-5, 1e-5)) << "losses";
    EXPECT_TRUE(all_close(dlse.host(), lse, 1e-5, 1e-5)) << "lse";

    const float scale = 1.0f / static_cast<float>(c.rows);
    cpu::softmax_xent_backward(dlogits.data(), logits.data(), targets.data(), lse.data(), c.rows, c.padded, c.valid,
                               scale);
    gpu::softmax_xent_backward(ddlog.get(), dlog.get(), dtargets.get(), dlse.get(), c.rows, c.padded, c.valid, scale);
    const auto got = ddlog.host();
    EXPECT_TRUE(all_close(got, dlogits, 1e-7, 1e-5)) << "dlogits";
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.padded; ++j)
        if (targets[r] < 0 || j >= c.valid) {
          ASSERT_EQ(got[r * c.padded + j], 0.0f) << "row " << r << " column " << j;
        }

    gpu::softmax_xent_backward(dlog.get(), dlog.get(), dtargets.get(), dlse.get(), c.rows, c.padded, c.valid, scale);
    EXPECT_TRUE(bit_equal(dlog.host(), got)) << "in place differs from out of place";
  }
}

TEST(CudaSoftmaxXent, TargetPastVocabularyThrows) {
  TESSERA_REQUIRE_CUDA();
  const int64_t rows = 4, padded = 16, valid = 10;
  DeviceBuffer<float> logits(normal(rows * padded, 53)), losses(rows), lse(rows), dlogits(rows * padded);
  DeviceBuffer<int32_t> targets(std::vector<int32_t>{1, -1, 10, 3});
  EXPECT_THROW(gpu::softmax_xent_forward(losses.get(), lse.get(), logits.get(), targets.get(), rows, padded, valid),
               tessera::Error);
  EXPECT_THROW(gpu::softmax_xent_backward(dlogits.get(), logits.get(), targets.get(), lse.get(), rows, padded, valid,
                                          1.0f),
               tessera::Error);
}
