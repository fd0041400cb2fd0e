// CUDA ops are asynchronous (kernels/cuda/cuda_check.h): a long chain of dependent ops queued
// without a wait gives what the CPU gives, a copy to the host and ops::synchronize see every op
// before them, sum_squares hands back a finished value, and the device time of the ops lands in
// take_kernel_times() under each op's kind (kernels/cuda/op_timing.h), and by op name when profiling
// (kernels/op_profile.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "cuda_test_util.h"
#include "kernels/cuda/op_timing.h"
#include "kernels/kernel_timing.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"

using namespace tessera;
using namespace tessera::cuda_test;
using kernels::KernelKind;

namespace {

Tensor host_tensor(const std::vector<float>& values, Shape shape) {
  Tensor t = Tensor::empty(std::move(shape));
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

std::vector<float> values_of(const Tensor& t) {
  const Tensor host = t.to(Device::cpu);
  return {host.data<float>(), host.data<float>() + host.numel()};
}

// The same 300 dependent ops on either device: acc += x, acc *= 0.999, out = acc @ w, three times
// a hundred.
std::vector<float> run_chain(Device device) {
  const int64_t rows = 64, cols = 96;
  Tensor x = host_tensor(normal(rows * cols, 1), {rows, cols}).to(device);
  Tensor w = host_tensor(normal(cols * cols, 2, 0.05f), {cols, cols}).to(device);
  Tensor acc = Tensor::zeros({rows, cols}, DType::f32, device);
  Tensor out = Tensor::zeros({rows, cols}, DType::f32, device);
  for (int i = 0; i < 100; ++i) {
    ops::add_inplace(acc, x);
    ops::scale_inplace(acc, 0.999f);
    ops::matmul(acc, false, w, false, out, 1.0f, 1.0f);  // out accumulates
  }
  return values_of(out);
}

}  // namespace

TEST(CudaAsync, ChainOfQueuedOpsMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  EXPECT_TRUE(all_close(run_chain(Device::cuda), run_chain(Device::cpu), 1e-3, 1e-4));
}

TEST(CudaAsync, SumSquaresAndSynchronizeSeeEveryQueuedOp) {
  TESSERA_REQUIRE_CUDA();
  const int64_t n = 1 << 20;
  Tensor x = Tensor::zeros({n}, DType::f32, Device::cuda);
  const Tensor ones = host_tensor(std::vector<float>(n, 1.0f), {n}).to(Device::cuda);
  for (int i = 0; i < 50; ++i) ops::add_inplace(x, ones);  // queued: x = 50 everywhere
  EXPECT_DOUBLE_EQ(ops::sum_squares(x), 2500.0 * n);
  for (int i = 0; i < 50; ++i) ops::add_inplace(x, ones);  // x = 100
  ops::synchronize(Device::cuda);
  EXPECT_EQ(cudaStreamQuery(0), cudaSuccess) << "ops::synchronize returned with work still queued";
  Tensor host = Tensor::empty({n});
  host.copy_from(x);
  EXPECT_EQ(host.data<float>()[0], 100.0f);
  EXPECT_EQ(host.data<float>()[n - 1], 100.0f);
}

TEST(CudaAsync, DeviceTimeOfOpsIsSplitByKind) {
  TESSERA_REQUIRE_CUDA();
  const int64_t m = 512;
  Tensor a = host_tensor(normal(m * m, 3), {m, m}).to(Device::cuda);
  Tensor c = Tensor::zeros({m, m}, DType::f32, Device::cuda);
  kernels::take_kernel_times();  // start afresh
  for (int i = 0; i < 4; ++i) ops::matmul(a, false, a, true, c);
  ops::add_inplace(c, a);
  const kernels::KernelTimes times = kernels::take_kernel_times();
  EXPECT_GT(times.of(KernelKind::gemm), 0.0);
  EXPECT_GT(times.of(KernelKind::other), 0.0);
  EXPECT_EQ(times.of(KernelKind::attention), 0.0);
  EXPECT_EQ(times.of(KernelKind::optimizer), 0.0);
  const kernels::KernelTimes again = kernels::take_kernel_times();  // nothing since
  EXPECT_EQ(again.of(KernelKind::gemm), 0.0);
  EXPECT_EQ(again.of(KernelKind::other), 0.0);
}

// The pool of event pairs sums itself when full: the first kOpTimerFoldEvery ops (all 'other')
// are summed then, the GEMM that triggered it after; neither kind may be lost.
TEST(CudaAsync, OpTimesFoldedWhenThePoolFillsAreKept) {
  TESSERA_REQUIRE_CUDA();
  const int64_t n = 4096;
  Tensor x = Tensor::zeros({n}, DType::f32, Device::cuda);
  Tensor a = Tensor::zeros({64, 64}, DType::f32, Device::cuda), c = Tensor::zeros({64, 64}, DType::f32, Device::cuda);
  kernels::take_kernel_times();
  for (size_t i = 0; i < kernels::cuda::kOpTimerFoldEvery; ++i) ops::scale_inplace(x, 1.0f);
  ops::matmul(a, false, a, false, c);  // the pool is full here: the scale ops are folded first
  const kernels::KernelTimes times = kernels::take_kernel_times();
  EXPECT_GT(times.of(KernelKind::other), 0.0) << "the folded ops' time was lost";
  EXPECT_GT(times.of(KernelKind::gemm), 0.0);
}

// Profiling, the same event pairs are summed by op name too, those folded when the pool filled
// included; nothing lands on the CPU side.
TEST(CudaAsync, ProfiledOpsAreSummedByName) {
  TESSERA_REQUIRE_CUDA();
  const kernels::OpProfileScope profiling(true);
  Tensor x = Tensor::zeros({4096}, DType::f32, Device::cuda);
  Tensor a = Tensor::zeros({64, 64}, DType::f32, Device::cuda), c = Tensor::zeros({64, 64}, DType::f32, Device::cuda);
  kernels::take_kernel_times();
  kernels::OpProfile profile;
  const size_t scales = kernels::cuda::kOpTimerFoldEvery + 3;  // one fold on the way
  for (size_t i = 0; i < scales; ++i) ops::scale_inplace(x, 1.0f);
  for (int i = 0; i < 2; ++i) ops::matmul(a, false, a, false, c);
  kernels::take_kernel_times(&profile);
  int64_t scale_calls = 0, gemm_calls = 0;
  for (const auto& [name, sum] : profile.cuda) {
    EXPECT_GE(sum.ms, 0.0) << name;
    if (std::string_view(name) == "scale_inplace") scale_calls += sum.calls;
    if (std::string_view(name).starts_with("gemm")) gemm_calls += sum.calls;
  }
  EXPECT_EQ(scale_calls, static_cast<int64_t>(scales));
  EXPECT_EQ(gemm_calls, 2);
  EXPECT_TRUE(profile.cpu.empty());
  EXPECT_NE(kernels::format_op_profile(profile).find(std::to_string(scales)), std::string::npos);
}
