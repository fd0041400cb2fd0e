// Communicator on real MPI ranks: every collective's result from rank arithmetic (even and uneven
// counts, sub-communicators, groups of one), asynchronous handles, messages, stats, refusals.
// ranks: 1 2 3 4
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/process_mesh.h"
#include "split_comm.h"

using namespace tessera;
using namespace tessera::comm;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

Tensor f32(int64_t n) { return Tensor::zeros({n}, DType::f32); }
Tensor i32(int64_t n) { return Tensor::zeros({n}, DType::i32); }

// Uneven counts with a zero among them on most group sizes: 2, 0, 1, 2, ...
std::vector<int64_t> uneven_counts(int size) {
  std::vector<int64_t> c(size);
  for (int r = 0; r < size; ++r) c[r] = (r + 2) % 3;
  return c;
}
int64_t offset_of(const std::vector<int64_t>& counts, int rank) {
  int64_t o = 0;
  for (int r = 0; r < rank; ++r) o += counts[r];
  return o;
}
int64_t sum_of(const std::vector<int64_t>& counts) {
  return offset_of(counts, static_cast<int>(counts.size()));
}

// Elements rank i sends rank j in the uneven all-to-all.
int64_t a2a_count(int i, int j) { return (i + 2 * j) % 3; }

// Runs `call`, which must throw tessera::Error containing `expected`.
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

}  // namespace

// --- all-reduce ---

TEST(AllReduce, SumOfF32AndI32) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  Tensor a = f32(5);
  Tensor b = i32(7);
  for (int i = 0; i < 5; ++i) a.data<float>()[i] = static_cast<float>(r + i);
  for (int i = 0; i < 7; ++i) b.data<int32_t>()[i] = r * 1000 - i;
  world.all_reduce_sum(a);
  world.all_reduce_sum(b);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(a.data<float>()[i], static_cast<float>(n * (n - 1) / 2 + n * i));
  for (int i = 0; i < 7; ++i) EXPECT_EQ(b.data<int32_t>()[i], 1000 * n * (n - 1) / 2 - n * i);
}

TEST(AllReduce, MaxOfI32AndF32) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  Tensor a = i32(4);
  Tensor b = f32(3);
  for (int i = 0; i < 4; ++i) a.data<int32_t>()[i] = (i % 2 == 0) ? r * 10 - i : -r;
  for (int i = 0; i < 3; ++i)
    b.data<float>()[i] = -0.5f * static_cast<float>(r) + static_cast<float>(i);
  world.all_reduce_max(a);
  world.all_reduce_max(b);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.data<int32_t>()[i], (i % 2 == 0) ? (n - 1) * 10 - i : 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.data<float>()[i], static_cast<float>(i));
}

TEST(AllReduce, ScalarsSumAndMax) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  EXPECT_EQ(world.all_reduce_sum(0.5 * r), 0.25 * n * (n - 1));
  EXPECT_EQ(world.all_reduce_max(int64_t{5'000'000'000} + r), int64_t{5'000'000'000} + n - 1);
}

TEST(AllReduce, SeveralScalarsInOneCollective) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  const int64_t before = world.stats().total_calls();
  std::vector<double> maxima{static_cast<double>(r), -static_cast<double>(r), 0.0};
  std::vector<double> sums{1.0, 0.5 * r};
  std::vector<double> none;
  world.all_reduce_max(std::span<double>(maxima));
  world.all_reduce_sum(std::span<double>(sums));
  world.all_reduce_sum(std::span<double>(none));  // nothing to reduce: no collective
  EXPECT_EQ(maxima, (std::vector<double>{n - 1.0, 0.0, 0.0}));
  EXPECT_EQ(sums, (std::vector<double>{static_cast<double>(n), 0.25 * n * (n - 1)}));
  EXPECT_EQ(world.stats().total_calls() - before, n > 1 ? 2 : 0);  // one collective per vector
}

// --- reduce-scatter ---

TEST(ReduceScatter, EqualBlocksSumBlockOfThisRank) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  const int block = 3;
  Tensor in = f32(n * block);
  for (int j = 0; j < n * block; ++j) in.data<float>()[j] = static_cast<float>(r * 100 + j);
  Tensor out = f32(block);
  world.reduce_scatter(in, out);
  for (int k = 0; k < block; ++k)
    EXPECT_EQ(out.data<float>()[k],
              static_cast<float>(100 * n * (n - 1) / 2 + n * (r * block + k)));
}

TEST(ReduceScatter, UnevenCountsIncludingZero) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  const std::vector<int64_t> counts = uneven_counts(n);
  Tensor in = i32(sum_of(counts));
  for (int64_t j = 0; j < in.numel(); ++j) in.data<int32_t>()[j] = static_cast<int32_t>(r + 10 * j);
  Tensor out = i32(counts[r]);
  world.reduce_scatter(in, out, counts);
  const int64_t first = offset_of(counts, r);
  for (int64_t k = 0; k < counts[r]; ++k)
    EXPECT_EQ(out.data<int32_t>()[k], n * (n - 1) / 2 + n * 10 * (first + k));
}

// --- all-gather ---

TEST(AllGather, EqualBlocksInRankOrder) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  Tensor in = f32(4);
  for (int k = 0; k < 4; ++k) in.data<float>()[k] = static_cast<float>(r * 10 + k);
  Tensor out = f32(4 * n);
  world.all_gather(in, out);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(out.data<float>()[i * 4 + k], static_cast<float>(i * 10 + k));
}

TEST(AllGather, Bf16MovesRawBits) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  Tensor in = Tensor::zeros({2}, DType::bf16);
  in.bits16()[0] = static_cast<uint16_t>(0xFF00 + r);
  in.bits16()[1] = static_cast<uint16_t>(0x7FC1);  // a NaN pattern must arrive as it left
  Tensor out = Tensor::zeros({2 * n}, DType::bf16);
  world.all_gather(in, out);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(out.bits16()[2 * i], 0xFF00 + i);
    EXPECT_EQ(out.bits16()[2 * i + 1], 0x7FC1);
  }
}

TEST(AllGather, UnevenCountsU8) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  const std::vector<int64_t> counts = uneven_counts(n);
  Tensor in = Tensor::zeros({counts[r]}, DType::u8);
  for (int64_t k = 0; k < counts[r]; ++k) in.data<uint8_t>()[k] = static_cast<uint8_t>(r * 16 + k);
  Tensor out = Tensor::zeros({sum_of(counts)}, DType::u8);
  world.all_gather(in, out, counts);
  for (int i = 0; i < n; ++i)
    for (int64_t k = 0; k < counts[i]; ++k)
      EXPECT_EQ(out.data<uint8_t>()[offset_of(counts, i) + k], i * 16 + k);
}

// --- all-to-all ---

TEST(AllToAll, EqualBlocks) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  const int block = 2;
  Tensor in = i32(n * block);
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < block; ++k) in.data<int32_t>()[j * block + k] = r * 100 + j * 10 + k;
  Tensor out = i32(n * block);
  world.all_to_all(in, out);
  // Block i of my output is what rank i put in its block for me (r).
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < block; ++k)
      EXPECT_EQ(out.data<int32_t>()[i * block + k], i * 100 + r * 10 + k);
}

TEST(AllToAll, UnevenSendAndRecvCounts) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  std::vector<int64_t> send(n), recv(n);
  for (int j = 0; j < n; ++j) send[j] = a2a_count(r, j);
  for (int i = 0; i < n; ++i) recv[i] = a2a_count(i, r);
  Tensor in = f32(sum_of(send));
  for (int j = 0; j < n; ++j)
    for (int64_t k = 0; k < send[j]; ++k)
      in.data<float>()[offset_of(send, j) + k] = static_cast<float>(r * 1000 + j * 10 + k);
  Tensor out = f32(sum_of(recv));
  world.all_to_all(in, out, send, recv);
  for (int i = 0; i < n; ++i)
    for (int64_t k = 0; k < recv[i]; ++k)
      EXPECT_EQ(out.data<float>()[offset_of(recv, i) + k],
                static_cast<float>(i * 1000 + r * 10 + k));
}

// --- broadcast, barrier ---

TEST(Broadcast, FromTheLastRankI32AndU16) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  Tensor a = i32(3);
  Tensor b = Tensor::zeros({2}, DType::u16);
  for (int k = 0; k < 3; ++k) a.data<int32_t>()[k] = r == n - 1 ? 7 * k + 1 : -1;
  for (int k = 0; k < 2; ++k)
    b.data<uint16_t>()[k] = r == n - 1 ? static_cast<uint16_t>(60000 + k) : 0;
  world.broadcast(a, n - 1);
  world.broadcast(b, n - 1);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(a.data<int32_t>()[k], 7 * k + 1);
  for (int k = 0; k < 2; ++k) EXPECT_EQ(b.data<uint16_t>()[k], 60000 + k);
  world.barrier();
}

// --- reduce ---

TEST(Reduce, SumF32AndI32ToEveryRoot) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  for (int root = 0; root < n; ++root) {
    Tensor a = f32(5);
    Tensor b = i32(4);
    for (int k = 0; k < 5; ++k) a.data<float>()[k] = static_cast<float>(r * 10 + k) + 0.5f;
    for (int k = 0; k < 4; ++k) b.data<int32_t>()[k] = (r + 1) * (k - 2) - 1000 * root;
    world.reduce_sum(a, root);
    world.reduce_sum(b, root);
    for (int k = 0; k < 5; ++k) {
      // Root: sum over ranks q of (10 q + k + 0.5), exact in f32 at these sizes.
      const float want = r == root ? static_cast<float>(10 * n * (n - 1) / 2 + n * k) + 0.5f * n
                                   : static_cast<float>(r * 10 + k) + 0.5f;
      EXPECT_EQ(a.data<float>()[k], want) << "root " << root << " k " << k;
    }
    for (int k = 0; k < 4; ++k) {
      const int32_t want = r == root ? n * (n + 1) / 2 * (k - 2) - 1000 * root * n
                                     : (r + 1) * (k - 2) - 1000 * root;
      EXPECT_EQ(b.data<int32_t>()[k], want) << "root " << root << " k " << k;
    }
  }
  world.barrier();
}

TEST(Reduce, SubCommunicatorUsesGroupRoot) {
  const int wr = world_rank();
  SplitComm halves(wr % 2, wr);
  Communicator half(halves.get(), "half");
  const int n = half.size(), r = half.rank();
  const int root = n - 1;
  Tensor t = i32(2);
  t.data<int32_t>()[0] = wr;
  t.data<int32_t>()[1] = 1;
  half.reduce_sum(t, root);
  if (r == root) {
    EXPECT_EQ(t.data<int32_t>()[0], n * (wr % 2) + n * (n - 1));  // sum of (wr % 2) + 2 i
    EXPECT_EQ(t.data<int32_t>()[1], n);
  } else {
    EXPECT_EQ(t.data<int32_t>()[0], wr);
    EXPECT_EQ(t.data<int32_t>()[1], 1);
  }
}

TEST(Reduce, GroupOfOneIsANoOp) {
  SplitComm alone(world_rank(), 0);
  Communicator solo(alone.get(), "solo");
  ASSERT_EQ(solo.size(), 1);
  Tensor t = f32(3);
  for (int k = 0; k < 3; ++k) t.data<float>()[k] = static_cast<float>(k + 1);
  solo.reduce_sum(t, 0);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(t.data<float>()[k], static_cast<float>(k + 1));
  Tensor i = i32(2);
  i.data<int32_t>()[1] = -4;
  solo.reduce_sum(i, 0);
  EXPECT_EQ(i.data<int32_t>()[1], -4);
  EXPECT_EQ(solo.stats().total_calls(), 0);
  EXPECT_EQ(solo.stats().total_bytes(), 0);
  // Its arguments are still checked.
  expect_error([&] { solo.reduce_sum(t, 1); }, "reduce_sum(solo): root 1 is not a rank");
}

TEST(Reduce, BadArgumentsAreRefused) {
  Communicator world = Communicator::world();
  const int n = world.size();
  Tensor t = f32(4);
  expect_error([&] { world.reduce_sum(t, n); },
               "reduce_sum(world): root " + std::to_string(n) + " is not a rank of a group of " +
                   std::to_string(n));
  expect_error([&] { world.reduce_sum(t, -1); }, "reduce_sum(world): root -1 is not a rank");
  Tensor bf = Tensor::zeros({4}, DType::bf16);
  expect_error([&] { world.reduce_sum(bf, 0); }, "reduce_sum(world): cannot reduce bf16 tensors");
  Tensor u8 = Tensor::zeros({4}, DType::u8);
  expect_error([&] { world.reduce_sum(u8, 0); }, "reduce_sum(world): cannot reduce u8 tensors");
  Tensor undefined;
  expect_error([&] { world.reduce_sum(undefined, 0); }, "reduce_sum(world): tensor is undefined");
  // Nobody was left inside a collective.
  EXPECT_EQ(world.all_reduce_sum(1.0), static_cast<double>(n));
}

TEST(Reduce, StatsCountOneReduceWithTheTensorsBytes) {
  Communicator world = Communicator::world();
  const int n = world.size();
  world.stats().reset();
  Tensor t = f32(6);
  world.reduce_sum(t, n - 1);
  const CommStats& s = world.stats();
  EXPECT_EQ(s.op(CommOp::reduce).calls, n > 1 ? 1 : 0);
  EXPECT_EQ(s.op(CommOp::reduce).bytes, n > 1 ? static_cast<int64_t>(t.nbytes()) : 0);
  EXPECT_EQ(s.total_calls(), n > 1 ? 1 : 0);
  EXPECT_EQ(s.op(CommOp::broadcast).calls, 0);
  EXPECT_EQ(s.op(CommOp::all_reduce).calls, 0);
  if (n > 1) {
    EXPECT_NE(s.summary().find("reduce 1 call 0.000 MB"), std::string::npos) << s.summary();
    EXPECT_STREQ(comm_op_name(CommOp::reduce), "reduce");
  }
}

// --- point to point ---

TEST(Async, TwoCollectivesOverlapAndCompleteInEitherOrder) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  Tensor summed = f32(6);
  for (int i = 0; i < 6; ++i) summed.data<float>()[i] = static_cast<float>(r * i);
  Tensor mine = i32(2), all = i32(2 * n);
  mine.data<int32_t>()[0] = r;
  mine.data<int32_t>()[1] = -r;
  CommHandle a = world.iall_reduce_sum(summed);
  CommHandle b = world.iall_gather(mine, all);
  EXPECT_EQ(a.pending(), n > 1);
  b.wait();  // the second first
  a.wait();
  a.wait();  // a second wait is a no-op
  EXPECT_FALSE(a.pending());
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(summed.data<float>()[i], static_cast<float>(i * n * (n - 1) / 2));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(all.data<int32_t>()[2 * i], i);
    EXPECT_EQ(all.data<int32_t>()[2 * i + 1], -i);
  }
}

TEST(Async, ReduceScatterFormsMovedHandlesAndDestructorWaits) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  const std::vector<int64_t> counts = uneven_counts(n);
  Tensor in_even = f32(2 * n), out_even = f32(2);
  Tensor in_v = f32(sum_of(counts)), out_v = f32(counts[r]);
  for (int64_t j = 0; j < in_even.numel(); ++j)
    in_even.data<float>()[j] = static_cast<float>(r + j);
  for (int64_t j = 0; j < in_v.numel(); ++j) in_v.data<float>()[j] = static_cast<float>(2 * r + j);
  Tensor gathered = f32(sum_of(counts)), part = f32(counts[r]);
  for (int64_t k = 0; k < counts[r]; ++k) part.data<float>()[k] = static_cast<float>(r);
  {
    std::vector<CommHandle> handles;
    handles.push_back(world.ireduce_scatter(in_even, out_even));
    handles.push_back(world.ireduce_scatter(in_v, out_v, counts));
    CommHandle moved = world.iall_gather(part, gathered, counts);
    CommHandle target;
    target = std::move(moved);  // the handle moves; the operation stays in flight
    EXPECT_FALSE(moved.pending());
  }  // every handle completes here
  for (int k = 0; k < 2; ++k)
    EXPECT_EQ(out_even.data<float>()[k], static_cast<float>(n * (n - 1) / 2 + n * (2 * r + k)));
  const int64_t first = offset_of(counts, r);
  for (int64_t k = 0; k < counts[r]; ++k)
    EXPECT_EQ(out_v.data<float>()[k], static_cast<float>(n * (n - 1) + n * (first + k)));
  for (int i = 0; i < n; ++i)
    for (int64_t k = 0; k < counts[i]; ++k)
      EXPECT_EQ(gathered.data<float>()[offset_of(counts, i) + k], static_cast<float>(i));
}

// --- groups ---

TEST(Groups, SubCommunicatorsFromSplitUseGroupRanks) {
  const int wr = world_rank();
  SplitComm halves(wr % 2, wr);  // even world ranks, odd world ranks
  Communicator half(halves.get(), "half");
  const int n = half.size(), r = half.rank();
  EXPECT_EQ(r, wr / 2);
  // Sum of world ranks in my half: (wr % 2) + 2 * group rank, over the group.
  EXPECT_EQ(half.all_reduce_sum(static_cast<double>(wr)), n * (wr % 2) + 2.0 * n * (n - 1) / 2);
  Tensor in = i32(1), out = i32(n);
  in.data<int32_t>()[0] = wr;
  half.all_gather(in, out);
  for (int i = 0; i < n; ++i) EXPECT_EQ(out.data<int32_t>()[i], wr % 2 + 2 * i);
  const std::vector<int64_t> counts = uneven_counts(n);
  Tensor rs_in = f32(sum_of(counts)), rs_out = f32(counts[r]);
  for (int64_t j = 0; j < rs_in.numel(); ++j) rs_in.data<float>()[j] = 1.0f;
  half.reduce_scatter(rs_in, rs_out, counts);
  for (int64_t k = 0; k < counts[r]; ++k) EXPECT_EQ(rs_out.data<float>()[k], static_cast<float>(n));
  expect_error([&] { half.reduce_scatter(f32(10), rs_out, std::vector<int64_t>(n, 0)); },
               "reduce_scatter(half): input has 10 elements, counts sum to 0");
}

TEST(Groups, GroupOfOneCopiesAndRecordsNothing) {
  SplitComm alone(world_rank(), 0);
  Communicator solo(alone.get(), "solo");
  ASSERT_EQ(solo.size(), 1);
  Tensor t = f32(3);
  for (int k = 0; k < 3; ++k) t.data<float>()[k] = static_cast<float>(k + 1);
  solo.all_reduce_sum(t);
  solo.broadcast(t, 0);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(t.data<float>()[k], static_cast<float>(k + 1));
  Tensor out = f32(3);
  solo.reduce_scatter(t, out);
  EXPECT_EQ(out.data<float>()[2], 3.0f);
  Tensor gathered = f32(3);
  solo.all_gather(t, gathered, std::vector<int64_t>{3});
  EXPECT_EQ(gathered.data<float>()[1], 2.0f);
  Tensor swapped = f32(3);
  solo.all_to_all(t, swapped);
  EXPECT_EQ(swapped.data<float>()[0], 1.0f);
  CommHandle h = solo.iall_reduce_sum(t);
  EXPECT_FALSE(h.pending());
  solo.barrier();
  EXPECT_EQ(solo.all_reduce_sum(2.5), 2.5);
  EXPECT_EQ(solo.stats().total_calls(), 0);
  EXPECT_EQ(solo.stats().total_bytes(), 0);
  expect_error([&] { solo.send(t, 0); }, "send(solo): destination 0 is this rank");
}

TEST(Groups, MeshAxisGroupGathersNeighbours) {
  const int n = Communicator::world().size();
  const int tp = n % 2 == 0 ? 2 : 1;
  ProcessMesh mesh(MeshShape{1, 0, 1, 1, tp});
  Communicator& group = mesh.group(Axis::tp);
  Tensor in = i32(1), out = i32(tp);
  in.data<int32_t>()[0] = mesh.world_rank();
  group.all_gather(in, out);
  const int first = mesh.world_rank() - mesh.world_rank() % tp;
  for (int i = 0; i < tp; ++i) EXPECT_EQ(out.data<int32_t>()[i], first + i);
}

// --- stats ---

TEST(Stats, CountsCallsAndBytesByConvention) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  world.stats().reset();
  EXPECT_EQ(world.stats().group(), "world");
  Tensor t = f32(4);
  world.all_reduce_sum(t);  // 16 bytes
  Tensor rs_in = f32(3 * n), rs_out = f32(3);
  world.reduce_scatter(rs_in, rs_out);  // input: 12 n bytes
  Tensor ag_in = Tensor::zeros({5}, DType::u16), ag_out = Tensor::zeros({5 * n}, DType::u16);
  world.all_gather(ag_in, ag_out);  // output: 10 n bytes
  Tensor a2a_in = Tensor::zeros({2 * n}, DType::u8), a2a_out = Tensor::zeros({2 * n}, DType::u8);
  world.all_to_all(a2a_in, a2a_out);  // sent: 2 n bytes
  world.broadcast(t, 0);              // 16 bytes
  world.barrier();                    // 0 bytes
  {
    CommHandle h = world.iall_reduce_sum(t);  // 16 bytes, counted once waited
  }
  const CommStats& s = world.stats();
  if (n == 1) {
    EXPECT_EQ(s.total_calls(), 0);
    EXPECT_EQ(s.total_bytes(), 0);
    EXPECT_EQ(s.total_ms(), 0.0);
    return;
  }
  // A message to the next rank, one from the previous: 3 i32 each way.
  Tensor msg = i32(3), got = i32(3);
  CommHandle rx = world.irecv(got, (r + n - 1) % n);
  world.send(msg, (r + 1) % n);
  rx.wait();
  EXPECT_EQ(s.op(CommOp::all_reduce).calls, 2);
  EXPECT_EQ(s.op(CommOp::all_reduce).bytes, 32);
  EXPECT_EQ(s.op(CommOp::reduce_scatter).calls, 1);
  EXPECT_EQ(s.op(CommOp::reduce_scatter).bytes, 12 * n);
  EXPECT_EQ(s.op(CommOp::all_gather).bytes, 10 * n);
  EXPECT_EQ(s.op(CommOp::all_to_all).bytes, 2 * n);
  EXPECT_EQ(s.op(CommOp::broadcast).bytes, 16);
  EXPECT_EQ(s.op(CommOp::barrier).calls, 1);
  EXPECT_EQ(s.op(CommOp::barrier).bytes, 0);
  EXPECT_EQ(s.op(CommOp::send).bytes, 12);
  EXPECT_EQ(s.op(CommOp::recv).bytes, 12);
  EXPECT_EQ(s.total_calls(), 9);
  EXPECT_EQ(s.total_bytes(), 32 + 12 * n + 10 * n + 2 * n + 16 + 24);
  EXPECT_GE(s.total_ms(), 0.0);
  double sum_ms = 0;
  for (int i = 0; i < kCommOps; ++i) sum_ms += s.op(static_cast<CommOp>(i)).ms;
  EXPECT_DOUBLE_EQ(sum_ms, s.total_ms());
  EXPECT_NE(s.summary().find("reduce_scatter 1 call"), std::string::npos) << s.summary();
  // A copy keeps its own counters.
  Communicator copy = world;
  copy.barrier();
  EXPECT_EQ(copy.stats().total_calls(), 10);
  EXPECT_EQ(world.stats().total_calls(), 9);
  world.stats().reset();
  EXPECT_EQ(world.stats().total_bytes(), 0);
  EXPECT_EQ(world.stats().op(CommOp::all_reduce).calls, 0);
}

TEST(Stats, AsyncCallsAreCountedWhenWaited) {
  Communicator world = Communicator::world();
  const int n = world.size();
  Tensor t = f32(8);
  CommHandle h = world.iall_reduce_sum(t);
  EXPECT_EQ(world.stats().total_calls(), 0);
  h.wait();
  EXPECT_EQ(world.stats().op(CommOp::all_reduce).calls, n > 1 ? 1 : 0);
  EXPECT_EQ(world.stats().op(CommOp::all_reduce).bytes, n > 1 ? 32 : 0);
}

// --- refusals: thrown on every rank before any MPI call, so the group goes on afterwards ---

TEST(Errors, MismatchedSizesNameOperationAndGroup) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  std::vector<int64_t> twelve(n, 0);
  twelve[0] = 12;
  Tensor out = f32(twelve[r]);
  expect_error([&] { world.reduce_scatter(f32(10), out, twelve); },
               "reduce_scatter(world): input has 10 elements, counts sum to 12");
  Tensor small = f32(1);
  expect_error([&] { world.reduce_scatter(f32(12), small, twelve); },
               "reduce_scatter(world): output has 1 elements, counts[" + std::to_string(r) + "]");
  Tensor o3 = f32(3);
  expect_error([&] { world.reduce_scatter(f32(3 * n + 1), o3); },
               "reduce_scatter(world): input has " + std::to_string(3 * n + 1) + " elements, not " +
                   std::to_string(n) + " ranks x output's 3");
  Tensor big = f32(2 * n + 1);
  expect_error([&] { world.all_gather(f32(2), big); },
               "all_gather(world): output has " + std::to_string(2 * n + 1) + " elements, not");
  expect_error([&] { world.iall_gather(f32(2), big); }, "iall_gather(world): output has");
  Tensor gathered = f32(12);
  expect_error(
      [&] { world.all_gather(f32(twelve[r] + 1), gathered, twelve); },
      "all_gather(world): input has " + std::to_string(twelve[r] + 1) + " elements, counts[");
  Tensor a2a = f32(n + 1);
  expect_error([&] { world.all_to_all(f32(n), a2a); },
               "all_to_all(world): input has " + std::to_string(n) + " elements, output has");
  Tensor odd = f32(2 * n + 1);
  if (n > 1) {
    expect_error([&] { world.all_to_all(f32(2 * n + 1), odd); }, "not divisible into");
  }
  std::vector<int64_t> ones(n, 1);
  Tensor a2a_out = f32(n);
  expect_error([&] { world.all_to_all(f32(n + 1), a2a_out, ones, ones); },
               "all_to_all(world): input has " + std::to_string(n + 1) +
                   " elements, send_counts sum to " + std::to_string(n));
  // The group still works: nobody is left inside a collective.
  EXPECT_EQ(world.all_reduce_sum(1.0), static_cast<double>(n));
}

TEST(Errors, BadArgumentsAreRefusedClearly) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  Tensor t = f32(4);
  Tensor bf = Tensor::zeros({4}, DType::bf16);
  expect_error([&] { world.all_reduce_sum(bf); },
               "all_reduce_sum(world): cannot reduce bf16 tensors");
  expect_error([&] { world.iall_reduce_sum(bf); }, "iall_reduce_sum(world): cannot reduce bf16");
  Tensor i_out = i32(4 * n);
  expect_error([&] { world.all_gather(t, i_out); },
               "all_gather(world): input is f32, output is i32");
  Tensor undefined;
  expect_error([&] { world.broadcast(undefined, 0); },
               "broadcast(world): tensor is undefined");
  expect_error([&] { world.broadcast(t, n); },
               "broadcast(world): root " + std::to_string(n) + " is not a rank");
  expect_error([&] { world.send(t, r); },
               "send(world): destination " + std::to_string(r) + " is this rank");
  expect_error([&] { world.irecv(t, -1); }, "irecv(world): source -1 is not a rank");
  if (n > 1) {
    expect_error([&] { world.isend(t, (r + 1) % n, -3); }, "isend(world): tag -3 is outside");
  }
  std::vector<int64_t> short_counts(n + 1, 0);
  Tensor empty = f32(0);
  expect_error([&] { world.all_gather(empty, empty, short_counts); },
               "all_gather(world): counts has " + std::to_string(n + 1) +
                   " entries for a group of " + std::to_string(n) + " ranks");
  std::vector<int64_t> negative(n, 1);
  negative[n - 1] = -1;
  expect_error([&] { world.reduce_scatter(f32(n), t, negative); },
               "reduce_scatter(world): counts[" + std::to_string(n - 1) + "] is -1");
  std::vector<int64_t> huge(n, 0);
  huge[0] = int64_t{INT_MAX} + 1;
  Tensor t2 = f32(4);
  expect_error([&] { world.reduce_scatter(t, t2, huge); }, "the MPI-3 count limit");
  Tensor whole = f32(8);
  Tensor overlapping = whole.slice(2, {2});
  expect_error([&] { world.reduce_scatter(whole, overlapping); },
               "reduce_scatter(world): output overlaps input");
  expect_error([&] { world.set_timeout(-1); }, "timeout must be >= 0");
  EXPECT_EQ(world.all_reduce_max(int64_t{r}), n - 1);
}

TEST(Timeout, OperationsWithinTheLimitComplete) {
  Communicator world = Communicator::world();
  const int n = world.size();
  world.set_timeout(120);
  EXPECT_EQ(world.timeout(), 120);
  Tensor t = f32(1000);
  for (int i = 0; i < 1000; ++i) t.data<float>()[i] = 1.0f;
  CommHandle h = world.iall_reduce_sum(t);
  h.wait();
  world.barrier();
  EXPECT_EQ(t.data<float>()[999], static_cast<float>(n));
}
