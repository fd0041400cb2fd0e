// copy_rows_bytes (core/allocator.h) on the host: each row's bytes land at its pitch, the bytes
// between rows stay as they were, and zero rows or width copy nothing (its CUDA branch against
// this one: tests/cuda/test_cuda_copy_rows.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "core/allocator.h"

using namespace tessera;

TEST(CopyRowsBytes, RowsLandAtTheirPitchAndTheGapsStay) {
  std::vector<uint8_t> src(7 * 13);
  std::iota(src.begin(), src.end(), 1);
  std::vector<uint8_t> dst(7 * 9, 0xEE);
  // 7 rows of 5 bytes, from offset 2 of rows 13 bytes apart, into rows 9 bytes apart from offset 3.
  copy_rows_bytes(dst.data() + 3, 9, src.data() + 2, 13, 5, 7, Device::cpu);
  for (int r = 0; r < 7; ++r)
    for (int c = 0; c < 9; ++c) {
      const bool copied = c >= 3 && c < 8;
      EXPECT_EQ(dst[r * 9 + c], copied ? src[r * 13 + 2 + (c - 3)] : 0xEE) << "row " << r << ", byte " << c;
    }
}

TEST(CopyRowsBytes, LargeCopiesSplitOverThreadsGiveTheSameBytes) {
  const size_t rows = 4096, width = 200, pitch = 256;  // above the parallel threshold
  std::vector<uint8_t> src(rows * pitch), dst(rows * width, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + i / 251);
  copy_rows_bytes(dst.data(), width, src.data(), pitch, width, rows, Device::cpu);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < width; ++c) ASSERT_EQ(dst[r * width + c], src[r * pitch + c]) << r << ", " << c;
}

TEST(CopyRowsBytes, NothingToCopyTouchesNothing) {
  std::vector<uint8_t> dst(16, 0xAB);
  const std::vector<uint8_t> src(16, 1);
  copy_rows_bytes(dst.data(), 4, src.data(), 4, 0, 4, Device::cpu);
  copy_rows_bytes(dst.data(), 4, src.data(), 4, 4, 0, Device::cpu);
  for (uint8_t b : dst) EXPECT_EQ(b, 0xAB);
}
