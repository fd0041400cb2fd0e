// CUDA token kernels of a vision transformer against the CPU twins, bit for bit (both copy, or
// add in the same order): image_to_patches over square, oblong and one-patch images;
// image_tokens_forward/backward with and without a class token (the backward accumulating onto
// nonzero dcls / dpos, dproj overwritten); token_pool_forward/backward, first and mean.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

TEST(CudaPatches, ImageToPatchesMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  struct Case {
    int64_t batch, height, width, channels, patch;
  };
  for (const Case& c : {Case{2, 8, 8, 3, 4}, Case{3, 6, 9, 2, 3}, Case{4, 4, 4, 3, 4}, Case{1, 5, 5, 1, 1},
                        Case{64, 32, 32, 3, 4}, Case{8, 224, 224, 3, 16}}) {
    SCOPED_TRACE(testing::Message() << c.batch << " x " << c.height << " x " << c.width << " x " << c.channels
                                    << ", patch " << c.patch);
    const size_t n = c.batch * c.height * c.width * c.channels;
    const auto images = normal(n, 81);
    std::vector<float> patches(n);
    DeviceBuffer<float> d_images(images), d_patches(n);
    d_patches.fill_bytes(0xff);
    cpu::image_to_patches(patches.data(), images.data(), c.batch, c.height, c.width, c.channels, c.patch);
    gpu::image_to_patches(d_patches.get(), d_images.get(), c.batch, c.height, c.width, c.channels, c.patch);
    EXPECT_TRUE(bit_equal(d_patches.host(), patches));
  }
}

TEST(CudaPatches, ImageTokensMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  struct Case {
    int64_t batch, patches, channels;
    bool cls;
  };
  for (const Case& c : {Case{2, 4, 16, true}, Case{2, 4, 16, false}, Case{3, 9, 5, true}, Case{1, 1, 1, true},
                        Case{128, 64, 256, true}, Case{128, 196, 384, false}}) {
    SCOPED_TRACE(testing::Message() << "B " << c.batch << " P " << c.patches << " C " << c.channels
                                    << (c.cls ? " with" : " without") << " a class token");
    const int64_t tokens = c.patches + (c.cls ? 1 : 0), out_n = c.batch * tokens * c.channels;
    const auto proj = normal(c.batch * c.patches * c.channels, 82), pos = normal(tokens * c.channels, 83);
    const auto cls = normal(c.channels, 84), dout = normal(out_n, 85);
    DeviceBuffer<float> d_proj(proj), d_pos(pos), d_cls(cls), d_dout(dout), d_out(out_n);
    d_out.fill_bytes(0xff);
    std::vector<float> out(out_n);
    cpu::image_tokens_forward(out.data(), proj.data(), c.cls ? cls.data() : nullptr, pos.data(), c.batch, c.patches,
                              c.channels);
    gpu::image_tokens_forward(d_out.get(), d_proj.get(), c.cls ? d_cls.get() : nullptr, d_pos.get(), c.batch,
                              c.patches, c.channels);
    EXPECT_TRUE(bit_equal(d_out.host(), out)) << "forward";

    std::vector<float> dproj(proj.size()), dpos = normal(pos.size(), 86), dcls = normal(cls.size(), 87);
    DeviceBuffer<float> d_dproj(proj.size()), d_dpos(dpos), d_dcls(dcls);
    d_dproj.fill_bytes(0xff);
    cpu::image_tokens_backward(dproj.data(), c.cls ? dcls.data() : nullptr, dpos.data(), dout.data(), c.batch,
                               c.patches, c.channels);
    gpu::image_tokens_backward(d_dproj.get(), c.cls ? d_dcls.get() : nullptr, d_dpos.get(), d_dout.get(), c.batch,
                               c.patches, c.channels);
    EXPECT_TRUE(bit_equal(d_dproj.host(), dproj)) << "dproj";
    EXPECT_TRUE(bit_equal(d_dpos.host(), dpos)) << "dpos";
    EXPECT_TRUE(bit_equal(d_dcls.host(), dcls)) << "dcls (untouched without a class token)";
  }
}

TEST(CudaPatches, TokenPoolMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  struct Case {
    int64_t batch, tokens, channels;
  };
  for (const Case& c : {Case{2, 5, 16}, Case{3, 1, 7}, Case{128, 65, 256}, Case{64, 197, 384}}) {
    for (const bool mean : {false, true}) {
      SCOPED_TRACE(testing::Message() << "B " << c.batch << " T " << c.tokens << " C " << c.channels
                                      << (mean ? " mean" : " first"));
      const int64_t n = c.batch * c.tokens * c.channels, pooled_n = c.batch * c.channels;
      const auto x = normal(n, 88), dpooled = normal(pooled_n, 89);
      DeviceBuffer<float> d_x(x), d_dpooled(dpooled), d_pooled(pooled_n), d_dx(n);
      d_pooled.fill_bytes(0xff);
      d_dx.fill_bytes(0xff);
      std::vector<float> pooled(pooled_n), dx(n);
      cpu::token_pool_forward(pooled.data(), x.data(), c.batch, c.tokens, c.channels, mean);
      gpu::token_pool_forward(d_pooled.get(), d_x.get(), c.batch, c.tokens, c.channels, mean);
      EXPECT_TRUE(bit_equal(d_pooled.host(), pooled)) << "forward";
      cpu::token_pool_backward(dx.data(), dpooled.data(), c.batch, c.tokens, c.channels, mean);
      gpu::token_pool_backward(d_dx.get(), d_dpooled.get(), c.batch, c.tokens, c.channels, mean);
      EXPECT_TRUE(bit_equal(d_dx.host(), dx)) << "backward";
    }
  }
}
