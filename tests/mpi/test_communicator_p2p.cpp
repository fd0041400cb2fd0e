// Communicator point-to-point messages on real MPI ranks (two or more): rings with asynchronous
// handles, tag matching, short messages reported on the receiver.
// ranks: 2 3 4
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/process_mesh.h"

using namespace tessera;
using namespace tessera::comm;

namespace {

Tensor f32(int64_t n) { return Tensor::zeros({n}, DType::f32); }
Tensor i32(int64_t n) { return Tensor::zeros({n}, DType::i32); }

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

TEST(SendRecv, RingWithAsyncHandles) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  ASSERT_GE(n, 2) << "a ring needs two ranks (run under mpirun -np 2 or more)";
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor out = i32(3);
  Tensor in = i32(3);
  for (int k = 0; k < 3; ++k) out.data<int32_t>()[k] = r * 10 + k;
  CommHandle receiving = world.irecv(in, prev, 5);
  CommHandle sending = world.isend(out, next, 5);
  receiving.wait();
  sending.wait();
  for (int k = 0; k < 3; ++k) EXPECT_EQ(in.data<int32_t>()[k], prev * 10 + k);
}

// test() polls without blocking: it returns true once the operation is complete (and then
// stays complete), false before; a receive completed by test() holds the message and is counted.
TEST(SendRecv, TestPollsAHandleToCompletion) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  ASSERT_GE(n, 2) << "a ring needs two ranks (run under mpirun -np 2 or more)";
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  CommHandle nothing;
  EXPECT_TRUE(nothing.test());
  Tensor out = i32(4), in = i32(4);
  for (int k = 0; k < 4; ++k) out.data<int32_t>()[k] = r * 100 + k;
  const int64_t calls_before = world.stats().op(CommOp::recv).calls;
  CommHandle receiving = world.irecv(in, prev, 9);
  CommHandle sending = world.isend(out, next, 9);
  while (!receiving.test()) {
  }
  EXPECT_FALSE(receiving.pending());
  EXPECT_TRUE(receiving.test());
  sending.wait();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(in.data<int32_t>()[k], prev * 100 + k);
  EXPECT_EQ(world.stats().op(CommOp::recv).calls, calls_before + 1);
}

TEST(SendRecv, BlockingPairsAndTagsMatchOutOfOrder) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  ASSERT_GE(n, 2) << "messages need two ranks (run under mpirun -np 2 or more)";
  const int partner = r % 2 == 0 ? r + 1 : r - 1;
  if (partner >= n) return;  // the odd rank out
  // Blocking exchange: even ranks send first, odd ranks receive first.
  Tensor mine = f32(2), theirs = f32(2);
  mine.data<float>()[0] = static_cast<float>(r);
  mine.data<float>()[1] = 0.5f;
  if (r % 2 == 0) {
    world.send(mine, partner, 1);
    world.recv(theirs, partner, 1);
  } else {
    world.recv(theirs, partner, 1);
    world.send(mine, partner, 1);
  }
  EXPECT_EQ(theirs.data<float>()[0], static_cast<float>(partner));
  EXPECT_EQ(theirs.data<float>()[1], 0.5f);
  // Tags: the even rank sends tag 1 then tag 2; the odd one receives tag 2 first.
  if (r % 2 == 0) {
    Tensor one = i32(1), two = i32(1);
    one.data<int32_t>()[0] = 111;
    two.data<int32_t>()[0] = 222;
    CommHandle h1 = world.isend(one, partner, 1);
    CommHandle h2 = world.isend(two, partner, 2);
  } else {
    Tensor got2 = i32(1), got1 = i32(1);
    world.recv(got2, partner, 2);
    world.recv(got1, partner, 1);
    EXPECT_EQ(got2.data<int32_t>()[0], 222);
    EXPECT_EQ(got1.data<int32_t>()[0], 111);
  }
}

TEST(SendRecv, ShortMessageIsReportedOnTheReceiver) {
  Communicator world = Communicator::world();
  const int n = world.size(), r = world.rank();
  ASSERT_GE(n, 2) << "messages need two ranks (run under mpirun -np 2 or more)";
  if (r == 0) {
    world.send(i32(2), 1, 9);
  } else if (r == 1) {
    Tensor t = i32(5);
    expect_error([&] { world.recv(t, 0, 9); },
                 "recv(world): expected a message of 5 elements from rank 0, got 2");
  }
}

// --- asynchronous collectives ---

