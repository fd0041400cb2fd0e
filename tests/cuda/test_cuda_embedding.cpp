// CUDA token + position embedding against the CPU twin, for a whole table and a vocabulary shard
// (vocab_start > 0, tokens outside the shard), with and without wpe: forward bit for bit (also
// reading the table's bf16 copy); backward
// accumulating onto nonzero dwte / dwpe bit for bit (both add each row's gradients in token order),
// with heavily repeated tokens.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"

namespace cpu = tessera::kernels::cpu;
namespace gpu = tessera::kernels::cuda;
using namespace tessera::cuda_test;

namespace {

struct Case {
  int64_t batch, seq, vocab_rows, channels, vocab_start;
  bool with_wpe;
};

// Token ids spread over [vocab_start - 10, vocab_start + vocab_rows + 10), every 5th one the same id.
std::vector<int32_t> tokens_for(const Case& c) {
  const auto u = normal(c.batch * c.seq, 71);
  std::vector<int32_t> t(c.batch * c.seq);
  for (size_t i = 0; i < t.size(); ++i) {
    const int64_t spread = static_cast<int64_t>(std::fabs(u[i]) * 104729.0f) % (c.vocab_rows + 20);
    t[i] = static_cast<int32_t>(i % 5 == 0 ? c.vocab_start + 1 : c.vocab_start - 10 + spread);
  }
  return t;
}

void check_embedding(const Case& c) {
  SCOPED_TRACE(testing::Message() << "B " << c.batch << " T " << c.seq << " V " << c.vocab_rows << " C " << c.channels
                                  << " start " << c.vocab_start << (c.with_wpe ? " with wpe" : " without wpe"));
  const int64_t positions = c.batch * c.seq;
  const auto tokens = tokens_for(c);
  const auto wte = normal(c.vocab_rows * c.channels, 72), wpe = normal(c.seq * c.channels, 73);
  const auto dout = normal(positions * c.channels, 74);
  DeviceBuffer<int32_t> d_tokens(tokens);
  DeviceBuffer<float> d_wte(wte), d_wpe(wpe), d_dout(dout), d_out(positions * c.channels);
  d_out.fill_bytes(0xff);

  std::vector<float> out(positions * c.channels);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, c.with_wpe ? wpe.data() : nullptr, c.batch,
                         c.seq, c.vocab_rows, c.channels, c.vocab_start);
  gpu::embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), nullptr, c.with_wpe ? d_wpe.get() : nullptr,
                         c.batch, c.seq, c.vocab_rows, c.channels, c.vocab_start);
  EXPECT_TRUE(bit_equal(d_out.host(), out)) << "forward";

  // The table read from its bf16 copy (mixed precision's copy, owned by the parameter store).
  std::vector<uint16_t> bits(wte.size());
  cpu::f32_to_bf16(bits.data(), wte.data(), static_cast<int64_t>(wte.size()));
  DeviceBuffer<uint16_t> d_bits(bits);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), bits.data(), c.with_wpe ? wpe.data() : nullptr,
                         c.batch, c.seq, c.vocab_rows, c.channels, c.vocab_start);
  gpu::embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_bits.get(), c.with_wpe ? d_wpe.get() : nullptr,
                         c.batch, c.seq, c.vocab_rows, c.channels, c.vocab_start);
  EXPECT_TRUE(bit_equal(d_out.host(), out)) << "forward from the table's bf16 copy";

  auto dwte = normal(c.vocab_rows * c.channels, 75), dwpe = normal(c.seq * c.channels, 76);
  DeviceBuffer<float> d_dwte(dwte), d_dwpe(dwpe);
  cpu::embedding_backward(dwte.data(), c.with_wpe ? dwpe.data() : nullptr, dout.data(), tokens.data(), c.batch, c.seq,
                          c.vocab_rows, c.channels, c.vocab_start);
  gpu::embedding_backward(d_dwte.get(), c.with_wpe ? d_dwpe.get() : nullptr, d_dout.get(), d_tokens.get(), c.batch,
                          c.seq, c.vocab_rows, c.channels, c.vocab_start);
  EXPECT_TRUE(bit_equal(d_dwte.host(), dwte)) << "dwte";
  EXPECT_TRUE(bit_equal(d_dwpe.host(), dwpe)) << "dwpe";  // untouched when there is no wpe
}

}  // namespace

TEST(CudaEmbedding, ForwardAndBackwardMatchCpu) {
  TESSERA_REQUIRE_CUDA();
  check_embedding({2, 33, 50, 19, 0, true});
  check_embedding({3, 17, 40, 70, 25, false});
  check_embedding({4, 128, 1000, 64, 500, true});
  check_embedding({1, 1, 1, 1, 0, true});
  check_embedding({8, 512, 50304, 32, 0, true});
}
