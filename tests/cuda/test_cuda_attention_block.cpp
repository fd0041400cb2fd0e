// CUDA block attention against the CPU twin: causal and not, merged into an earlier partial result
// (rows with lse = -inf and NaN out included) or not, Tq != Tk, dense q / kv rows, strided rows (3C
// wide) and one qkv buffer as both q and kv, head_dim 16..128 (padded and exact). out and lse within
// 2e-5 + 1e-4 |x|; dq, dk, dv added onto random gradients within 1e-4 + 1e-3 |x|, the columns outside
// them untouched; backward deterministic. The ops-level dispatch is checked on cuda tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

// Where q and k, v live: dense rows (q [B, Tq, C], kv [B, Tk, 2C]), strided rows (q the first C of
// [B, Tq, 3C], k and v the last 2C of [B, Tk, 3C]), or one qkv [B, T, 3C] passed as both.
enum class Layout { dense, strided, qkv };

struct Case {
  int64_t batch, tq, tk, heads, head_dim;
  Layout layout;
  bool causal, merge;
};

const char* layout_name(Layout l) { return l == Layout::dense ? "dense" : (l == Layout::strided ? "strided" : "qkv"); }

// The operands of one case, on the host: q and kv buffers (one buffer for Layout::qkv), and the
// offsets of q, k and v inside them.
struct Operands {
  cpu::AttentionBlockShape shape;
  std::vector<float> q, kv;  // kv empty for Layout::qkv (k and v are in q)
  int64_t k_at, v_at;
};

Operands make_operands(const Case& c, uint64_t stream) {
  const int64_t ch = c.heads * c.head_dim;
  const int64_t q_w = c.layout == Layout::dense ? ch : 3 * ch, kv_w = c.layout == Layout::dense ? 2 * ch : 3 * ch;
  Operands o;
  o.shape = {c.batch, c.tq, c.tk, c.heads, c.head_dim, q_w, kv_w, c.causal};
  o.q = normal(static_cast<size_t>(c.batch * c.tq * q_w), stream, 1.5f);
  if (c.layout != Layout::qkv) o.kv = normal(static_cast<size_t>(c.batch * c.tk * kv_w), stream + 1, 1.5f);
  o.k_at = kv_w - 2 * ch;
  o.v_at = kv_w - ch;
  return o;
}

void check_block(const Case& c, uint64_t stream) {
  SCOPED_TRACE(testing::Message() << "B " << c.batch << " Tq " << c.tq << " Tk " << c.tk << " H " << c.heads << " D "
                                  << c.head_dim << " " << layout_name(c.layout) << (c.causal ? " causal" : "")
                                  << (c.merge ? " merge" : ""));
  ASSERT_TRUE(c.layout != Layout::qkv || c.tq == c.tk);
  const Operands op = make_operands(c, stream);
  const cpu::AttentionBlockShape& s = op.shape;
  const int64_t ch = c.heads * c.head_dim, out_n = c.batch * c.tq * ch, lse_n = c.batch * c.heads * c.tq;
  const bool one_buffer = c.layout == Layout::qkv;
  const std::vector<float>& kv_host = one_buffer ? op.q : op.kv;

  // The state before the call: with merge, an earlier result whose every fifth row has seen nothing
  // yet (lse = -inf, out NaN: it must be overwritten); without, NaN everywhere (all overwritten).
  const float nan = std::numeric_limits<float>::quiet_NaN(), neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> out0(static_cast<size_t>(out_n), nan), lse0(static_cast<size_t>(lse_n), nan);
  if (c.merge) {
    out0 = normal(out0.size(), stream + 2);
    lse0 = normal(lse0.size(), stream + 3, 1.0f, std::log(static_cast<float>(c.tk)));
    for (int64_t r = 0; r < lse_n; r += 5) {
      lse0[r] = neg_inf;
      const int64_t bh = r / c.tq, t = r % c.tq, b = bh / c.heads, h = bh % c.heads;
      for (int64_t d = 0; d < c.head_dim; ++d) out0[(b * c.tq + t) * ch + h * c.head_dim + d] = nan;
    }
  }

  DeviceBuffer<float> d_q(op.q), d_kv(kv_host), d_out(out0), d_lse(lse0);
  std::vector<float> out = out0, lse = lse0;
  cpu::attention_block_forward(out.data(), lse.data(), op.q.data(), kv_host.data() + op.k_at,
                               kv_host.data() + op.v_at, s, c.merge);
  gpu::attention_block_forward(d_out.get(), d_lse.get(), d_q.get(), d_kv.get() + op.k_at, d_kv.get() + op.v_at, s,
                               c.merge);
  EXPECT_TRUE(all_close(d_out.host(), out, 2e-5, 1e-4)) << "out";
  EXPECT_TRUE(all_close(d_lse.host(), lse, 2e-5, 1e-4)) << "lse";

  // Backward from the CPU's out and lse on both sides, so only the backward is compared. dq and dkv
  // start random: the kernels add into them and leave the other columns alone.
  const auto dout = normal(static_cast<size_t>(out_n), stream + 4);
  const auto dq0 = normal(op.q.size(), stream + 5), dkv0 = one_buffer ? dq0 : normal(op.kv.size(), stream + 6);
  std::vector<float> dq = dq0, dkv_own = dkv0;
  float* dkv = one_buffer ? dq.data() : dkv_own.data();
  cpu::attention_block_backward(dq.data(), dkv + op.k_at, dkv + op.v_at, dout.data(), op.q.data(),
                                kv_host.data() + op.k_at, kv_host.data() + op.v_at, out.data(), lse.data(), s);

  DeviceBuffer<float> d_dout(dout), c_out(out), c_lse(lse), d_dq(dq0), d_dkv_own(one_buffer ? 0 : dkv0.size());
  DeviceBuffer<float>& d_dkv = one_buffer ? d_dq : d_dkv_own;
  auto run_gpu_backward = [&] {
    d_dq.upload(dq0);
    if (!one_buffer) d_dkv.upload(dkv0);
    gpu::attention_block_backward(d_dq.get(), d_dkv.get() + op.k_at, d_dkv.get() + op.v_at, d_dout.get(), d_q.get(),
                                  d_kv.get() + op.k_at, d_kv.get() + op.v_at, c_out.get(), c_lse.get(), s);
  };
  run_gpu_backward();
  const auto got_dq = d_dq.host(), got_dkv = d_dkv.host();
  EXPECT_TRUE(all_close(got_dq, dq, 1e-4, 1e-3)) << (one_buffer ? "dqkv" : "dq");
  if (!one_buffer) {
    EXPECT_TRUE(all_close(got_dkv, dkv_own, 1e-4, 1e-3)) << "dkv";
  }

  run_gpu_backward();
  EXPECT_TRUE(bit_equal(d_dq.host(), got_dq)) << "backward is not deterministic (dq)";
  if (!one_buffer) {
    EXPECT_TRUE(bit_equal(d_dkv.host(), got_dkv)) << "backward is not deterministic (dkv)";
  }
}

}  // namespace

TEST(CudaAttentionBlock, NonCausalMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  const Case cases[] = {
      {1, 1, 1, 1, 32, Layout::dense, false, false},    {2, 67, 130, 3, 32, Layout::dense, false, false},
      {2, 33, 200, 2, 16, Layout::strided, false, false}, {1, 130, 33, 2, 64, Layout::strided, false, false},
      {2, 65, 65, 4, 48, Layout::qkv, false, false},     {1, 64, 64, 2, 64, Layout::qkv, false, false},
      {1, 200, 64, 2, 100, Layout::dense, false, false}, {1, 70, 129, 1, 128, Layout::strided, false, false},
      {2, 1, 70, 2, 16, Layout::dense, false, false},
  };
  uint64_t stream = 900;
  for (const Case& c : cases) check_block(c, stream += 10);
}

TEST(CudaAttentionBlock, NonCausalMergeMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  const Case cases[] = {
      {2, 67, 130, 3, 32, Layout::dense, false, true},   {1, 130, 33, 2, 64, Layout::strided, false, true},
      {2, 33, 200, 2, 16, Layout::strided, false, true}, {1, 64, 64, 2, 64, Layout::qkv, false, true},
      {1, 200, 64, 2, 100, Layout::dense, false, true},  {1, 70, 129, 1, 128, Layout::strided, false, true},
  };
  uint64_t stream = 1100;
  for (const Case& c : cases) check_block(c, stream += 10);
}

TEST(CudaAttentionBlock, CausalMatchesCpu) {
  TESSERA_REQUIRE_CUDA();
  const Case cases[] = {
      {1, 1, 1, 1, 32, Layout::qkv, true, false},       {1, 70, 70, 1, 128, Layout::dense, true, false},
      {2, 129, 129, 2, 16, Layout::qkv, true, false},   {2, 129, 129, 2, 16, Layout::qkv, true, true},
      {1, 130, 130, 2, 64, Layout::strided, true, true}, {2, 64, 64, 3, 32, Layout::strided, true, false},
      {2, 100, 100, 2, 48, Layout::dense, true, true},
  };
  uint64_t stream = 1300;
  for (const Case& c : cases) check_block(c, stream += 10);
}

// The ops-level dispatch on cuda tensors, as ViT calls it: q = kv = one qkv, non-causal, dq = dkv.
TEST(CudaAttentionBlock, OpsDispatchCudaTensors) {
  TESSERA_REQUIRE_CUDA();
  using tessera::Device;
  using tessera::Tensor;
  const int64_t batch = 2, seq = 50, heads = 3, head_dim = 32, ch = heads * head_dim;
  Tensor qkv = Tensor::empty({batch, seq, 3 * ch}), dout = Tensor::empty({batch, seq, ch});
  const auto qkv_host = normal(static_cast<size_t>(qkv.numel()), 1500, 1.5f);
  const auto dout_host = normal(static_cast<size_t>(dout.numel()), 1501);
  std::copy(qkv_host.begin(), qkv_host.end(), qkv.data<float>());
  std::copy(dout_host.begin(), dout_host.end(), dout.data<float>());
  Tensor out = Tensor::empty({batch, seq, ch}), lse = Tensor::empty({batch, heads, seq});
  Tensor dqkv = Tensor::zeros({batch, seq, 3 * ch});
  tessera::ops::attention_block_forward(out, lse, qkv, qkv, heads, false, false);
  tessera::ops::attention_block_backward(dqkv, dqkv, dout, qkv, qkv, out, lse, heads, false);

  const Tensor g_qkv = qkv.to(Device::cuda), g_dout = dout.to(Device::cuda);
  Tensor g_out = Tensor::empty(out.shape(), tessera::DType::f32, Device::cuda);
  Tensor g_lse = Tensor::empty(lse.shape(), tessera::DType::f32, Device::cuda);
  Tensor g_dqkv = Tensor::zeros(dqkv.shape(), tessera::DType::f32, Device::cuda);
  tessera::ops::attention_block_forward(g_out, g_lse, g_qkv, g_qkv, heads, false, false);
  tessera::ops::attention_block_backward(g_dqkv, g_dqkv, g_dout, g_qkv, g_qkv, g_out, g_lse, heads, false);

  auto host = [](const Tensor& t) {
    const Tensor h = t.to(Device::cpu);
    return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
  };
  EXPECT_TRUE(all_close(host(g_out), host(out), 2e-5, 1e-4)) << "out";
  EXPECT_TRUE(all_close(host(g_lse), host(lse), 2e-5, 1e-4)) << "lse";
  // The backward ran from each side's own forward: a looser bound than the kernel comparisons.
  EXPECT_TRUE(all_close(host(g_dqkv), host(dqkv), 2e-4, 2e-3)) << "dqkv";
}

TEST(CudaAttentionBlock, HeadDimAbove128Throws) {
  TESSERA_REQUIRE_CUDA();
  const cpu::AttentionBlockShape s{1, 1, 1, 1, 129, 129, 2 * 129, false};
  DeviceBuffer<float> q(129), kv(2 * 129), out(129), lse(1), dq(129), dkv(2 * 129), dout(129);
  EXPECT_THROW(gpu::attention_block_forward(out.get(), lse.get(), q.get(), kv.get(), kv.get() + 129, s, false),
               tessera::Error);
  EXPECT_THROW(gpu::attention_block_backward(dq.get(), dkv.get(), dkv.get() + 129, dout.get(), q.get(), kv.get(),
                                             kv.get() + 129, out.get(), lse.get(), s),
               tessera::Error);
}
