// The fused linear forward (gemm_bias: a cuBLASLt GEMM with a bias or bias + GELU epilogue, or
// its unfused fallback) against its CPU twin, cpu::gemm_bias (oneDNN's matmul with the bias in its
// epilogue, or broadcast_rows + gemm, or gemm + bias_gelu_forward). fp32 inputs within
// 1e-5 + 2e-6 k (as the plain GEMM); bf16 inputs, the same (both sum exact bf16 products in
// fp32). The GELU input (pre) within the same tolerance, the GELU output within it plus 1e-3
// relative (cuBLASLt's GELU is its own tanh approximation, perhaps the hardware's). Which path
// ran is checked too: the GPT-2 shapes must take the epilogue, n not a multiple of 8 (with GELU)
// the fallback; operands at 4-byte offsets (tensor views) give the same numbers whichever path
// cuBLASLt allows them.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

namespace {

double tolerance(int64_t k) { return 1e-5 + 2e-6 * static_cast<double>(k); }

enum class Path { fused, fallback, either };

// offset: every operand starts that many floats into its buffer (a view's alignment).
void check_linear(int64_t m, int64_t n, int64_t k, bool gelu, bool bf16, uint64_t stream, Path path,
                  int64_t offset = 0) {
  SCOPED_TRACE(testing::Message() << (bf16 ? "bf16" : "fp32") << (gelu ? " bias+gelu" : " bias") << " m " << m
                                  << " n " << n << " k " << k << " offset " << offset);
  const auto a = normal(m * k, stream), w = normal(n * k, stream + 1, 0.1f), bias = normal(n, stream + 2);
  std::vector<float> want_out(m * n), want_pre(m * n);
  cpu::gemm_bias(m, n, k, a.data(), nullptr, w.data(), nullptr, bias.data(), bf16, gelu ? want_pre.data() : nullptr,
                 want_out.data());
  auto shifted = [offset](const std::vector<float>& v) {
    std::vector<float> padded(offset, 0.0f);
    padded.insert(padded.end(), v.begin(), v.end());
    return padded;
  };
  auto unshifted = [offset](const std::vector<float>& v) { return std::vector<float>(v.begin() + offset, v.end()); };
  DeviceBuffer<float> da(shifted(a)), dw(shifted(w)), dbias(shifted(bias)), dout(offset + m * n), dpre(offset + m * n);
  dout.fill_bytes(0xff);
  dpre.fill_bytes(0xff);
  const int64_t fallbacks = gpu::gemm_bias_fallbacks();
  gpu::gemm_bias(m, n, k, da.get() + offset, nullptr, dw.get() + offset, nullptr, dbias.get() + offset, bf16,
                 gelu ? dpre.get() + offset : nullptr, dout.get() + offset);
  const int64_t fell_back = gpu::gemm_bias_fallbacks() - fallbacks;
  if (path != Path::either) {
    EXPECT_EQ(fell_back, path == Path::fused ? 0 : 1)
        << (path == Path::fused ? "cuBLASLt's epilogue" : "the unfused fallback") << " was expected";
  }
  if (gelu) {
    EXPECT_TRUE(all_close(unshifted(dpre.host()), want_pre, tolerance(k), 0.0)) << "pre";
  }
  EXPECT_TRUE(all_close(unshifted(dout.host()), want_out, tolerance(k), gelu ? 1e-3 : 0.0)) << "out";
}

}  // namespace

TEST(CudaGemmBias, BiasEpilogueMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  check_linear(256, 2304, 768, false, false, 10, Path::fused);  // a GPT-2 attention's qkv layer, 256 rows
  check_linear(37, 53, 71, false, false, 20, Path::either);     // odd sizes
}

TEST(CudaGemmBias, BiasGeluEpilogueMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  check_linear(256, 3072, 768, true, false, 30, Path::fused);  // a GPT-2 MLP's first layer
  check_linear(33, 40, 17, true, false, 40, Path::either);
  check_linear(33, 45, 17, true, false, 50, Path::fallback);  // n not a multiple of 8
}

TEST(CudaGemmBias, Bf16InputsMatchCpuEmulation) {
  TESSERA_REQUIRE_CUDA();
  check_linear(128, 256, 192, false, true, 60, Path::fused);
  check_linear(128, 256, 192, true, true, 70, Path::fused);
  check_linear(31, 45, 29, true, true, 80, Path::fallback);
}

TEST(CudaGemmBias, OperandsAtFourByteOffsetsMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  check_linear(64, 96, 128, false, false, 100, Path::either, 1);
  check_linear(64, 96, 128, true, false, 110, Path::fallback, 1);  // bias and pre under 16-byte alignment
  check_linear(64, 96, 128, true, true, 120, Path::fallback, 3);
}

TEST(CudaGemmBias, GivenBf16CopiesAreRead) {
  TESSERA_REQUIRE_CUDA();
  const int64_t m = 32, n = 64, k = 48;
  const auto a = normal(m * k, 90), w = normal(n * k, 91), bias = normal(n, 92);
  std::vector<uint16_t> a_bits(m * k), w_bits(n * k);
  cpu::f32_to_bf16(a_bits.data(), a.data(), m * k);
  cpu::f32_to_bf16(w_bits.data(), w.data(), n * k);
  // The f32 values handed over are garbage: only the copies may be read.
  DeviceBuffer<float> da(std::vector<float>(m * k, 1e30f)), dw(std::vector<float>(n * k, 1e30f)), dbias(bias);
  DeviceBuffer<uint16_t> da_bits(a_bits), dw_bits(w_bits);
  DeviceBuffer<float> dout(m * n);
  gpu::gemm_bias(m, n, k, da.get(), da_bits.get(), dw.get(), dw_bits.get(), dbias.get(), true, nullptr, dout.get());
  std::vector<float> want(m * n);
  cpu::broadcast_rows(want.data(), bias.data(), m, n);
  cpu::gemm_bf16_emulated(false, true, m, n, k, 1.0f, a.data(), nullptr, w.data(), nullptr, 1.0f, want.data());
  EXPECT_TRUE(all_close(dout.host(), want, tolerance(k), 0.0));
}
