// Sequence-parallel attention (parallel/sequence_attention.h) on real ranks, all three modes
// (all_to_all, ring, zigzag), causal and not: each rank's out and dqkv against the one-rank kernel
// on the whole sequence (zigzag: also with document segments), the bytes each mode moves, the
// memory it holds, and the clear errors for heads that do not split and shapes that do not fit.
// ranks: 2 4
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "../unit/kernel_test_util.h"
#include "comm/communicator.h"
#include "core/allocator.h"
#include "kernels/ops.h"
#include "nn/zigzag_layout.h"
#include "parallel/sequence_attention.h"

using namespace tessera;
using parallel::SequenceAttention;
using parallel::SequenceMode;
using tessera::testing::max_rel_error;
using tessera::testing::take_positions;

namespace {

struct Case {
  SequenceMode mode;
  int64_t batch, local_seq, heads, head_dim;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::ostringstream name;
  name << parallel::sequence_mode_name(c.mode) << "_B" << c.batch << "_Tl" << c.local_seq << "_H" << c.heads << "_D"
       << c.head_dim;
  return name.str();
}

template <typename F>
void expect_error(F&& call, const std::string& expected) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing: " << expected;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << expected;
  }
}

// The whole sequence (the same on every rank: same seed), its one-rank attention, and this rank's shard.
struct Problem {
  int64_t c, seq;
  Tensor qkv, dout, out, dqkv;  // whole sequence: [B, T, 3C], [B, T, C]
  Tensor my_qkv, my_dout;       // this rank's positions
};

Problem make_problem(const Case& k, int rank, int size, bool causal = true) {
  Problem p;
  p.c = k.heads * k.head_dim;
  p.seq = k.local_seq * size;
  p.qkv = tessera::testing::random_tensor({k.batch, p.seq, 3 * p.c}, 7, 1, 0.0f, 1.5f);
  p.dout = tessera::testing::random_tensor({k.batch, p.seq, p.c}, 7, 2);
  p.out = Tensor::empty({k.batch, p.seq, p.c});
  p.dqkv = Tensor::empty(p.qkv.shape());
  Tensor lse = Tensor::empty({k.batch, k.heads, p.seq});
  if (causal) {
    ops::attention_forward(p.out, lse, p.qkv, k.heads);
    ops::attention_backward(p.dqkv, p.dout, p.qkv, p.out, lse, k.heads);
  } else {  // every position to every position, in one block
    ops::attention_block_forward(p.out, lse, p.qkv, p.qkv, k.heads, false, false);
    p.dqkv.zero();
    ops::attention_block_backward(p.dqkv, p.dqkv, p.dout, p.qkv, p.qkv, p.out, lse, k.heads, false);
  }
  p.my_qkv = take_positions(p.qkv, rank * k.local_seq, k.local_seq).reshape({k.batch, k.local_seq, 3, k.heads, k.head_dim});
  p.my_dout = take_positions(p.dout, rank * k.local_seq, k.local_seq).reshape({k.batch, k.local_seq, k.heads, k.head_dim});
  return p;
}

class SequenceParallel : public ::testing::TestWithParam<Case> {};

// Also: a second step gives the same result and allocates nothing; the bytes held for attention
// (Saved and the scratch buffers) are a fixed multiple of this rank's q size, whatever sp is.
TEST_P(SequenceParallel, MatchesTheOneRankKernelOnTheWholeSequence) {
  const Case k = GetParam();
  comm::Communicator world = comm::Communicator::world();
  const int r = world.rank(), n = world.size();
  const Problem p = make_problem(k, r, n);
  const Tensor want_out = take_positions(p.out, r * k.local_seq, k.local_seq);
  const Tensor want_dqkv = take_positions(p.dqkv, r * k.local_seq, k.local_seq);

  const int64_t before = memory_stats(Device::cpu).current_bytes;
  reset_peak_memory(Device::cpu);
  SequenceAttention attn(k.mode, world, k.heads, k.head_dim);
  SequenceAttention::Saved saved = attn.allocate(k.batch, k.local_seq);
  Tensor out = Tensor::empty({k.batch, k.local_seq, k.heads, k.head_dim});
  Tensor dqkv = Tensor::empty(p.my_qkv.shape());
  for (int step = 0; step < 2; ++step) {
    const int64_t allocations = memory_stats(Device::cpu).allocations;
    for (int64_t i = 0; i < dqkv.numel(); ++i) dqkv.data<float>()[i] = NAN;  // must be overwritten
    attn.forward(out, p.my_qkv, saved);
    attn.backward(dqkv, p.my_dout, p.my_qkv, out, saved);
    if (step == 1) {
      EXPECT_EQ(memory_stats(Device::cpu).allocations, allocations) << "the second step allocated";
    }
    EXPECT_LT(max_rel_error(out, want_out), 1e-5) << "out, rank " << r << ", step " << step;
    for (int part = 0; part < 3; ++part)
      EXPECT_LT(max_rel_error(dqkv, want_dqkv, part * p.c, p.c), 1e-5)
          << "d" << "qkv"[part] << ", rank " << r << ", step " << step;
  }
  // E = B x Tl x C floats. ring: lse + 6 blocks of 2E (kv, partial sums in flight); all_to_all: lse,
  // the head-shard qkv and out (4E) + 2 staging buffers of 3E. lse: B x H x Tl either way.
  const int64_t e_bytes = k.batch * k.local_seq * p.c * 4, lse_bytes = k.batch * k.heads * k.local_seq * 4;
  const int64_t held = memory_stats(Device::cpu).peak_bytes - before - out.nbytes() - dqkv.nbytes();
  EXPECT_EQ(held, (k.mode == SequenceMode::ring ? 12 : 10) * e_bytes + lse_bytes) << "rank " << r;
}

// Not causal (a vision transformer): every rank attends to every block; the same memory.
TEST_P(SequenceParallel, NotCausalMatchesTheOneRankKernelOnTheWholeSequence) {
  const Case k = GetParam();
  comm::Communicator world = comm::Communicator::world();
  const int r = world.rank(), n = world.size();
  const Problem p = make_problem(k, r, n, /*causal=*/false);
  const Tensor want_out = take_positions(p.out, r * k.local_seq, k.local_seq);
  const Tensor want_dqkv = take_positions(p.dqkv, r * k.local_seq, k.local_seq);
  SequenceAttention attn(k.mode, world, k.heads, k.head_dim);
  SequenceAttention::Saved saved = attn.allocate(k.batch, k.local_seq);
  Tensor out = Tensor::empty({k.batch, k.local_seq, k.heads, k.head_dim});
  Tensor dqkv = Tensor::empty(p.my_qkv.shape());
  for (int step = 0; step < 2; ++step) {
    for (int64_t i = 0; i < dqkv.numel(); ++i) dqkv.data<float>()[i] = NAN;  // must be overwritten
    attn.forward(out, p.my_qkv, saved, /*causal=*/false);
    attn.backward(dqkv, p.my_dout, p.my_qkv, out, saved, /*causal=*/false);
    EXPECT_LT(max_rel_error(out, want_out), 1e-5) << "out, rank " << r << ", step " << step;
    for (int part = 0; part < 3; ++part)
      EXPECT_LT(max_rel_error(dqkv, want_dqkv, part * p.c, p.c), 1e-5)
          << "d" << "qkv"[part] << ", rank " << r << ", step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, SequenceParallel,
    ::testing::Values(Case{SequenceMode::all_to_all, 2, 37, 4, 16}, Case{SequenceMode::ring, 2, 37, 4, 16},
                      Case{SequenceMode::all_to_all, 1, 70, 8, 12}, Case{SequenceMode::ring, 1, 70, 8, 12},
                      Case{SequenceMode::all_to_all, 2, 64, 4, 8}, Case{SequenceMode::ring, 2, 64, 4, 8},
                      Case{SequenceMode::all_to_all, 2, 128, 8, 32}, Case{SequenceMode::ring, 2, 128, 8, 32},
                      Case{SequenceMode::ring, 1, 5, 3, 5}),  // ring: any head count
    case_name);

// The bytes of one forward and one backward, by the formulas of sequence_attention.h.
TEST(SequenceParallelComm, BytesMatchTheFormulas) {
  comm::Communicator world = comm::Communicator::world();
  const int r = world.rank(), n = world.size();
  const Case k{SequenceMode::ring, 2, 9, 4, 6};
  const Problem p = make_problem(k, r, n);
  const int64_t e_bytes = k.batch * k.local_seq * p.c * 4, block = 2 * e_bytes;  // a kv block, or its dk/dv
  for (SequenceMode mode : {SequenceMode::ring, SequenceMode::all_to_all}) {
    SCOPED_TRACE(parallel::sequence_mode_name(mode));
    SequenceAttention attn(mode, world, k.heads, k.head_dim);
    SequenceAttention::Saved saved = attn.allocate(k.batch, k.local_seq);
    Tensor out = Tensor::empty(p.my_dout.shape()), dqkv = Tensor::empty(p.my_qkv.shape());
    const comm::CommStats& stats = world.stats();
    const comm::OpStats &sends = stats.op(comm::CommOp::send), &recvs = stats.op(comm::CommOp::recv),
                        &a2a = stats.op(comm::CommOp::all_to_all);
    world.stats().reset();
    attn.forward(out, p.my_qkv, saved);
    // ring, forward: blocks r, r-1, .., 0 up to rank r + 1 (none from the last rank); r blocks in.
    const int64_t kv_out = r + 1 < n ? r + 1 : 0, kv_in = r;
    if (mode == SequenceMode::ring) {
      EXPECT_EQ(sends.calls, kv_out);
      EXPECT_EQ(sends.bytes, kv_out * block);
      EXPECT_EQ(recvs.calls, kv_in);
      EXPECT_EQ(recvs.bytes, kv_in * block);
      EXPECT_EQ(a2a.calls, 0);
    } else {  // qkv to head shards, out back: 4E floats sent
      EXPECT_EQ(a2a.calls, 2);
      EXPECT_EQ(a2a.bytes, 4 * e_bytes);
      EXPECT_EQ(stats.total_calls(), 2);
    }
    const int64_t forward_bytes = stats.total_bytes();
    world.stats().reset();
    attn.backward(dqkv, p.my_dout, p.my_qkv, out, saved);
    const int64_t backward_bytes = stats.total_bytes();
    if (mode == SequenceMode::ring) {
      // The kv blocks again; dk/dv sums: r out (one per visited block), in: r - 1 from the rank
      // below (r >= 2) and this rank's own block's from the last rank (r < n - 1).
      const int64_t sums_in = (r >= 2 ? r - 1 : 0) + (r + 1 < n ? 1 : 0);
      EXPECT_EQ(sends.calls, kv_out + r);
      EXPECT_EQ(sends.bytes, (kv_out + r) * block);
      EXPECT_EQ(recvs.calls, kv_in + sums_in);
      EXPECT_EQ(recvs.bytes, (kv_in + sums_in) * block);
    } else {
      EXPECT_EQ(a2a.calls, 2);
      EXPECT_EQ(a2a.bytes, 4 * e_bytes);
    }
    // Every message sent is received: the totals over the group agree, and for the ring they are
    // (n - 1) n / 2 blocks forward and twice that backward.
    const double sent = world.all_reduce_sum(double(sends.bytes)), got = world.all_reduce_sum(double(recvs.bytes));
    EXPECT_EQ(sent, got);
    if (mode == SequenceMode::ring) {
      EXPECT_EQ(sent, double(n - 1) * n * block);
    }
    if (r == 0)
      std::printf("  %s, sp = %d, E = %lld floats: rank 0 forward %lld bytes, backward %lld bytes\n",
                  parallel::sequence_mode_name(mode), n, static_cast<long long>(e_bytes / 4),
                  static_cast<long long>(forward_bytes), static_cast<long long>(backward_bytes));
  }
}

// Not causal, ring: every block goes the whole way round (sequence_attention.h): forward n - 1
// blocks out and in on every rank; backward the blocks again and n - 1 dk/dv sums out and in.
TEST(SequenceParallelComm, NotCausalRingBytesMatchTheFormulas) {
  comm::Communicator world = comm::Communicator::world();
  const int r = world.rank(), n = world.size();
  const Case k{SequenceMode::ring, 2, 9, 4, 6};
  const Problem p = make_problem(k, r, n, /*causal=*/false);
  const int64_t block = 2 * k.batch * k.local_seq * p.c * 4;
  SequenceAttention attn(k.mode, world, k.heads, k.head_dim);
  SequenceAttention::Saved saved = attn.allocate(k.batch, k.local_seq);
  Tensor out = Tensor::empty(p.my_dout.shape()), dqkv = Tensor::empty(p.my_qkv.shape());
  const comm::CommStats& stats = world.stats();
  const comm::OpStats &sends = stats.op(comm::CommOp::send), &recvs = stats.op(comm::CommOp::recv);
  world.stats().reset();
  attn.forward(out, p.my_qkv, saved, false);
  EXPECT_EQ(sends.calls, n - 1) << "rank " << r;
  EXPECT_EQ(sends.bytes, (n - 1) * block);
  EXPECT_EQ(recvs.calls, n - 1);
  EXPECT_EQ(recvs.bytes, (n - 1) * block);
  world.stats().reset();
  attn.backward(dqkv, p.my_dout, p.my_qkv, out, saved, false);
  EXPECT_EQ(sends.calls, 2 * (n - 1)) << "rank " << r;
  EXPECT_EQ(sends.bytes, 2 * (n - 1) * block);
  EXPECT_EQ(recvs.calls, 2 * (n - 1));
  EXPECT_EQ(recvs.bytes, 2 * (n - 1) * block);
  EXPECT_EQ(stats.total_bytes(), 4 * (n - 1) * block);  // sends and receives both counted
}

// ---- zigzag ----------------------------------------------------------------------------------------

// This rank's rows of a whole-sequence tensor [B, T, ...] under the zigzag layout (half-major).
Tensor take_zigzag(const Tensor& x, int rank, int size) {
  const int64_t batch = x.dim(0), seq = x.dim(1), w = x.numel() / (batch * seq);
  const nn::ZigzagPlace place{rank, size, batch, seq};
  Tensor out = Tensor::empty({batch, seq / size, w});
  for (int64_t n = 0; n < batch * seq / size; ++n)
    std::copy_n(x.data<float>() + (place.sequence(n) * seq + place.position(n)) * w, w, out.data<float>() + n * w);
  return out;
}

struct ZigzagCase {
  int64_t batch, local_seq, heads, head_dim;
  bool documents;  // document segments (several documents a row, their edges inside chunks)
};

class Zigzag : public ::testing::TestWithParam<ZigzagCase> {};

TEST_P(Zigzag, MatchesTheOneRankKernelOnTheWholeSequence) {
  const ZigzagCase k = GetParam();
  comm::Communicator world = comm::Communicator::world();
  const int r = world.rank(), n = world.size();
  const int64_t c = k.heads * k.head_dim, seq = k.local_seq * n;
  const Tensor qkv = tessera::testing::random_tensor({k.batch, seq, 3 * c}, 7, 1, 0.0f, 1.5f);
  const Tensor dout = tessera::testing::random_tensor({k.batch, seq, c}, 7, 2);
  Tensor segments;
  if (k.documents) {  // documents of 5 positions, shifted per row
    segments = Tensor::empty({k.batch, seq}, DType::i32);
    for (int64_t b = 0; b < k.batch; ++b)
      for (int64_t t = 0; t < seq; ++t) segments.data<int32_t>()[b * seq + t] = static_cast<int32_t>((t + 2 * b) / 5);
  }
  Tensor want_out = Tensor::empty({k.batch, seq, c}), lse = Tensor::empty({k.batch, k.heads, seq});
  Tensor want_dqkv = Tensor::empty(qkv.shape());
  ops::attention_forward(want_out, lse, qkv, k.heads, ops::MatmulInputs::f32, segments);
  ops::attention_backward(want_dqkv, dout, qkv, want_out, lse, k.heads, ops::MatmulInputs::f32, segments);

  const Tensor my_qkv = take_zigzag(qkv, r, n).reshape({k.batch, k.local_seq, 3, k.heads, k.head_dim});
  const Tensor my_dout = take_zigzag(dout, r, n).reshape({k.batch, k.local_seq, k.heads, k.head_dim});
  const Tensor my_want_out = take_zigzag(want_out, r, n), my_want_dqkv = take_zigzag(want_dqkv, r, n);

  const int64_t before = memory_stats(Device::cpu).current_bytes;
  reset_peak_memory(Device::cpu);
  SequenceAttention attn(SequenceMode::zigzag, world, k.heads, k.head_dim);
  SequenceAttention::Saved saved = attn.allocate(k.batch, k.local_seq);
  Tensor out = Tensor::empty({k.batch, k.local_seq, k.heads, k.head_dim});
  Tensor dqkv = Tensor::empty(my_qkv.shape());
  for (int step = 0; step < 2; ++step) {
    for (int64_t i = 0; i < dqkv.numel(); ++i) dqkv.data<float>()[i] = NAN;  // must be overwritten
    attn.forward(out, my_qkv, saved, true, ops::MatmulInputs::f32, segments);
    attn.backward(dqkv, my_dout, my_qkv, out, saved, true, ops::MatmulInputs::f32, segments);
    EXPECT_LT(max_rel_error(out, my_want_out), 1e-5) << "out, rank " << r << ", step " << step;
    for (int part = 0; part < 3; ++part)
      EXPECT_LT(max_rel_error(dqkv, my_want_dqkv, part * c, c), 1e-5)
          << "d" << "qkv"[part] << ", rank " << r << ", step " << step;
  }
  // The ring's memory: lse + 6 blocks of 2E (E = B x Tl x C floats), and the blocks' segments
  // (sp x B x Tl int32) when documents mask.
  const int64_t e_bytes = k.batch * k.local_seq * c * 4, lse_bytes = k.batch * k.heads * k.local_seq * 4;
  const int64_t segment_bytes = k.documents ? n * k.batch * k.local_seq * 4 : 0;
  const int64_t held = memory_stats(Device::cpu).peak_bytes - before - out.nbytes() - dqkv.nbytes();
  EXPECT_EQ(held, 12 * e_bytes + lse_bytes + segment_bytes) << "rank " << r;
}

// Not causal, zigzag is the ring's schedule over its own rows: the same as full attention.
TEST(ZigzagNotCausal, MatchesTheOneRankKernel) {
  const ZigzagCase k{2, 8, 4, 8, false};
  comm::Communicator world = comm::Communicator::world();
  const int r = world.rank(), n = world.size();
  const int64_t c = k.heads * k.head_dim, seq = k.local_seq * n;
  const Tensor qkv = tessera::testing::random_tensor({k.batch, seq, 3 * c}, 7, 1, 0.0f, 1.5f);
  const Tensor dout = tessera::testing::random_tensor({k.batch, seq, c}, 7, 2);
  Tensor want_out = Tensor::empty({k.batch, seq, c}), lse = Tensor::empty({k.batch, k.heads, seq});
  Tensor want_dqkv = Tensor::zeros(qkv.shape());
  ops::attention_block_forward(want_out, lse, qkv, qkv, k.heads, false, false);
  ops::attention_block_backward(want_dqkv, want_dqkv, dout, qkv, qkv, want_out, lse, k.heads, false);
  SequenceAttention attn(SequenceMode::zigzag, world, k.heads, k.head_dim);
  SequenceAttention::Saved saved = attn.allocate(k.batch, k.local_seq);
  const Tensor my_qkv = take_zigzag(qkv, r, n), my_dout = take_zigzag(dout, r, n);
  Tensor out = Tensor::empty(my_dout.shape()), dqkv = Tensor::empty(my_qkv.shape());
  attn.forward(out, my_qkv, saved, /*causal=*/false);
  attn.backward(dqkv, my_dout, my_qkv, out, saved, /*causal=*/false);
  EXPECT_LT(max_rel_error(out, take_zigzag(want_out, r, n)), 1e-5) << "out, rank " << r;
  EXPECT_LT(max_rel_error(dqkv, take_zigzag(want_dqkv, r, n)), 1e-5) << "dqkv, rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Zigzag,
                         ::testing::Values(ZigzagCase{2, 8, 4, 8, false}, ZigzagCase{1, 6, 3, 5, true},
                                           ZigzagCase{2, 16, 2, 16, true}, ZigzagCase{3, 4, 1, 4, false}),
                         [](const ::testing::TestParamInfo<ZigzagCase>& info) {
                           const ZigzagCase& c = info.param;
                           return "B" + std::to_string(c.batch) + "_Tl" + std::to_string(c.local_seq) + "_H" +
                                  std::to_string(c.heads) + "_D" + std::to_string(c.head_dim) +
                                  (c.documents ? "_documents" : "");
                         });

// Causal, zigzag moves what the ring moves when not causal (every block round the whole ring), on
// every rank alike: forward n - 1 blocks out and in; backward the blocks and n - 1 dk/dv sums.
TEST(SequenceParallelComm, ZigzagBytesMatchTheFormulas) {
  comm::Communicator world = comm::Communicator::world();
  const int r = world.rank(), n = world.size();
  const int64_t batch = 2, local_seq = 4, heads = 2, head_dim = 3, c = heads * head_dim;
  const int64_t block = 2 * batch * local_seq * c * 4;
  const Tensor qkv = tessera::testing::random_tensor({batch, local_seq, 3 * c}, 7, 1);
  SequenceAttention attn(SequenceMode::zigzag, world, heads, head_dim);
  SequenceAttention::Saved saved = attn.allocate(batch, local_seq);
  Tensor out = Tensor::empty({batch, local_seq, c}), dqkv = Tensor::empty(qkv.shape());
  const comm::CommStats& stats = world.stats();
  const comm::OpStats &sends = stats.op(comm::CommOp::send), &recvs = stats.op(comm::CommOp::recv);
  world.stats().reset();
  attn.forward(out, qkv, saved);
  EXPECT_EQ(sends.calls, n - 1) << "rank " << r;
  EXPECT_EQ(sends.bytes, (n - 1) * block);
  EXPECT_EQ(recvs.bytes, (n - 1) * block);
  world.stats().reset();
  attn.backward(dqkv, out, qkv, out, saved);
  EXPECT_EQ(sends.calls, 2 * (n - 1)) << "rank " << r;
  EXPECT_EQ(sends.bytes, 2 * (n - 1) * block);
  EXPECT_EQ(recvs.bytes, 2 * (n - 1) * block);
}

TEST(SequenceParallelErrors, ZigzagNeedsTwoEqualChunksPerRank) {
  comm::Communicator world = comm::Communicator::world();
  SequenceAttention attn(SequenceMode::zigzag, world, 2, 4);
  expect_error([&] { attn.allocate(2, 5); }, "its 5 positions must be even");
  EXPECT_EQ(parallel::parse_sequence_mode("zigzag"), SequenceMode::zigzag);
  EXPECT_STREQ(parallel::sequence_mode_name(SequenceMode::zigzag), "zigzag");
}

TEST(SequenceParallelErrors, HeadsThatDoNotSplitOverSpAreRefusedInAllToAll) {
  comm::Communicator world = comm::Communicator::world();
  const int n = world.size();
  const std::string heads = std::to_string(n + 1);
  expect_error([&] { SequenceAttention(SequenceMode::all_to_all, world, n + 1, 8); },
               heads + " heads do not split evenly over sp = " + std::to_string(n) + " ranks");
  EXPECT_NO_THROW(SequenceAttention(SequenceMode::ring, world, n + 1, 8));
}

TEST(SequenceParallelErrors, ShapesThatDoNotFitAreRefusedBeforeAnyMessage) {
  comm::Communicator world = comm::Communicator::world();
  expect_error([] { parallel::parse_sequence_mode("ulysses"); }, "unknown sequence-parallel mode 'ulysses'");
  for (SequenceMode mode : {SequenceMode::ring, SequenceMode::all_to_all}) {
    SequenceAttention attn(mode, world, 4, 8);
    SequenceAttention::Saved saved = attn.allocate(2, 6);
    Tensor out = Tensor::empty({2, 6, 4, 8});
    Tensor wrong_seq = Tensor::zeros({2, 7, 3, 4, 8}), wrong_heads = Tensor::zeros({2, 6, 3, 2, 8});
    expect_error([&] { attn.forward(out, wrong_seq, saved); }, "expected [B = 2, Tl = 6, 3 x heads 4 x head_dim 8]");
    expect_error([&] { attn.forward(out, wrong_heads, saved); }, "got [2, 6, 3, 2, 8]");
    SequenceAttention::Saved empty;
    expect_error([&] { attn.forward(out, Tensor::zeros({2, 6, 3, 4, 8}), empty); }, "Saved was not made by allocate()");
    EXPECT_EQ(world.stats().total_calls(), 0);
  }
}

}  // namespace
