// Unit tests of document masking in the CPU attention kernels (ops::attention_forward/backward and
// the block kernels with segments): a packed window of several documents gives each document
// exactly its own causal attention (outputs, lse and gradients as each document run alone, across
// key tiles of 64 and documents shorter than one tile); a ring of key blocks with segments merged
// equals the whole masked kernel; gradients of the masked kernels against finite differences;
// segments on a bad shape refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "gradcheck.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Shape;
using tessera::Tensor;
using tessera::testing::expect_error;
namespace ops = tessera::ops;
namespace gc = tessera::testing;

namespace {

Tensor random_tensor(Shape shape, uint64_t stream, float std = 1.0f) {
  return tessera::testing::random_tensor(std::move(shape), 71, stream, 0.0f, std);
}

// Segments [B, T] from each row's document lengths (they sum to T).
Tensor segments_of(const std::vector<std::vector<int64_t>>& lengths, int64_t seq) {
  Tensor s = Tensor::empty({static_cast<int64_t>(lengths.size()), seq}, tessera::DType::i32);
  for (size_t b = 0; b < lengths.size(); ++b) {
    int64_t t = 0;
    for (size_t d = 0; d < lengths[b].size(); ++d)
      for (int64_t i = 0; i < lengths[b][d]; ++i) s.data<int32_t>()[static_cast<int64_t>(b) * seq + t++] = static_cast<int32_t>(d);
    EXPECT_EQ(t, seq) << "row " << b << "'s documents do not fill the window";
  }
  return s;
}

// Rows [t0, t0 + n) of batch row b of x [B, T, W], as a [1, n, W] copy.
Tensor take(const Tensor& x, int64_t b, int64_t t0, int64_t n) {
  const int64_t seq = x.dim(1), w = x.dim(2);
  Tensor out = Tensor::empty({1, n, w});
  const float* src = x.data<float>() + (b * seq + t0) * w;
  std::copy(src, src + n * w, out.data<float>());
  return out;
}

double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Each document of each row, run alone through the unmasked causal kernel, against the packed
// masked run: out, lse and dqkv (the packed dout's rows of that document).
void expect_documents_alone(const std::vector<std::vector<int64_t>>& lengths, int64_t seq, int64_t heads,
                            int64_t head_dim) {
  const int64_t batch = static_cast<int64_t>(lengths.size()), c = heads * head_dim;
  const Tensor qkv = random_tensor({batch, seq, 3 * c}, 1, 1.5f), dout = random_tensor({batch, seq, c}, 2);
  const Tensor seg = segments_of(lengths, seq);
  Tensor out = Tensor::empty({batch, seq, c}), lse = Tensor::empty({batch, heads, seq});
  Tensor dqkv = Tensor::empty(qkv.shape());
  ops::attention_forward(out, lse, qkv, heads, ops::MatmulInputs::f32, seg);
  ops::attention_backward(dqkv, dout, qkv, out, lse, heads, ops::MatmulInputs::f32, seg);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t t0 = 0;
    for (const int64_t n : lengths[static_cast<size_t>(b)]) {
      const Tensor q1 = take(qkv, b, t0, n), g1 = take(dout, b, t0, n);
      Tensor o1 = Tensor::empty({1, n, c}), l1 = Tensor::empty({1, heads, n}), d1 = Tensor::empty(q1.shape());
      ops::attention_forward(o1, l1, q1, heads);
      ops::attention_backward(d1, g1, q1, o1, l1, heads);
      const Tensor o_packed = take(out, b, t0, n), d_packed = take(dqkv, b, t0, n);
      EXPECT_LT(max_abs_diff(o_packed.data<float>(), o1.data<float>(), o1.numel()), 2e-6)
          << "out of row " << b << "'s document at " << t0 << " (" << n << " positions)";
      EXPECT_LT(max_abs_diff(d_packed.data<float>(), d1.data<float>(), d1.numel()), 2e-5)
          << "dqkv of row " << b << "'s document at " << t0;
      for (int64_t h = 0; h < heads; ++h)
        EXPECT_LT(max_abs_diff(lse.data<float>() + (b * heads + h) * seq + t0, l1.data<float>() + h * n, n), 2e-6)
            << "lse of row " << b << "'s document at " << t0 << ", head " << h;
      t0 += n;
    }
  }
}

TEST(DocumentMask, PackedDocumentsMatchEachDocumentAlone) {
  // Documents across 64-key tiles, shorter than a tile, of one position, and a row of one document.
  expect_documents_alone({{40, 70, 1, 39}, {150}, {1, 100, 49}}, 150, 2, 16);
  expect_documents_alone({{3, 5, 2, 6}}, 16, 3, 5);
}

// The ring's pieces: the diagonal block (causal, segments) then every earlier key block merged in
// (non-causal) with its own segments, equal to the whole masked kernel; a query row whose document
// starts inside its own block sees nothing of the earlier blocks (the merge leaves it as it was).
TEST(DocumentMask, RingOfMaskedBlocksMatchesTheWholeKernel) {
  const int64_t batch = 2, seq = 96, blocks = 3, tb = seq / blocks, heads = 2, head_dim = 8, c = heads * head_dim;
  const Tensor qkv = random_tensor({batch, seq, 3 * c}, 3, 1.5f), dout = random_tensor({batch, seq, c}, 4);
  const Tensor seg = segments_of({{10, 50, 36}, {32, 1, 63}}, seq);
  Tensor out = Tensor::empty({batch, seq, c}), lse = Tensor::empty({batch, heads, seq}), dqkv = Tensor::empty(qkv.shape());
  ops::attention_forward(out, lse, qkv, heads, ops::MatmulInputs::f32, seg);
  ops::attention_backward(dqkv, dout, qkv, out, lse, heads, ops::MatmulInputs::f32, seg);
  auto block = [&](const Tensor& x, int64_t i) {
    return tessera::testing::take_positions(x, i * tb, tb);
  };
  std::vector<Tensor> q, g, s, o, l, d;
  for (int64_t i = 0; i < blocks; ++i) {
    q.push_back(block(qkv, i));
    g.push_back(block(dout, i));
    Tensor si = Tensor::empty({batch, tb}, tessera::DType::i32);
    for (int64_t b = 0; b < batch; ++b)
      std::copy(seg.data<int32_t>() + b * seq + i * tb, seg.data<int32_t>() + b * seq + (i + 1) * tb,
                si.data<int32_t>() + b * tb);
    s.push_back(si);
    o.push_back(Tensor::empty({batch, tb, c}));
    l.push_back(Tensor::empty({batch, heads, tb}));
    d.push_back(Tensor::zeros(q[static_cast<size_t>(i)].shape()));
  }
  for (int64_t i = 0; i < blocks; ++i) {
    ops::attention_block_forward(o[i], l[i], q[i], q[i], heads, true, false, s[i], s[i]);
    for (int64_t j = i - 1; j >= 0; --j) ops::attention_block_forward(o[i], l[i], q[i], q[j], heads, false, true, s[i], s[j]);
  }
  for (int64_t i = 0; i < blocks; ++i) {
    ops::attention_block_backward(d[i], d[i], g[i], q[i], q[i], o[i], l[i], heads, true, s[i], s[i]);
    for (int64_t j = i - 1; j >= 0; --j)
      ops::attention_block_backward(d[i], d[j], g[i], q[i], q[j], o[i], l[i], heads, false, s[i], s[j]);
  }
  for (int64_t i = 0; i < blocks; ++i) {
    const Tensor want_o = block(out, i), want_d = block(dqkv, i);
    EXPECT_LT(max_abs_diff(o[i].data<float>(), want_o.data<float>(), want_o.numel()), 2e-6) << "out of block " << i;
    EXPECT_LT(max_abs_diff(d[i].data<float>(), want_d.data<float>(), want_d.numel()), 2e-5) << "dqkv of block " << i;
  }
}

// ---- gradients against finite differences ---------------------------------------------------------

constexpr float kStep = 1.0f / 32;
constexpr double kTol = 1e-4;

template <typename F>
void check(const std::string& what, Tensor& x, const Tensor& analytic, F&& f) {
  const gc::Comparison cmp = gc::compare_gradient(what, x, analytic, kStep, f);
  EXPECT_LT(cmp.rel_err, kTol) << what;
  EXPECT_GT(cmp.num_norm, 1e-3) << what << ": the objective barely depends on it";
}

TEST(DocumentMaskGrad, MaskedSelfAttentionMatchesFiniteDifferences) {
  const int64_t heads = 2, head_dim = 3, seq = 9, c = heads * head_dim;
  Tensor qkv = random_tensor({2, seq, 3 * c}, 5, 1.5f);
  const Tensor r = random_tensor({2, seq, c}, 6);
  const Tensor seg = segments_of({{4, 1, 4}, {2, 7}}, seq);
  Tensor out = Tensor::empty({2, seq, c}), lse = Tensor::empty({2, heads, seq});
  auto f = [&]() {
    ops::attention_forward(out, lse, qkv, heads, ops::MatmulInputs::f32, seg);
    return gc::dot(out, r);
  };
  f();
  Tensor dqkv = Tensor::empty(qkv.shape());
  ops::attention_backward(dqkv, r, qkv, out, lse, heads, ops::MatmulInputs::f32, seg);
  check("qkv (documents 4, 1, 4 and 2, 7)", qkv, dqkv, f);
}

TEST(DocumentMaskGrad, MaskedMergedBlocksMatchFiniteDifferences) {
  // Queries of segments {1, 1, 2, 2, 2} against their diagonal block and an earlier block whose keys
  // are of segments {0, 0, 1, 1}: the first two queries see two earlier keys, the others none.
  const int64_t batch = 1, seq = 5, tk = 4, heads = 2, head_dim = 3, c = heads * head_dim;
  Tensor qkv = random_tensor({batch, seq, 3 * c}, 7, 1.5f), kv = random_tensor({batch, tk, 2 * c}, 8, 1.5f);
  const Tensor r = random_tensor({batch, seq, c}, 9);
  Tensor qs = Tensor::empty({batch, seq}, tessera::DType::i32), ks = Tensor::empty({batch, tk}, tessera::DType::i32);
  const int32_t q_ids[] = {1, 1, 2, 2, 2}, k_ids[] = {0, 0, 1, 1};
  std::copy(q_ids, q_ids + seq, qs.data<int32_t>());
  std::copy(k_ids, k_ids + tk, ks.data<int32_t>());
  Tensor out = Tensor::empty({batch, seq, c}), lse = Tensor::empty({batch, heads, seq});
  auto forward = [&]() {
    ops::attention_block_forward(out, lse, qkv, qkv, heads, true, false, qs, qs);
    ops::attention_block_forward(out, lse, qkv, kv, heads, false, true, qs, ks);
  };
  auto f = [&]() {
    forward();
    return gc::dot(out, r);
  };
  forward();
  Tensor dqkv = Tensor::zeros(qkv.shape()), dkv = Tensor::zeros(kv.shape());
  ops::attention_block_backward(dqkv, dqkv, r, qkv, qkv, out, lse, heads, true, qs, qs);
  ops::attention_block_backward(dqkv, dkv, r, qkv, kv, out, lse, heads, false, qs, ks);
  check("qkv (diagonal block, masked)", qkv, dqkv, f);
  // Only keys 2 and 3 (segment 1) are seen: the others' gradient is exactly zero.
  for (int64_t j = 0; j < 2; ++j)
    for (int64_t i = 0; i < 2 * c; ++i) EXPECT_EQ(dkv.data<float>()[j * 2 * c + i], 0.0f) << "key " << j;
  check("kv (earlier block, keys of segment 1 seen)", kv, dkv, f);
}

TEST(DocumentMaskOps, RefusesSegmentsOfTheWrongShape) {
  const Tensor qkv = random_tensor({1, 4, 12}, 10);
  Tensor out = Tensor::empty({1, 4, 4}), lse = Tensor::empty({1, 2, 4});
  const Tensor short_seg = Tensor::zeros({1, 3}, tessera::DType::i32);
  expect_error([&] { ops::attention_forward(out, lse, qkv, 2, ops::MatmulInputs::f32, short_seg); },
               "segments must be int32 [1, 4]");
  const Tensor float_seg = Tensor::zeros({1, 4});
  expect_error([&] { ops::attention_forward(out, lse, qkv, 2, ops::MatmulInputs::f32, float_seg); }, "int32");
  const Tensor seg = Tensor::zeros({1, 4}, tessera::DType::i32);
  expect_error([&] { ops::attention_block_forward(out, lse, qkv, qkv, 2, true, false, seg, Tensor()); },
               "segments of both the queries and the keys");
}

}  // namespace
