// CUDA AdamW against the CPU twin over three consecutive steps with weight decay, grad_scale and
// bias correction: param, exp_avg, exp_avg_sq within 1e-6 + 1e-5 |x| after every step; the same
// over spans of the buffers (adamw_spans), gradients zeroed.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

TEST(CudaAdamW, ThreeStepsMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  const int64_t n = 100003;
  auto param = normal(n, 21), m = normal(n, 22, 0.01f), v = normal(n, 23, 0.01f);
  for (float& x : v) x *= x;
  DeviceBuffer<float> dparam(param), dm(m), dv(v), dgrad(n);
  tessera::ops::AdamWArgs args;
  args.lr = 3e-3f;
  args.weight_decay = 0.1f;
  args.grad_scale = 0.5f;
  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    const auto grad = normal(n, 30 + step);
    dgrad.upload(grad);
    args.step = step;
    cpu::adamw(param.data(), grad.data(), m.data(), v.data(), n, args);
    gpu::adamw(dparam.get(), dgrad.get(), dm.get(), dv.get(), n, args);
    EXPECT_TRUE(all_close(dparam.host(), param, 1e-6, 1e-5)) << "param";
    EXPECT_TRUE(all_close(dm.host(), m, 1e-6, 1e-5)) << "exp_avg";
    EXPECT_TRUE(all_close(dv.host(), v, 1e-6, 1e-5)) << "exp_avg_sq";
  }
}

TEST(CudaAdamW, ZeroGradZeroesTheGradientAfterTheSameUpdate) {
  TESSERA_REQUIRE_CUDA();
  const int64_t n = 100003;
  auto param = normal(n, 41), m = normal(n, 42, 0.01f), v = normal(n, 43, 0.01f);
  for (float& x : v) x *= x;
  const auto grad = normal(n, 44);
  DeviceBuffer<float> dparam(param), dm(m), dv(v), dgrad(grad);
  tessera::ops::AdamWArgs args;
  args.lr = 3e-3f;
  cpu::adamw(param.data(), grad.data(), m.data(), v.data(), n, args);
  args.zero_grad = true;
  gpu::adamw(dparam.get(), dgrad.get(), dm.get(), dv.get(), n, args);
  EXPECT_TRUE(all_close(dparam.host(), param, 1e-6, 1e-5)) << "param";
  EXPECT_TRUE(all_close(dm.host(), m, 1e-6, 1e-5)) << "exp_avg";
  EXPECT_TRUE(all_close(dv.host(), v, 1e-6, 1e-5)) << "exp_avg_sq";
  EXPECT_TRUE(all_close(dgrad.host(), std::vector<float>(n, 0.0f), 0.0, 0.0)) << "grad";
}

// Spans with and without decay, gaps between them, spans longer than the multi-tensor kernel's
// 65536-element chunks, zero_grad: the CPU twin's values (within 1e-6 + 1e-5 |x|), the spans'
// gradients zero and what lies between them untouched; the updated values' bf16 bits written in
// the spans only.
TEST(CudaAdamW, SpansMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  const int64_t n = 300000;
  const tessera::ops::AdamWSpan spans[] = {{0, 140000, true}, {140000, 140007, false}, {140100, 270000, true},
                                           {271000, n, false}};
  auto param = normal(n, 51), m = normal(n, 52, 0.01f), v = normal(n, 53, 0.01f);
  for (float& x : v) x *= x;
  auto grad = normal(n, 54);
  DeviceBuffer<float> dparam(param), dm(m), dv(v), dgrad(grad);
  tessera::ops::AdamWArgs args;
  args.lr = 3e-3f;
  args.weight_decay = 0.1f;
  args.zero_grad = true;
  DeviceBuffer<uint16_t> dbits(std::vector<uint16_t>(n, 0xabcd));
  cpu::adamw_spans(param.data(), grad.data(), m.data(), v.data(), spans, 4, args, nullptr);
  gpu::adamw_spans(dparam.get(), dgrad.get(), dm.get(), dv.get(), spans, 4, args, dbits.get());
  EXPECT_TRUE(all_close(dparam.host(), param, 1e-6, 1e-5)) << "param";
  // The bits are the GPU's updated values rounded to bf16 (nearest even), in the spans only.
  const std::vector<float> updated = dparam.host();
  std::vector<uint16_t> want(n);
  cpu::f32_to_bf16(want.data(), updated.data(), n);
  const std::vector<uint16_t> bits = dbits.host();
  for (int64_t i = 140007; i < 140100; ++i) want[i] = 0xabcd;  // the gaps between spans
  for (int64_t i = 270000; i < 271000; ++i) want[i] = 0xabcd;
  EXPECT_EQ(bits, want) << "param_bits";
  EXPECT_TRUE(all_close(dm.host(), m, 1e-6, 1e-5)) << "exp_avg";
  EXPECT_TRUE(all_close(dv.host(), v, 1e-6, 1e-5)) << "exp_avg_sq";
  EXPECT_TRUE(all_close(dgrad.host(), grad, 0.0, 0.0)) << "grad: zero in the spans, untouched between";
  EXPECT_EQ(grad[100], 0.0f);
  EXPECT_NE(grad[140050], 0.0f);
}

TEST(CudaAdamW, RejectsStepZero) {
  TESSERA_REQUIRE_CUDA();
  DeviceBuffer<float> p(4), g(4), m(4), v(4);
  tessera::ops::AdamWArgs args;
  args.step = 0;
  EXPECT_THROW(gpu::adamw(p.get(), g.get(), m.get(), v.get(), 4, args), tessera::Error);
}
