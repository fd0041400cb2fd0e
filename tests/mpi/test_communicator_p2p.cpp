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

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// An MPI sub-communicator freed at the end of the scope.
class SplitComm {
 public:
  SplitComm(int color, int key) { MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm_); }
  ~SplitComm() { MPI_Comm_free(&comm_); }
  SplitComm(const SplitComm&) = delete;
  SplitComm& operator=(const SplitComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

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

