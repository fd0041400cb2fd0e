// CUDA softmax cross-entropy against the CPU twin over a padded vocabulary with ignored targets:
// losses and lse within 1e-5 + 1e-5 |x|, dlogits within 1e-7 + 1e-5 |x| (out of place and in
// place); padding columns and ignored rows exactly 0; the vocab-parallel pieces (row maxima, partial
// sums, a shard's backward); a target past the vocabulary throws (the forwards check targets).
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
                               scale, 0);
    gpu::softmax_xent_backward(ddlog.get(), dlog.get(), dtargets.get(), dlse.get(), c.rows, c.padded, c.valid, scale,
                               0);
    const auto got = ddlog.host();
    EXPECT_TRUE(all_close(got, dlogits, 1e-7, 1e-5)) << "dlogits";
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.padded; ++j)
        if (targets[r] < 0 || j >= c.valid) {
          ASSERT_EQ(got[r * c.padded + j], 0.0f) << "row " << r << " column " << j;
        }

    gpu::softmax_xent_backward(dlog.get(), dlog.get(), dtargets.get(), dlse.get(), c.rows, c.padded, c.valid, scale,
                               0);
    EXPECT_TRUE(bit_equal(dlog.host(), got)) << "in place differs from out of place";
  }
}

// The vocab-parallel pieces on a shard of the vocabulary (ids [start, start + valid) in a
// [rows, width] slice, some rows' targets outside it): row maxima, the partial sums given a
// maximum, and the shard's backward given an lse, against the CPU twins.
TEST(CudaSoftmaxXent, VocabParallelPiecesMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  struct Case {
    int64_t rows, width, valid, start, vocab;
  };
  for (const Case& c : {Case{37, 512, 512, 512, 1000}, Case{9, 128, 72, 128, 200}, Case{4, 64, 0, 256, 201}}) {
    SCOPED_TRACE(testing::Message() << c.rows << " rows, shard at " << c.start << " of vocab " << c.vocab);
    const auto logits = normal(c.rows * c.width, 54, 4.0f);
    const auto targets = targets_for(c.rows, c.vocab);
    DeviceBuffer<float> dlog(logits), dmax(c.rows), dsums(2 * c.rows), ddlog(c.rows * c.width);
    DeviceBuffer<int32_t> dtargets(targets);
    std::vector<float> max(c.rows), sums(2 * c.rows), lse(c.rows), dlogits(c.rows * c.width);

    cpu::softmax_xent_row_max(max.data(), logits.data(), c.rows, c.width, c.valid);
    gpu::softmax_xent_row_max(dmax.get(), dlog.get(), c.rows, c.width, c.valid);
    EXPECT_TRUE(bit_equal(dmax.host(), max)) << "row maxima";

    for (int64_t r = 0; r < c.rows; ++r) max[r] = c.valid > 0 ? max[r] + 0.5f : 1.0f;  // a "global" maximum
    DeviceBuffer<float> dglobal(max);
    cpu::softmax_xent_partial(sums.data(), logits.data(), targets.data(), max.data(), c.rows, c.width, c.valid, c.start,
                              c.vocab);
    gpu::softmax_xent_partial(dsums.get(), dlog.get(), dtargets.get(), dglobal.get(), c.rows, c.width, c.valid, c.start,
                              c.vocab);
    EXPECT_TRUE(all_close(dsums.host(), sums, 1e-6, 1e-5)) << "partial sums";

    for (int64_t r = 0; r < c.rows; ++r) lse[r] = max[r] + 2.0f;
    DeviceBuffer<float> dlse(lse);
    cpu::softmax_xent_backward(dlogits.data(), logits.data(), targets.data(), lse.data(), c.rows, c.width, c.valid,
                               0.5f, c.start);
    gpu::softmax_xent_backward(ddlog.get(), dlog.get(), dtargets.get(), dlse.get(), c.rows, c.width, c.valid, 0.5f,
                               c.start);
    EXPECT_TRUE(all_close(ddlog.host(), dlogits, 1e-7, 1e-5)) << "shard backward";
  }
}

TEST(CudaSoftmaxXent, TargetPastVocabularyThrows) {
  TESSERA_REQUIRE_CUDA();
  const int64_t rows = 4, padded = 16, valid = 10;
  DeviceBuffer<float> logits(normal(rows * padded, 53)), losses(rows), lse(rows), dlogits(rows * padded);
  DeviceBuffer<int32_t> targets(std::vector<int32_t>{1, -1, 10, 3});
  EXPECT_THROW(gpu::softmax_xent_forward(losses.get(), lse.get(), logits.get(), targets.get(), rows, padded, valid),
               tessera::Error);
  EXPECT_THROW(gpu::softmax_xent_partial(dlogits.get(), logits.get(), targets.get(), lse.get(), rows, padded, valid, 0,
                                         valid),
               tessera::Error);
}
