// copy_rows_bytes (core/allocator.h) on the device (cudaMemcpy2D) against its host branch: the
// same bytes for the shapes sequence parallelism's layout copies use (narrow and wide rows, pitch
// equal to and above the width), and the device bytes between rows untouched.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "cuda_test_util.h"

using namespace tessera;
using namespace tessera::cuda_test;

TEST(CudaCopyRows, MatchesTheHostCopyByteForByte) {
  TESSERA_REQUIRE_CUDA();
  struct Case {
    size_t rows, width, src_pitch, dst_pitch, src_at, dst_at;
  };
  for (const Case& k : {Case{8, 512, 512 * 4, 512, 512, 0}, Case{1000, 256, 768, 512, 256, 128},
                        Case{3, 4096, 4096, 8192, 0, 4096}, Case{64, 12, 48, 12, 36, 0}}) {
    std::vector<uint8_t> src(k.src_at + k.rows * k.src_pitch);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13 + i / 97);
    std::vector<uint8_t> want(k.dst_at + k.rows * k.dst_pitch, 0x5A);
    copy_rows_bytes(want.data() + k.dst_at, k.dst_pitch, src.data() + k.src_at, k.src_pitch, k.width, k.rows,
                    Device::cpu);
    DeviceBuffer<uint8_t> d_src(src);
    DeviceBuffer<uint8_t> d_dst(std::vector<uint8_t>(want.size(), 0x5A));
    copy_rows_bytes(d_dst.get() + k.dst_at, k.dst_pitch, d_src.get() + k.src_at, k.src_pitch, k.width, k.rows,
                    Device::cuda);
    EXPECT_EQ(d_dst.host(), want) << k.rows << " rows of " << k.width << " bytes";
  }
}
