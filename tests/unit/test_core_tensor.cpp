// Unit tests of core/tensor and core/allocator: views share storage, bounds and reshape errors, clone/copy semantics, and tracked memory over tensor lifetimes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>

#include "core/allocator.h"
#include "core/error.h"
#include "core/tensor.h"

using tessera::Device;
using tessera::DType;
using tessera::Shape;
using tessera::Tensor;

namespace {

Tensor iota(Shape shape) {
  Tensor t = Tensor::empty(std::move(shape));
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i);
  return t;
}

// Runs f, expecting a tessera::Error whose message contains `word`.
template <typename F>
void expect_error(F&& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "no tessera::Error thrown (expected one mentioning \"" << word << "\")";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << "message: " << e.what();
  }
}

TEST(Tensor, EmptyAndZerosHaveShapeDtypeAndSize) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), Shape({2, 3, 4}));
  EXPECT_EQ(t.dim(1), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.device(), Device::cpu);
  EXPECT_EQ(t.nbytes(), 96u);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u) << "host storage is 64-byte aligned";

  Tensor h = Tensor::zeros({5}, DType::bf16);
  EXPECT_EQ(h.nbytes(), 10u);
  EXPECT_EQ(h.bits16()[4], 0u);
  Tensor i = Tensor::empty({3, 2}, DType::i32);
  EXPECT_EQ(i.nbytes(), 24u);

  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(Tensor::empty({0, 7}).numel(), 0);
  expect_error([] { Tensor::empty({2, -1}); }, "negative");
}

TEST(Tensor, TypedAccessChecksTheDtype) {
  Tensor f = Tensor::empty({4});
  Tensor i = Tensor::empty({4}, DType::i32);
  expect_error([&] { (void)f.data<int32_t>(); }, "f32");
  expect_error([&] { (void)i.data<float>(); }, "i32");
  expect_error([&] { (void)f.bits16(); }, "bits16");
  EXPECT_NO_THROW((void)i.data<int32_t>());
}

TEST(Tensor, ReshapeIsAViewSharingStorage) {
  Tensor a = iota({2, 6});
  Tensor b = a.reshape({3, 4});
  EXPECT_EQ(b.shape(), Shape({3, 4}));
  EXPECT_EQ(b.raw(), a.raw());
  b.data<float>()[5] = -1.0f;
  EXPECT_EQ(a.data<float>()[5], -1.0f);
  Tensor c = a.reshape({12});
  a.data<float>()[11] = 99.0f;
  EXPECT_EQ(c.data<float>()[11], 99.0f);
  expect_error([&] { a.reshape({5, 2}); }, "changes the number of elements");
  expect_error([&] { a.reshape({13}); }, "reshape");
  EXPECT_EQ(a.shape(), Shape({2, 6})) << "a failed reshape leaves the tensor alone";
}

TEST(Tensor, SliceAndRowsAreViewsAtTheRightOffset) {
  Tensor a = iota({4, 3});
  Tensor r = a.rows(1, 2);
  EXPECT_EQ(r.shape(), Shape({2, 3}));
  EXPECT_EQ(r.data<float>()[0], 3.0f);
  EXPECT_EQ(r.data<float>()[5], 8.0f);
  EXPECT_EQ(static_cast<char*>(r.raw()) - static_cast<char*>(a.raw()), 3 * 4);
  r.data<float>()[0] = -3.0f;
  EXPECT_EQ(a.data<float>()[3], -3.0f);

  Tensor s = a.slice(5, {2, 2});
  EXPECT_EQ(s.data<float>()[0], 5.0f);
  EXPECT_EQ(s.data<float>()[3], 8.0f);
  // A view of a view keeps adding offsets.
  Tensor rr = r.rows(1, 1);
  EXPECT_EQ(rr.data<float>()[0], 6.0f);
  Tensor ss = s.slice(1, {2});
  EXPECT_EQ(ss.data<float>()[0], 6.0f);
  EXPECT_EQ(ss.data<float>()[1], 7.0f);
  // Edge cases that are in bounds.
  EXPECT_EQ(a.rows(4, 0).numel(), 0);
  EXPECT_EQ(a.rows(0, 4).raw(), a.raw());
  EXPECT_EQ(a.slice(12, {0}).numel(), 0);
  EXPECT_EQ(a.slice(0, {12}).data<float>()[11], 11.0f);
  // rows() of a rank-3 tensor: row = the inner block.
  Tensor b = iota({3, 2, 2});
  EXPECT_EQ(b.rows(2, 1).data<float>()[0], 8.0f);
  EXPECT_EQ(b.rows(2, 1).shape(), Shape({1, 2, 2}));
}

TEST(Tensor, SliceAndRowsOutOfBoundsThrow) {
  Tensor a = iota({4, 3});
  expect_error([&] { a.rows(3, 2); }, "outside");
  expect_error([&] { a.rows(-1, 1); }, "outside");
  expect_error([&] { a.rows(5, 0); }, "outside");
  expect_error([&] { a.slice(-1, {1}); }, "outside");
  expect_error([&] { a.slice(11, {2}); }, "outside");
  expect_error([&] { a.slice(0, {13}); }, "outside");
  expect_error([&] { a.slice(0, {2, 7}); }, "outside");
  // On a view, bounds are those of the view, not of the storage behind it.
  Tensor r = a.rows(1, 2);
  expect_error([&] { r.rows(1, 2); }, "outside");
  expect_error([&] { r.slice(4, {3}); }, "outside");
  Tensor scalar = Tensor::empty(Shape{});
  expect_error([&] { scalar.rows(0, 1); }, "scalar");
}

TEST(Tensor, CloneCopiesAndCopyFromChecks) {
  Tensor a = iota({3, 4});
  Tensor c = a.clone();
  EXPECT_NE(c.raw(), a.raw());
  EXPECT_EQ(c.shape(), a.shape());
  EXPECT_EQ(c.dtype(), a.dtype());
  EXPECT_EQ(std::memcmp(c.raw(), a.raw(), a.nbytes()), 0);
  c.data<float>()[0] = 42.0f;
  EXPECT_EQ(a.data<float>()[0], 0.0f) << "a clone does not share storage";

  // Clone of a view copies the view only.
  Tensor v = a.rows(2, 1).clone();
  EXPECT_EQ(v.numel(), 4);
  EXPECT_EQ(v.data<float>()[0], 8.0f);

  // copy_from: same numel and dtype, any shape; into a view writes through.
  Tensor dst = Tensor::zeros({12});
  dst.copy_from(a);
  EXPECT_EQ(dst.data<float>()[11], 11.0f);
  Tensor row = a.rows(0, 1);
  row.copy_from(iota({4}).reshape({1, 4}));
  row.zero();
  EXPECT_EQ(a.data<float>()[3], 0.0f);
  EXPECT_EQ(a.data<float>()[4], 4.0f) << "zero() of a view stays inside it";
  expect_error([&] { dst.copy_from(Tensor::zeros({11})); }, "copy");
  expect_error([&] { dst.copy_from(Tensor::zeros({12}, DType::i32)); }, "copy");
}

TEST(Tensor, CudaWithoutCudaThrowsOrRoundTrips) {
  Tensor a = iota({8});
  if (!tessera::cuda_available()) {
    EXPECT_THROW(a.to(Device::cuda), tessera::Error);
  } else {
    Tensor back = a.to(Device::cuda).to(Device::cpu);
    EXPECT_EQ(std::memcmp(back.raw(), a.raw(), a.nbytes()), 0);
  }
}

TEST(Allocator, CurrentAndPeakFollowTensorLifetimes) {
  const auto s0 = tessera::memory_stats(Device::cpu);
  tessera::reset_peak_memory(Device::cpu);
  EXPECT_EQ(tessera::memory_stats(Device::cpu).peak_bytes, s0.current_bytes);
  {
    Tensor a = Tensor::empty({1000});  // 4000 bytes
    const auto s1 = tessera::memory_stats(Device::cpu);
    EXPECT_EQ(s1.current_bytes, s0.current_bytes + 4000);
    EXPECT_EQ(s1.peak_bytes, s0.current_bytes + 4000);
    EXPECT_EQ(s1.allocations, s0.allocations + 1);
    {
      Tensor b = Tensor::zeros({250}, DType::bf16);  // 500 bytes
      EXPECT_EQ(tessera::memory_stats(Device::cpu).current_bytes, s0.current_bytes + 4500);
      EXPECT_EQ(tessera::memory_stats(Device::cpu).peak_bytes, s0.current_bytes + 4500);
      // Views and copies of the handle allocate nothing.
      Tensor v = a.rows(10, 20), r = a.reshape({10, 100}), h = a;
      EXPECT_EQ(tessera::memory_stats(Device::cpu).current_bytes, s0.current_bytes + 4500);
    }
    const auto s2 = tessera::memory_stats(Device::cpu);
    EXPECT_EQ(s2.current_bytes, s0.current_bytes + 4000);
    EXPECT_EQ(s2.peak_bytes, s0.current_bytes + 4500) << "the peak remembers the freed tensor";
    // Storage lives as long as its last view.
    Tensor view = Tensor::empty({100}).rows(0, 10);
    EXPECT_EQ(tessera::memory_stats(Device::cpu).current_bytes, s0.current_bytes + 4400);
    view = Tensor();
    EXPECT_EQ(tessera::memory_stats(Device::cpu).current_bytes, s0.current_bytes + 4000);
    Tensor c = a.clone();
    EXPECT_EQ(tessera::memory_stats(Device::cpu).current_bytes, s0.current_bytes + 8000);
    EXPECT_EQ(tessera::memory_stats(Device::cpu).peak_bytes, s0.current_bytes + 8000);
  }
  const auto s3 = tessera::memory_stats(Device::cpu);
  EXPECT_EQ(s3.current_bytes, s0.current_bytes);
  EXPECT_EQ(s3.peak_bytes, s0.current_bytes + 8000);
  tessera::reset_peak_memory(Device::cpu);
  EXPECT_EQ(tessera::memory_stats(Device::cpu).peak_bytes, s0.current_bytes);
}

TEST(Allocator, ZeroBytesAndCopies) {
  void* p = tessera::allocate_bytes(Device::cpu, 0);
  tessera::free_bytes(Device::cpu, p, 0);
  char src[5] = {1, 2, 3, 4, 5}, dst[5] = {};
  tessera::copy_bytes(dst, Device::cpu, src, Device::cpu, 5);
  EXPECT_EQ(std::memcmp(src, dst, 5), 0);
  tessera::zero_bytes(dst, Device::cpu, 3);
  EXPECT_EQ(dst[2], 0);
  EXPECT_EQ(dst[3], 4);
}

// Blocks of 2 MiB and more start on a huge-page boundary (the allocator asks for transparent huge
// pages over them), on the device and the host tier alike; smaller ones keep the 64-byte alignment
// every kernel relies on.
TEST(Allocator, LargeHostBlocksAreHugePageAligned) {
  const size_t huge = size_t{2} << 20;
  for (const size_t bytes : {size_t{100}, huge - 64, huge, 3 * huge + 100}) {
    void* p = tessera::allocate_bytes(Device::cpu, bytes);
    const auto at = reinterpret_cast<uintptr_t>(p);
    EXPECT_EQ(at % (bytes >= huge ? huge : 64), 0u) << bytes << " bytes";
    tessera::zero_bytes(p, Device::cpu, bytes);  // the whole block is writable
    EXPECT_EQ(static_cast<char*>(p)[bytes - 1], 0);
    tessera::free_bytes(Device::cpu, p, bytes);
    void* tier = tessera::allocate_host_tier_bytes(bytes);  // pinned memory instead where a GPU is
    const size_t tier_alignment = bytes >= huge && !tessera::cuda_available() ? huge : 64;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(tier) % tier_alignment, 0u) << bytes << " bytes of the host tier";
    tessera::free_host_tier_bytes(tier, bytes);
  }
}

}  // namespace
