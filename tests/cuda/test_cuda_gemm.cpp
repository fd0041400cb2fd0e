// CUDA GEMM (cuBLAS) against the CPU twin: every transpose combination, odd sizes, alpha/beta,
// batched, and the empty product (k = 0). Tolerance 1e-5 + 2e-6 k absolute: fp32 rounding passes,
// TF32 (10-bit mantissa) products would not. The bf16-input GEMM (tensor cores) against the CPU's
// emulated bf16 GEMM: the same rounded products, summed in another order, so the same tolerance;
// and ops::RoundedOperand's one rounded copy read by two products on the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/tensor.h"
#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

namespace {

struct Case {
  int64_t m, n, k;
  float alpha, beta;
};

double tolerance(int64_t k) { return 1e-5 + 2e-6 * static_cast<double>(k); }

void check_gemm(int64_t batch, bool ta, bool tb, const Case& c, uint64_t stream, bool bf16 = false) {
  SCOPED_TRACE(testing::Message() << (bf16 ? "bf16 inputs, " : "") << "batch " << batch << (ta ? " A^T" : " A")
                                  << (tb ? " B^T" : " B") << " m " << c.m << " n " << c.n << " k " << c.k << " alpha "
                                  << c.alpha << " beta " << c.beta);
  const auto a = normal(batch * c.m * c.k, stream);
  const auto b = normal(batch * c.k * c.n, stream + 1);
  auto want = c.beta == 0.0f ? std::vector<float>(batch * c.m * c.n, 0.0f) : normal(batch * c.m * c.n, stream + 2);
  DeviceBuffer<float> da(a), db(b), dc(batch * c.m * c.n);
  if (c.beta == 0.0f) dc.fill_bytes(0xff);  // beta = 0 must overwrite, NaN included
  else dc.upload(want);
  if (bf16) {
    for (int64_t i = 0; i < batch; ++i)
      cpu::gemm_bf16_emulated(ta, tb, c.m, c.n, c.k, c.alpha, a.data() + i * c.m * c.k, nullptr,
                              b.data() + i * c.k * c.n, nullptr, c.beta, want.data() + i * c.m * c.n);
    if (batch == 1) gpu::gemm_bf16(ta, tb, c.m, c.n, c.k, c.alpha, da.get(), nullptr, db.get(), nullptr, c.beta, dc.get());
    else gpu::gemm_batched_bf16(batch, ta, tb, c.m, c.n, c.k, c.alpha, da.get(), db.get(), c.beta, dc.get());
  } else if (batch == 1) {
    cpu::gemm(ta, tb, c.m, c.n, c.k, c.alpha, a.data(), b.data(), c.beta, want.data());
    gpu::gemm(ta, tb, c.m, c.n, c.k, c.alpha, da.get(), db.get(), c.beta, dc.get());
  } else {
    cpu::gemm_batched(batch, ta, tb, c.m, c.n, c.k, c.alpha, a.data(), b.data(), c.beta, want.data());
    gpu::gemm_batched(batch, ta, tb, c.m, c.n, c.k, c.alpha, da.get(), db.get(), c.beta, dc.get());
  }
  EXPECT_TRUE(all_close(dc.host(), want, tolerance(c.k), 1e-5));
}

}  // namespace

TEST(CudaGemm, MatchesCpuForEveryTransposeAndSize) {
  TESSERA_REQUIRE_CUDA();
  const Case cases[] = {{37, 53, 29, 0.7f, 0.3f}, {128, 96, 512, 1.0f, 0.0f}, {1, 7, 3, 1.0f, 1.0f},
                        {65, 1, 130, -0.5f, 0.0f}};
  uint64_t stream = 100;
  for (const Case& c : cases)
    for (int t = 0; t < 4; ++t) check_gemm(1, t & 1, t & 2, c, stream += 10);
}

TEST(CudaGemm, BatchedMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  uint64_t stream = 200;
  for (int t = 0; t < 4; ++t) {
    check_gemm(3, t & 1, t & 2, {33, 17, 45, 0.9f, 0.4f}, stream += 10);
    check_gemm(2, t & 1, t & 2, {64, 64, 64, 1.0f, 0.0f}, stream += 10);
  }
}

TEST(CudaGemm, EmptyProductScalesC) {
  TESSERA_REQUIRE_CUDA();
  check_gemm(1, false, false, {5, 6, 0, 1.0f, 0.5f}, 300);
  check_gemm(1, true, false, {5, 6, 0, 1.0f, 0.0f}, 310);
  check_gemm(4, false, true, {3, 2, 0, 1.0f, 2.0f}, 320);
}

TEST(CudaGemm, Bf16InputsMatchCpuEmulation) {
  TESSERA_REQUIRE_CUDA();
  const Case cases[] = {{37, 53, 29, 0.7f, 0.3f}, {128, 96, 512, 1.0f, 0.0f}, {1, 7, 3, 1.0f, 1.0f},
                        {5, 6, 0, 1.0f, 0.5f}};
  uint64_t stream = 400;
  for (const Case& c : cases)
    for (int t = 0; t < 4; ++t) {
      check_gemm(1, t & 1, t & 2, c, stream += 10, true);
      check_gemm(3, t & 1, t & 2, c, stream += 10, true);
    }
}

// The operands' bf16 copies, when given, are read in place of their values: copies of 2x the
// values give 4x the product.
TEST(CudaGemm, Bf16CopiesAreReadInPlaceOfTheValues) {
  TESSERA_REQUIRE_CUDA();
  const int64_t m = 19, n = 23, k = 41;
  const auto a = normal(m * k, 500), b = normal(k * n, 501);
  std::vector<float> a2(a), b2(b), want(m * n);
  for (float& v : a2) v *= 2.0f;
  for (float& v : b2) v *= 2.0f;
  std::vector<uint16_t> a_bits(a2.size()), b_bits(b2.size());
  cpu::f32_to_bf16(a_bits.data(), a2.data(), m * k);
  cpu::f32_to_bf16(b_bits.data(), b2.data(), k * n);
  cpu::gemm_bf16_emulated(false, true, m, n, k, 1.0f, a2.data(), nullptr, b2.data(), nullptr, 0.0f, want.data());
  DeviceBuffer<float> da(a), db(b), dc(m * n);
  DeviceBuffer<uint16_t> dab(a_bits), dbb(b_bits);
  gpu::gemm_bf16(false, true, m, n, k, 1.0f, da.get(), dab.get(), db.get(), dbb.get(), 0.0f, dc.get());
  EXPECT_TRUE(all_close(dc.host(), want, tolerance(k), 1e-5));
}

// ops::RoundedOperand on the device: a linear layer's two backward products read one rounded
// copy of dy (from the stream-ordered pool), the same numbers as rounding it for each; doubling dy
// while it lives does not reach the products that read it (the copy is read), and reaches dy itself.
TEST(CudaGemm, ARoundedOperandIsRoundedOnceForBothProducts) {
  TESSERA_REQUIRE_CUDA();
  using tessera::Device;
  using tessera::Tensor;
  namespace ops = tessera::ops;
  const ops::MatmulInputs bf16 = ops::MatmulInputs::bf16;
  const int64_t rows = 48, in = 40, out = 72;
  const auto upload = [](const std::vector<float>& v, tessera::Shape shape) {
    Tensor t = Tensor::empty(std::move(shape));
    std::copy(v.begin(), v.end(), t.data<float>());
    return t.to(Device::cuda);
  };
  const auto host = [](const Tensor& t) {
    const Tensor h = t.to(Device::cpu);
    return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
  };
  Tensor dy = upload(normal(rows * out, 600), {rows, out});
  const Tensor x = upload(normal(rows * in, 601), {rows, in}), w = upload(normal(out * in, 602), {out, in});
  Tensor dw = Tensor::zeros({out, in}, tessera::DType::f32, Device::cuda);
  Tensor dx = Tensor::zeros({rows, in}, tessera::DType::f32, Device::cuda);
  ops::matmul(dy, true, x, false, dw, 1.0f, 0.0f, bf16);
  ops::matmul(dy, false, w, false, dx, 1.0f, 0.0f, bf16);
  const std::vector<float> dw_each = host(dw), dx_each = host(dx);
  {
    const ops::RoundedOperand rounded(dy, bf16);
    ops::matmul(rounded, true, x, false, dw, 1.0f, 0.0f, bf16);
    ops::scale_inplace(dy, 2.0f);
    ops::matmul(rounded, false, w, false, dx, 1.0f, 0.0f, bf16);
    EXPECT_TRUE(all_close(host(dw), dw_each, tolerance(rows), 1e-5));
    EXPECT_TRUE(all_close(host(dx), dx_each, tolerance(out), 1e-5));
  }
  ops::matmul(dy, false, w, false, dx, 1.0f, 0.0f, bf16);
  std::vector<float> doubled(dx_each);
  for (float& v : doubled) v *= 2.0f;
  EXPECT_TRUE(all_close(host(dx), doubled, tolerance(out), 1e-5));
}
