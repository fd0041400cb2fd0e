// ranks: 1 4
// comm::node_local_rank and node_local_size (which GPU a rank takes, how many ranks share a node's
// memory) agree with the launcher's own view of the node (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK and
// _LOCAL_SIZE): on one node here, and across two "nodes" in tests/mpi/two_nodes.sh.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "comm/mpi_runtime.h"

namespace {
int launcher_value(const char* name) {
  const char* v = std::getenv(name);
  if (!v) ADD_FAILURE() << name << " is not set: run this test under Open MPI's mpirun";
  return v ? std::atoi(v) : -1;
}
}  // namespace

TEST(NodeLocalRank, AgreesWithTheLauncher) {
  EXPECT_EQ(tessera::comm::node_local_rank(), launcher_value("OMPI_COMM_WORLD_LOCAL_RANK"));
  EXPECT_EQ(tessera::comm::node_local_size(), launcher_value("OMPI_COMM_WORLD_LOCAL_SIZE"));
}
