// Unit tests of the CPU embedding through ops::embedding_forward/backward: a whole table and a
// vocab-parallel shard (tokens outside it contribute zero), with and without position embeddings;
// backward accumulates and matches central finite differences of the forward, on 1 and 3 threads;
// a table given with its bf16 copy is read from it.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::DType;
using tessera::Shape;
using tessera::Tensor;

namespace {

Tensor random_tensor(Shape shape, uint64_t stream) {
  return tessera::testing::random_tensor(std::move(shape), 3, stream, 0.0f, 1.0f);
}

using Threads = tessera::testing::ScopedThreads;

// Token ids drawn from [0, id_range), with repeats.
Tensor random_tokens(int64_t batch, int64_t seq, int64_t id_range, uint64_t stream) {
  Tensor t = Tensor::empty({batch, seq}, DType::i32);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int32_t>()[i] = static_cast<int32_t>(tessera::philox_uniform(3, stream, i) * id_range);
  return t;
}

struct Case {
  int64_t batch, seq, vocab_rows, channels, vocab_start, id_range;
  bool with_wpe;
};

class Embedding : public ::testing::TestWithParam<Case> {};

// out = wte[token - start] (zero outside the shard) + wpe[t], in double.
std::vector<double> forward_ref(const Case& c, const int32_t* tokens, const std::vector<double>& wte,
                                const std::vector<double>& wpe) {
  std::vector<double> out(c.batch * c.seq * c.channels, 0.0);
  for (int64_t bt = 0; bt < c.batch * c.seq; ++bt) {
    const int64_t row = tokens[bt] - c.vocab_start, t = bt % c.seq;
    for (int64_t x = 0; x < c.channels; ++x) {
      double v = (row >= 0 && row < c.vocab_rows) ? wte[row * c.channels + x] : 0.0;
      if (c.with_wpe) v += wpe[t * c.channels + x];
      out[bt * c.channels + x] = v;
    }
  }
  return out;
}

TEST_P(Embedding, ForwardGathersRows) {
  const Case c = GetParam();
  const Tensor tokens = random_tokens(c.batch, c.seq, c.id_range, 1);
  const Tensor wte = random_tensor({c.vocab_rows, c.channels}, 2);
  const Tensor wpe = c.with_wpe ? random_tensor({c.seq + 3, c.channels}, 3) : Tensor();
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor out = random_tensor({c.batch, c.seq, c.channels}, 4);  // overwritten
    tessera::ops::embedding_forward(out, tokens, wte, wpe, c.vocab_start);
    const auto want = forward_ref(c, tokens.data<int32_t>(), {wte.data<float>(), wte.data<float>() + wte.numel()},
                                  c.with_wpe ? std::vector<double>(wpe.data<float>(), wpe.data<float>() + wpe.numel())
                                             : std::vector<double>{});
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(out.data<float>()[i], static_cast<float>(want[i])) << i;
  }
}

// A table given with its bf16 copy is read from the copy: the rows of the table rounded to bf16
// (what mixed precision's round trip leaves the table in fp32 for).
TEST_P(Embedding, ForwardReadsATablesGivenBf16Copy) {
  const Case c = GetParam();
  const Tensor tokens = random_tokens(c.batch, c.seq, c.id_range, 1);
  const Tensor wte = random_tensor({c.vocab_rows, c.channels}, 2);
  const Tensor wpe = c.with_wpe ? random_tensor({c.seq + 3, c.channels}, 3) : Tensor();
  Tensor bits = Tensor::empty({wte.numel()}, DType::bf16);
  tessera::ops::cast(bits, wte.reshape({wte.numel()}));
  Tensor rounded = wte.clone();
  tessera::ops::round_inplace(rounded, DType::bf16);
  Tensor want = Tensor::empty({c.batch, c.seq, c.channels}, DType::f32);
  tessera::ops::embedding_forward(want, tokens, rounded, wpe, c.vocab_start);
  Tensor fp32 = Tensor::empty({c.batch, c.seq, c.channels}, DType::f32);
  tessera::ops::embedding_forward(fp32, tokens, wte, wpe, c.vocab_start);
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor out = random_tensor({c.batch, c.seq, c.channels}, 4);  // overwritten
    tessera::ops::embedding_forward(out, tokens, tessera::ops::Operand(wte, bits), wpe, c.vocab_start);
    int differs_from_fp32 = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      ASSERT_EQ(out.data<float>()[i], want.data<float>()[i]) << i;
      differs_from_fp32 += out.data<float>()[i] != fp32.data<float>()[i];
    }
    EXPECT_GT(differs_from_fp32, 0) << "the copy was not read: the output equals the fp32 table's";
  }
}

// L = sum(out * R): the gradients by central differences of the double forward (exact for a
// linear map up to rounding) against what the kernel adds onto random prior values.
TEST_P(Embedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const Case c = GetParam();
  const Tensor tokens = random_tokens(c.batch, c.seq, c.id_range, 5);
  const Tensor proj = random_tensor({c.batch, c.seq, c.channels}, 6);
  std::vector<double> wte(c.vocab_rows * c.channels, 0.5), wpe(c.with_wpe ? (c.seq + 3) * c.channels : 0, -0.25);
  const std::vector<double> r(proj.data<float>(), proj.data<float>() + proj.numel());
  // L is a sum over channels and element i of either table feeds only channel i % C, so the
  // differences evaluate that channel's term of sum(forward_ref(...) * R) alone.
  const int32_t* tok = tokens.data<int32_t>();
  auto channel_loss = [&](int64_t x) {
    double s = 0.0;
    for (int64_t bt = 0; bt < c.batch * c.seq; ++bt) {
      const int64_t row = tok[bt] - c.vocab_start;
      double v = (row >= 0 && row < c.vocab_rows) ? wte[row * c.channels + x] : 0.0;
      if (c.with_wpe) v += wpe[(bt % c.seq) * c.channels + x];
      s += v * r[bt * c.channels + x];
    }
    return s;
  };
  auto fd = [&](std::vector<double>& v) {
    std::vector<double> g(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const double keep = v[i];
      v[i] = keep + 1e-3;
      const double up = channel_loss(i % c.channels);
      v[i] = keep - 1e-3;
      const double down = channel_loss(i % c.channels);
      v[i] = keep;
      g[i] = (up - down) / 2e-3;
    }
    return g;
  };
  const auto gwte = fd(wte), gwpe = fd(wpe);
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor dwte = random_tensor({c.vocab_rows, c.channels}, 7);
    Tensor dwpe = c.with_wpe ? random_tensor({c.seq + 3, c.channels}, 8) : Tensor();
    const Tensor dwte0 = dwte.clone(), dwpe0 = c.with_wpe ? dwpe.clone() : Tensor();
    tessera::ops::embedding_backward(dwte, dwpe, proj, tokens, c.vocab_start);
    int64_t nonzero_rows = 0;
    for (int64_t i = 0; i < dwte.numel(); ++i) {
      const double added = double(dwte.data<float>()[i]) - dwte0.data<float>()[i];
      ASSERT_NEAR(added, gwte[i], 1e-5 * (1.0 + std::fabs(gwte[i]))) << "dwte element " << i << " threads " << threads;
      nonzero_rows += (i % c.channels == 0 && gwte[i] != 0.0);
    }
    EXPECT_GT(nonzero_rows, 0);
    for (size_t i = 0; i < gwpe.size(); ++i) {
      const double added = double(dwpe.data<float>()[i]) - dwpe0.data<float>()[i];
      ASSERT_NEAR(added, gwpe[i], 1e-5 * (1.0 + std::fabs(gwpe[i]))) << "dwpe element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tables, Embedding,
    ::testing::Values(Case{1, 1, 5, 3, 0, 5, true},         // one token
                      Case{2, 7, 11, 19, 0, 11, true},      // whole table, odd channels
                      Case{3, 5, 13, 8, 0, 13, false},      // no position embedding
                      Case{2, 9, 10, 17, 5, 20, true},      // a shard [5, 15) of ids in [0, 20)
                      Case{2, 40, 30, 210, 40, 120, true}), // large enough for the threaded paths
    [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace
