// CUDA fused causal attention against the CPU twin over batch, sequence lengths that do and do not
// fill a 64-row tile, and head_dim 16..128 (padded and exact): out and lse within 2e-5 + 1e-4 |x|,
// dqkv within 1e-4 + 1e-3 |x|; backward overwrites every element of dqkv and is deterministic. The
// tensor-core twins (*_bf16) against the CPU kernel on bf16-rounded inputs, by relative L2 error;
// ops:: picks them when the call asks for MatmulInputs::bf16 only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <string_view>

#include "core/tensor.h"
#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/kernel_timing.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"

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

// ||got - want|| / ||want||, the norm floored at an RMS of 1e-3 (at seq 1 the true dq and dk are
// zero); infinite when got holds a NaN or an infinity (an element never written).
double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(err / std::max(norm, 1e-6 * static_cast<double>(want.size())));
}

std::vector<float> rounded_to_bf16(std::vector<float> v) {
  cpu::round_bf16_inplace(v.data(), nullptr, static_cast<int64_t>(v.size()));
  return v;
}

// The tensor-core kernels round q, k, v, dO and the probabilities to bf16 and sum in fp32. Their
// reference is the fp32 CPU kernel on the rounded q, k, v (and dO): what is left is the rounding
// of P (and dS) and the order of the sums, about 2e-3 relative; bf16 arithmetic throughout would
// be about 1e-2. lse is compared absolutely (it is a log: an error in the sum is an absolute one).
void check_attention_bf16(const Shape& s, uint64_t stream) {
  SCOPED_TRACE(testing::Message() << "bf16: B " << s.batch << " T " << s.seq << " H " << s.heads << " D "
                                  << s.head_dim);
  const int64_t rows = s.batch * s.seq, hd = s.heads * s.head_dim;
  const auto qkv = normal(rows * 3 * hd, stream, 1.5f);
  const auto dout = normal(rows * hd, stream + 1);
  const auto qkv_r = rounded_to_bf16(qkv), dout_r = rounded_to_bf16(dout);
  std::vector<float> out(rows * hd), lse(s.batch * s.heads * s.seq), dqkv(rows * 3 * hd);
  // dO goes in rounded: the kernels round it for their products, and the row term delta = dO . O
  // (fp32) then sees the same dO as the reference.
  DeviceBuffer<float> d_qkv(qkv), d_dout(dout_r), d_out(out.size()), d_lse(lse.size()), d_dqkv(dqkv.size());
  d_out.fill_bytes(0xff);
  d_lse.fill_bytes(0xff);
  d_dqkv.fill_bytes(0xff);

  cpu::attention_forward(out.data(), lse.data(), qkv_r.data(), s.batch, s.seq, s.heads, s.head_dim);
  gpu::attention_forward_bf16(d_out.get(), d_lse.get(), d_qkv.get(), s.batch, s.seq, s.heads, s.head_dim);
  EXPECT_LT(relative_l2(d_out.host(), out), 5e-3) << "out";
  EXPECT_TRUE(all_close(d_lse.host(), lse, 1e-3, 0.0)) << "lse";

  // Backward from the CPU's out and lse on both sides, so only the backward is compared.
  DeviceBuffer<float> c_out(out), c_lse(lse);
  cpu::attention_backward(dqkv.data(), dout_r.data(), qkv_r.data(), out.data(), lse.data(), s.batch, s.seq,
                          s.heads, s.head_dim);
  gpu::attention_backward_bf16(d_dqkv.get(), d_dout.get(), d_qkv.get(), c_out.get(), c_lse.get(), s.batch, s.seq,
                               s.heads, s.head_dim);
  const auto got = d_dqkv.host();
  // dq, dk and dv separately: each row of dqkv is [q | k | v] x hd.
  for (int part = 0; part < 3; ++part) {
    std::vector<float> g, w;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < hd; ++c) {
        g.push_back(got[(r * 3 + part) * hd + c]);
        w.push_back(dqkv[(r * 3 + part) * hd + c]);
      }
    EXPECT_LT(relative_l2(g, w), 1e-2) << "d" << "qkv"[part];
  }

  d_dqkv.fill_bytes(0xff);
  gpu::attention_backward_bf16(d_dqkv.get(), d_dout.get(), d_qkv.get(), c_out.get(), c_lse.get(), s.batch, s.seq,
                               s.heads, s.head_dim);
  EXPECT_TRUE(bit_equal(d_dqkv.host(), got)) << "backward is not deterministic";
}

}  // namespace

TEST(CudaAttention, TensorCoreTwinsMatchCpuOnRoundedInputs) {
  TESSERA_REQUIRE_CUDA();
  const Shape shapes[] = {{1, 1, 1, 32},  {2, 67, 3, 32},  {1, 130, 2, 64}, {2, 33, 2, 48},
                          {1, 70, 1, 128}, {1, 129, 1, 16}, {2, 256, 4, 64}, {1, 200, 2, 100}, {1, 1024, 2, 64}};
  uint64_t stream = 700;
  for (const Shape& s : shapes) check_attention_bf16(s, stream += 10);
}

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
  EXPECT_THROW(gpu::attention_forward_bf16(out.get(), lse.get(), qkv.get(), 1, 1, 1, 129), tessera::Error);
  EXPECT_THROW(
      gpu::attention_backward_bf16(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), 1, 1, 1, 129),
      tessera::Error);
}

// A sequence of more than 65535 tiles of 64 rows (the grid's y extent) is refused by name before
// anything is read (the buffers are too small for it on purpose).
TEST(CudaAttention, SequenceBeyondTheGridIsRefused) {
  TESSERA_REQUIRE_CUDA();
  DeviceBuffer<float> qkv(3 * 64), out(64), lse(1), dqkv(3 * 64), dout(64);
  const int64_t seq = 65535 * 64 + 1;
  const auto expect_refused = [seq](const std::function<void()>& call) {
    try {
      call();
      ADD_FAILURE() << "no error for seq " << seq;
    } catch (const tessera::Error& e) {
      EXPECT_NE(std::string(e.what()).find("exceeds 4194240 positions"), std::string::npos) << e.what();
    }
  };
  expect_refused([&] { gpu::attention_forward(out.get(), lse.get(), qkv.get(), 1, seq, 1, 64); });
  expect_refused([&] { gpu::attention_forward_bf16(out.get(), lse.get(), qkv.get(), 1, seq, 1, 64); });
  expect_refused(
      [&] { gpu::attention_backward(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), 1, seq, 1, 64); });
  expect_refused(
      [&] { gpu::attention_backward_bf16(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(), 1, seq, 1, 64); });
}

// ops::attention_forward / attention_backward on CUDA run the tensor-core kernels when asked for
// MatmulInputs::bf16 and the fp32 ones otherwise (told apart by the op names the profile records;
// TESSERA_CUDA_TC_ATTENTION=0 in the environment turns the first off, and this test fails then).
TEST(CudaAttention, OpsPickTheTensorCoreKernelsUnderBf16Only) {
  TESSERA_REQUIRE_CUDA();
  using tessera::DType;
  using tessera::Device;
  using tessera::Tensor;
  namespace ops = tessera::ops;
  namespace kernels = tessera::kernels;
  const kernels::OpProfileScope profiling(true);
  constexpr int64_t batch = 2, seq = 70, heads = 2, head_dim = 32, hd = heads * head_dim;
  Tensor qkv = Tensor::zeros({batch, seq, 3 * hd}, DType::f32, Device::cuda);
  Tensor dqkv = Tensor::zeros({batch, seq, 3 * hd}, DType::f32, Device::cuda);
  Tensor out = Tensor::zeros({batch, seq, hd}, DType::f32, Device::cuda);
  Tensor dout = Tensor::zeros({batch, seq, hd}, DType::f32, Device::cuda);
  Tensor lse = Tensor::zeros({batch, heads, seq}, DType::f32, Device::cuda);
  for (const ops::MatmulInputs inputs : {ops::MatmulInputs::f32, ops::MatmulInputs::bf16}) {
    const bool bf16 = inputs == ops::MatmulInputs::bf16;
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    kernels::take_kernel_times();
    kernels::OpProfile profile;
    ops::attention_forward(out, lse, qkv, heads, inputs);
    ops::attention_backward(dqkv, dout, qkv, out, lse, heads, inputs);
    kernels::take_kernel_times(&profile);
    auto calls = [&](std::string_view name) {
      int64_t n = 0;
      for (const auto& [key, sum] : profile.cuda)
        if (name == key) n += sum.calls;
      return n;
    };
    EXPECT_EQ(calls("attention_forward_bf16"), bf16 ? 1 : 0);
    EXPECT_EQ(calls("attention_backward_bf16"), bf16 ? 1 : 0);
    EXPECT_EQ(calls("attention_forward"), bf16 ? 0 : 1);
    EXPECT_EQ(calls("attention_backward"), bf16 ? 0 : 1);
  }
}
