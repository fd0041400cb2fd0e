// Unit tests of the rotary qkv packing through ops::rope_pack_forward/backward: Hugging Face
// Llama's "rotate half" convention on numbers worked by hand; forward and backward against a
// double reference for multi-head, grouped-query, multi-query, tensor-parallel shards (a kv head
// range of their own, or all kv heads replicated), sequence shards (first_position > 0) and two
// thetas; the backward as the exact transpose (<R x, y> = <x, R^T y>) that zeroes kv heads no query
// head reads; shards reproducing the one-rank result bit for bit; bad shapes named by the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Tensor;
using tessera::testing::expect_error;
using tessera::ops::RopeShape;
using tessera::testing::rel_error;
using Threads = tessera::testing::ScopedThreads;

namespace {

Tensor random_tensor(tessera::Shape shape, uint64_t stream) {
  return tessera::testing::random_tensor(std::move(shape), 53, stream);
}

Tensor nan_filled(tessera::Shape shape) {
  Tensor t = Tensor::empty(std::move(shape));
  std::fill_n(t.data<float>(), t.numel(), NAN);
  return t;
}

struct Case {
  const char* name;
  int64_t batch, seq, heads, kv_heads, head_dim, group, first_head, first_kv_head, first_position;
  float theta;
  RopeShape shape() const {
    RopeShape s;
    s.batch = batch;
    s.seq = seq;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.head_dim = head_dim;
    s.group = group;
    s.first_head = first_head;
    s.first_kv_head = first_kv_head;
    s.first_position = first_position;
    s.theta = theta;
    return s;
  }
};

// The kv head (index into k and v) query head h reads.
int64_t kv_of(const RopeShape& s, int64_t h) { return (s.first_head + h) / s.group - s.first_kv_head; }

// cos and sin of position p's angle for pair i: p theta^(-2i/D), in double.
void angle(const RopeShape& s, int64_t p, int64_t i, double& c, double& sn) {
  const double a = static_cast<double>(p) * std::pow(static_cast<double>(s.theta), -2.0 * i / s.head_dim);
  c = std::cos(a);
  sn = std::sin(a);
}

// qkv [B, T, 3, H, D] from q [B, T, H, D], k and v [B, T, K, D], in double:
//   q'[i] = q[i] cos - q[i + D/2] sin,  q'[i + D/2] = q[i + D/2] cos + q[i] sin  (k likewise).
std::vector<double> forward_ref(const Tensor& q, const Tensor& k, const Tensor& v, const RopeShape& s) {
  const int64_t H = s.heads, K = s.kv_heads, D = s.head_dim, half = D / 2;
  std::vector<double> out(static_cast<size_t>(s.batch * s.seq * 3 * H * D));
  for (int64_t n = 0; n < s.batch * s.seq; ++n) {
    const int64_t pos = s.first_position + n % s.seq;
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data<float>() + (n * H + h) * D;
      const float* kh = k.data<float>() + (n * K + kv_of(s, h)) * D;
      const float* vh = v.data<float>() + (n * K + kv_of(s, h)) * D;
      double* oq = out.data() + (n * 3 * H + h) * D;
      double* ok = oq + H * D;
      double* ov = ok + H * D;
      for (int64_t i = 0; i < half; ++i) {
        double c, sn;
        angle(s, pos, i, c, sn);
        oq[i] = qh[i] * c - qh[i + half] * sn;
        oq[i + half] = qh[i + half] * c + qh[i] * sn;
        ok[i] = kh[i] * c - kh[i + half] * sn;
        ok[i + half] = kh[i + half] * c + kh[i] * sn;
      }
      for (int64_t d = 0; d < D; ++d) ov[d] = vh[d];
    }
  }
  return out;
}

// The transpose, in double: each head's gradient rotated back by its angle; a kv head's summed over
// the query heads reading it (zero for one that none reads).
void backward_ref(std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv, const Tensor& dqkv,
                  const RopeShape& s) {
  const int64_t H = s.heads, K = s.kv_heads, D = s.head_dim, half = D / 2, rows = s.batch * s.seq;
  dq.assign(static_cast<size_t>(rows * H * D), 0.0);
  dk.assign(static_cast<size_t>(rows * K * D), 0.0);
  dv.assign(dk.size(), 0.0);
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t pos = s.first_position + n % s.seq;
    for (int64_t h = 0; h < H; ++h) {
      const float* gq = dqkv.data<float>() + (n * 3 * H + h) * D;
      const float* gk = gq + H * D;
      const float* gv = gk + H * D;
      double* q = dq.data() + (n * H + h) * D;
      double* k = dk.data() + (n * K + kv_of(s, h)) * D;
      double* v = dv.data() + (n * K + kv_of(s, h)) * D;
      for (int64_t i = 0; i < half; ++i) {
        double c, sn;
        angle(s, pos, i, c, sn);
        q[i] += gq[i] * c + gq[i + half] * sn;
        q[i + half] += gq[i + half] * c - gq[i] * sn;
        k[i] += gk[i] * c + gk[i + half] * sn;
        k[i + half] += gk[i + half] * c - gk[i] * sn;
      }
      for (int64_t d = 0; d < D; ++d) v[d] += gv[d];
    }
  }
}

double dot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

class Rope : public ::testing::TestWithParam<Case> {};

TEST_P(Rope, ForwardMatchesDoubleReference) {
  const RopeShape s = GetParam().shape();
  const int64_t rows = s.batch * s.seq, D = s.head_dim;
  const Tensor q = random_tensor({s.batch, s.seq, s.heads * D}, 1);
  const Tensor k = random_tensor({s.batch, s.seq, s.kv_heads * D}, 2), v = random_tensor(k.shape(), 3);
  const std::vector<double> want = forward_ref(q, k, v, s);
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor qkv = nan_filled({rows, 3 * s.heads * D});  // every element must be written
    tessera::ops::rope_pack_forward(qkv, q, k, v, s);
    EXPECT_LT(rel_error(qkv.data<float>(), want), 2e-6) << "threads " << threads;
  }
}

TEST_P(Rope, BackwardMatchesDoubleReferenceAndOverwrites) {
  const RopeShape s = GetParam().shape();
  const int64_t rows = s.batch * s.seq, D = s.head_dim;
  const Tensor dqkv = random_tensor({s.batch, s.seq, 3 * s.heads * D}, 4);
  std::vector<double> wq, wk, wv;
  backward_ref(wq, wk, wv, dqkv, s);
  for (int threads : {1, 3}) {
    Threads scope(threads);
    // NaN before: an element left unwritten shows; a kv head no query head reads must come out 0.
    Tensor dq = nan_filled({rows, s.heads * D}), dk = nan_filled({rows, s.kv_heads * D});
    Tensor dv = nan_filled({rows, s.kv_heads * D});
    tessera::ops::rope_pack_backward(dq, dk, dv, dqkv, s);
    EXPECT_LT(rel_error(dq.data<float>(), wq), 2e-6) << "dq, threads " << threads;
    EXPECT_LT(rel_error(dk.data<float>(), wk), 2e-6) << "dk, threads " << threads;
    EXPECT_LT(rel_error(dv.data<float>(), wv), 2e-6) << "dv, threads " << threads;
    for (int64_t kv = 0; kv < s.kv_heads; ++kv) {
      bool read = false;
      for (int64_t h = 0; h < s.heads; ++h) read = read || kv_of(s, h) == kv;
      if (read) continue;
      for (int64_t n = 0; n < rows; ++n)
        for (int64_t d = 0; d < D; ++d) {
          ASSERT_EQ(dk.data<float>()[(n * s.kv_heads + kv) * D + d], 0.0f) << "kv head " << kv << " read by none";
          ASSERT_EQ(dv.data<float>()[(n * s.kv_heads + kv) * D + d], 0.0f) << "kv head " << kv << " read by none";
        }
    }
  }
}

// <R(q, k, v), y> = <q, dq> + <k, dk> + <v, dv> with (dq, dk, dv) = R^T y, summed in double over
// the float results: the backward is the forward's exact transpose (rounding aside).
TEST_P(Rope, BackwardIsTheTransposeOfForward) {
  const RopeShape s = GetParam().shape();
  const int64_t rows = s.batch * s.seq, D = s.head_dim;
  const Tensor q = random_tensor({rows, s.heads * D}, 5), k = random_tensor({rows, s.kv_heads * D}, 6);
  const Tensor v = random_tensor(k.shape(), 7), y = random_tensor({rows, 3 * s.heads * D}, 8);
  Tensor qkv = Tensor::empty(y.shape()), dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape());
  Tensor dv = Tensor::empty(v.shape());
  tessera::ops::rope_pack_forward(qkv, q, k, v, s);
  tessera::ops::rope_pack_backward(dq, dk, dv, y, s);
  const double lhs = dot(qkv.data<float>(), y.data<float>(), y.numel());
  const double rhs = dot(q.data<float>(), dq.data<float>(), q.numel()) +
                     dot(k.data<float>(), dk.data<float>(), k.numel()) +
                     dot(v.data<float>(), dv.data<float>(), v.numel());
  // Terms are O(1) and there are numel of them: the sums' scale is sqrt(numel).
  EXPECT_NEAR(lhs, rhs, 1e-5 * std::sqrt(static_cast<double>(y.numel()))) << "lhs " << lhs << ", rhs " << rhs;
}

// Theta 10000 (Llama 2) and 500000 (Llama 3); D from 2 up; above 1 << 14 elements the rows (and
// the table's positions) are shared among threads.
INSTANTIATE_TEST_SUITE_P(
    Layouts, Rope,
    ::testing::Values(
        //   name                 B   T   H  K   D  group first_head first_kv first_pos theta
        Case{"mha", 2, 5, 3, 3, 8, 1, 0, 0, 0, 10000.0f},
        Case{"mha_d2", 1, 9, 2, 2, 2, 1, 0, 0, 0, 10000.0f},
        Case{"gqa_h8_k2", 2, 6, 8, 2, 16, 4, 0, 0, 0, 10000.0f},
        Case{"mqa", 1, 7, 4, 1, 8, 4, 0, 0, 0, 10000.0f},
        // global H 8, K 4 over tp 2: rank 1 has query heads 4..7 and kv heads 2..3
        Case{"tp_rank1_of_2", 2, 4, 4, 2, 8, 2, 4, 2, 0, 10000.0f},
        // the same rank given all 4 kv heads: heads 0..1 are read by none
        Case{"tp_rank1_all_kv", 2, 4, 4, 4, 8, 2, 4, 0, 0, 10000.0f},
        // global H 4, K 1 over tp 4: rank 2 holds query head 2; the one kv head is replicated
        Case{"tp_rank2_of_4_replicated_kv", 2, 3, 1, 1, 8, 4, 2, 0, 0, 10000.0f},
        // a sequence-parallel shard: positions 37..41
        Case{"sp_shard", 2, 5, 8, 2, 16, 4, 0, 0, 37, 10000.0f},
        Case{"theta_500k", 1, 12, 4, 2, 32, 2, 0, 0, 3, 500000.0f},
        Case{"threads_gqa_theta_500k", 2, 64, 8, 2, 64, 4, 0, 0, 1000, 500000.0f},
        Case{"threads_mha_far_positions", 3, 40, 4, 4, 64, 1, 0, 0, 8000, 10000.0f},
        // a 128k context's last positions, across the table's anchor at 131072 = 512 x 256
        Case{"long_context_positions", 1, 40, 2, 1, 128, 2, 0, 0, 131050, 500000.0f},
        // a cos/sin table above 1 << 14 entries, made by several threads
        Case{"threads_long_table", 1, 600, 2, 1, 64, 2, 0, 0, 70000, 500000.0f}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- the convention, by hand ----------------------------------------------------------------------

// One head of D = 4 at position 3, theta 10000: pairs (0, 2) at angle 3 and (1, 3) at angle
// 3 / 100 (theta^(-2/4) = 1/100): Hugging Face's rotate_half, not interleaved pairs (0, 1), (2, 3).
TEST(RopeConvention, RotatesHalvesAsHuggingFaceLlama) {
  RopeShape s;
  s.batch = 1;
  s.seq = 1;
  s.heads = 1;
  s.kv_heads = 1;
  s.head_dim = 4;
  s.first_position = 3;
  Tensor q = Tensor::empty({1, 4}), k = Tensor::empty({1, 4}), v = Tensor::empty({1, 4});
  const float x[4] = {1.0f, 2.0f, 3.0f, 4.0f}, kx[4] = {-0.5f, 0.25f, 2.0f, -1.0f};
  std::memcpy(q.data<float>(), x, sizeof x);
  std::memcpy(k.data<float>(), kx, sizeof kx);
  std::memcpy(v.data<float>(), x, sizeof x);
  Tensor qkv = Tensor::empty({1, 12});
  tessera::ops::rope_pack_forward(qkv, q, k, v, s);
  const double c0 = std::cos(3.0), s0 = std::sin(3.0), c1 = std::cos(0.03), s1 = std::sin(0.03);
  const double want[12] = {1 * c0 - 3 * s0,      2 * c1 - 4 * s1,      3 * c0 + 1 * s0,     4 * c1 + 2 * s1,
                           -0.5 * c0 - 2.0 * s0, 0.25 * c1 + 1.0 * s1, 2.0 * c0 - 0.5 * s0, -1.0 * c1 + 0.25 * s1,
                           1, 2, 3, 4};
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(qkv.data<float>()[i], want[i], 1e-6) << "element " << i;
  // position 0 is the identity
  s.first_position = 0;
  tessera::ops::rope_pack_forward(qkv, q, k, v, s);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(qkv.data<float>()[i], x[i]) << "position 0, element " << i;
}

// ---- shards reproduce the one-rank result bit for bit -------------------------------------------

// Heads [h0, h0 + n) of x [rows, heads x D], as a [rows, n x D] copy.
Tensor take_heads(const Tensor& x, int64_t heads, int64_t D, int64_t h0, int64_t n) {
  const int64_t rows = x.numel() / (heads * D);
  Tensor out = Tensor::empty({rows, n * D});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data<float>() + r * n * D, x.data<float>() + (r * heads + h0) * D,
                static_cast<size_t>(n * D) * sizeof(float));
  return out;
}

// qkv [rows, 3, H, D] -> the part [rows, 3, n, D] of heads [h0, h0 + n).
Tensor take_qkv_heads(const Tensor& qkv, int64_t H, int64_t D, int64_t h0, int64_t n) {
  return take_heads(qkv.reshape({qkv.numel() / (H * D), H * D}), H, D, h0, n)
      .reshape({qkv.numel() / (3 * H * D), 3 * n * D});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Global H 8, K 4 (group 2): tensor-parallel ranks of tp 2 and 4 (their own kv heads), and a
// sequence shard of positions [5, 12) of 16, each against the one-rank pack of the same data.
TEST(RopeParity, ShardsReproduceOneRankBitForBit) {
  const int64_t B = 2, T = 16, H = 8, K = 4, D = 16;
  RopeShape full;
  full.batch = B;
  full.seq = T;
  full.heads = H;
  full.kv_heads = K;
  full.head_dim = D;
  full.group = 2;
  full.theta = 500000.0f;
  const Tensor q = random_tensor({B, T, H * D}, 11), k = random_tensor({B, T, K * D}, 12);
  const Tensor v = random_tensor(k.shape(), 13), y = random_tensor({B, T, 3 * H * D}, 14);
  Tensor qkv = Tensor::empty({B, T, 3 * H * D}), dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape());
  Tensor dv = Tensor::empty(k.shape());
  tessera::ops::rope_pack_forward(qkv, q, k, v, full);
  tessera::ops::rope_pack_backward(dq, dk, dv, y, full);

  for (int64_t tp : {2, 4}) {
    for (int64_t rank = 0; rank < tp; ++rank) {
      SCOPED_TRACE(testing::Message() << "tp " << tp << ", rank " << rank);
      RopeShape s = full;
      s.heads = H / tp;
      s.kv_heads = K / tp;
      s.first_head = rank * s.heads;
      s.first_kv_head = rank * s.kv_heads;
      const Tensor qs = take_heads(q, H, D, s.first_head, s.heads);
      const Tensor ks = take_heads(k, K, D, s.first_kv_head, s.kv_heads);
      const Tensor vs = take_heads(v, K, D, s.first_kv_head, s.kv_heads);
      const Tensor ys = take_qkv_heads(y, H, D, s.first_head, s.heads);
      Tensor qkv_s = Tensor::empty({B * T, 3 * s.heads * D}), dq_s = Tensor::empty(qs.shape());
      Tensor dk_s = Tensor::empty(ks.shape()), dv_s = Tensor::empty(ks.shape());
      tessera::ops::rope_pack_forward(qkv_s, qs, ks, vs, s);
      tessera::ops::rope_pack_backward(dq_s, dk_s, dv_s, ys, s);
      EXPECT_TRUE(same_bits(qkv_s, take_qkv_heads(qkv, H, D, s.first_head, s.heads))) << "qkv";
      EXPECT_TRUE(same_bits(dq_s, take_heads(dq, H, D, s.first_head, s.heads))) << "dq";
      // a kv head's query heads are all on its rank here (group 2 divides H / tp)
      EXPECT_TRUE(same_bits(dk_s, take_heads(dk, K, D, s.first_kv_head, s.kv_heads))) << "dk";
      EXPECT_TRUE(same_bits(dv_s, take_heads(dv, K, D, s.first_kv_head, s.kv_heads))) << "dv";
    }
  }

  const int64_t t0 = 5, n = 7;
  RopeShape s = full;
  s.seq = n;
  s.first_position = t0;
  Tensor qkv_s = Tensor::empty({B, n, 3 * H * D}), dq_s = Tensor::empty({B, n, H * D});
  Tensor dk_s = Tensor::empty({B, n, K * D}), dv_s = Tensor::empty({B, n, K * D});
  using tessera::testing::take_positions;
  tessera::ops::rope_pack_forward(qkv_s, take_positions(q, t0, n), take_positions(k, t0, n),
                                  take_positions(v, t0, n), s);
  tessera::ops::rope_pack_backward(dq_s, dk_s, dv_s, take_positions(y, t0, n), s);
  EXPECT_TRUE(same_bits(qkv_s, take_positions(qkv, t0, n))) << "sequence shard: qkv";
  EXPECT_TRUE(same_bits(dq_s, take_positions(dq, t0, n))) << "sequence shard: dq";
  EXPECT_TRUE(same_bits(dk_s, take_positions(dk, t0, n))) << "sequence shard: dk";
  EXPECT_TRUE(same_bits(dv_s, take_positions(dv, t0, n))) << "sequence shard: dv";
}

// ---- bad input --------------------------------------------------------------------------------------


TEST(RopeShapes, RefusesBadShapesNamingTheOp) {
  RopeShape s;
  s.batch = 1;
  s.seq = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 6;
  s.group = 2;
  Tensor q = Tensor::zeros({2, 24}), k = Tensor::zeros({2, 12}), v = Tensor::zeros({2, 12});
  Tensor qkv = Tensor::zeros({2, 72});
  auto both = [&](const RopeShape& bad, const std::string& what) {
    expect_error([&] { tessera::ops::rope_pack_forward(qkv, q, k, v, bad); }, "rope_pack_forward: " + what);
    expect_error([&] { tessera::ops::rope_pack_backward(q, k, v, qkv, bad); }, "rope_pack_backward: " + what);
  };
  tessera::ops::rope_pack_forward(qkv, q, k, v, s);  // the shape itself fits
  RopeShape odd = s;
  odd.head_dim = 5;
  both(odd, "the head size must be even");
  RopeShape no_kv = s;
  no_kv.kv_heads = 0;
  both(no_kv, "heads, kv heads and group must be positive");
  RopeShape wrong_size = s;
  wrong_size.seq = 3;
  both(wrong_size, "shapes do not fit");
  // query heads 2..5 of a model with group 2 read kv heads 1..2: k holds kv heads 0..1
  RopeShape past_end = s;
  past_end.first_head = 2;
  both(past_end, "a query head's kv head is not in k and v");
  // k holds kv heads 1..2 but query head 0 reads kv head 0
  RopeShape before_start = s;
  before_start.first_kv_head = 1;
  both(before_start, "a query head's kv head is not in k and v");
  RopeShape negative = s;
  negative.first_position = -1;
  both(negative, "batch, seq, first head, first kv head and first position must not be negative");
  RopeShape no_theta = s;
  no_theta.theta = 0.0f;
  both(no_theta, "theta must be positive");
}

}  // namespace
