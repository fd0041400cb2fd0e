// CUDA fused causal attention against the CPU twin over batch, sequence lengths that do and do not
// fill a 64-row tile, and head_dim 16..128 (padded and exact): out and lse within 2e-5 + 1e-4 |x|,
// dqkv within 1e-4 + 1e-3 |x|; backward overwrites every element of dqkv and is deterministic.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

namespace {

struct Shape {
  int64_t batch, seq, heads, head_dim;
};

void check_attention(const Shape& s, uint64_t stream) {
  SCOPED_TRACE(testing::Message() << "B " << s.batch << " T " << s.seq << " H " << s.heads << " D " << s.head_dim);
  const int64_t rows = s.batch * s.seq, hd = s.heads * s.head_dim;
  const auto qkv = normal(rows * 3 * hd, stream, 1.5f);
  const auto dout = normal(rows * hd, stream + 1);
  std::vector<float> out(rows * hd), lse(s.batch * s.heads * s.seq), dqkv(rows * 3 * hd);
  DeviceBuffer<float> d_qkv(qkv), d_dout(dout), d_out(out.size()), d_lse(lse.size()), d_dqkv(dqkv.size());
  d_out.fill_bytes(0xff);
  d_lse.fill_bytes(0xff);
  d_dqkv.fill_bytes(0xff);

  cpu::attention_forward(out.data(), lse.data(), qkv.data(), s.batch, s.seq, s.heads, s.head_dim);
  gpu::attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), s.batch, s.seq, s.heads, s.head_dim);
  EXPECT_TRUE(all_close(d_out.host(), out, 2e-5, 1e-4)) << "out";
  EXPECT_TRUE(all_close(d_lse.host(), lse, 2e-5, 1e-4)) << "lse";

  // Backward from the CPU's out and lse on both sides, so only the backward is compared.
  DeviceBuffer<float> c_out(out), c_lse(lse);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.batch, s.seq, s.heads,
                          s.head_dim);
  gpu::attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), c_out.get(), c_lse.get(), s.batch, s.seq, s.heads,
                          s.head_dim);
  const auto got = d_dqkv.host();
  EXPECT_TRUE(all_close(got, dqkv, 1e-4, 1e-3)) << "dqkv";

  d_dqkv.fill_bytes(0xff);
  gpu::attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), c_out.get(), c_lse.get(), s.batch, s.seq, s.heads,
                          s.head_dim);
  EXPECT_TRUE(bit_equal(d_dqkv.host(), got)) << "backward is not deterministic";
}

}  // namespace

TEST(CudaAttention, MatchesCpuAcrossShapes) {
  TESSERA_REQUIRE_CUDA();
  const Shape shapes[] = {{1, 1, 1, 32},  {2, 67, 3, 32}, {1, 130, 2, 64}, {2, 33, 2, 48},
                          {1, 70, 1, 128}, {1, 129, 1, 16}, {2, 256, 4, 64}, {1, 200, 2, 100}};
  uint64_t stream = 600;
  for (const Shape& s : shapes) check_attention(s, stream += 10);
}

TEST(CudaAttention, HeadDimAbove128Throws) {
  TESSERA_REQUIRE_CUDA();
  DeviceBuffer<float> qkv(3 * 129), out(129), lse(1), dqkv(3 * 129), dout(129);
  EXPECT_THROW(gpu::attention_forward(out.get(), lse.get(), qkv.get(), 1, 1, 1, 129), tessera::Error);
  EXPECT_THROW(gpu::attention_backward(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), 1, 1, 1, 129),
               tessera::Error);
}
