// generate --dp's arithmetic (lib/infer/replicas.h): the round-robin deal gives every prompt to
// exactly one replica and prompts_of_replica counts them; the scoring windows' ranges are
// contiguous, in replica order, cover every window once and differ in size by at most one.
// The relay's messages are checked under mpirun by tests/parity/generate_parallel.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "infer/replicas.h"

using namespace tessera;

TEST(InferReplicas, EveryPromptGoesToOneReplicaRoundRobin) {
  for (int replicas = 1; replicas <= 5; ++replicas)
    for (int64_t prompts = 0; prompts <= 13; ++prompts) {
      std::vector<int64_t> dealt(static_cast<size_t>(replicas), 0);
      for (int64_t i = 0; i < prompts; ++i) {
        const int r = infer::replica_of_prompt(static_cast<uint64_t>(i), replicas);
        EXPECT_EQ(r, i % replicas);
        ++dealt[static_cast<size_t>(r)];
      }
      for (int r = 0; r < replicas; ++r)
        EXPECT_EQ(infer::prompts_of_replica(prompts, r, replicas), dealt[static_cast<size_t>(r)])
            << prompts << " prompts, replica " << r << " of " << replicas;
    }
}

TEST(InferReplicas, WindowRangesCoverEveryWindowOnceInOrder) {
  for (int replicas = 1; replicas <= 5; ++replicas)
    for (int64_t windows = 0; windows <= 23; ++windows) {
      int64_t next = 0, least = windows, most = 0;
      for (int r = 0; r < replicas; ++r) {
        const infer::WindowRange w = infer::windows_of_replica(windows, r, replicas);
        EXPECT_EQ(w.first, next) << windows << " windows, replica " << r << " of " << replicas;
        next = w.first + w.count;
        least = std::min(least, w.count), most = std::max(most, w.count);
      }
      EXPECT_EQ(next, windows);
      EXPECT_LE(most - least, 1);
    }
  EXPECT_THROW(infer::windows_of_replica(10, 2, 2), Error);
}
