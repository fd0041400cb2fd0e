// ranks: 1 4
// comm::node_local_rank and node_local_size (which GPU a rank takes, how many ranks share a node's
// memory) agree with the launcher's own view of the node: Open MPI's OMPI_COMM_WORLD_LOCAL_RANK and
// _LOCAL_SIZE under mpirun, Slurm's SLURM_LOCALID and SLURM_STEP_TASKS_PER_NODE under srun. On one
// node here, across two "nodes" in tests/mpi/two_nodes.sh (mpirun) and tests/slurm/two_nodes.sh (srun).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "comm/mpi_runtime.h"

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) ADD_FAILURE() << name << " is not set";
  return v ? std::atoi(v) : -1;
}

// Slurm's tasks per node of the step ("2(x3),1": 2 on each of the first three nodes, 1 on the
// fourth), expanded to one count per node.
std::vector<int> slurm_tasks_per_node(const std::string& spec) {
  std::vector<int> counts;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    const int tasks = std::atoi(item.c_str());
    const auto x = item.find("(x");
    const int repeat = x == std::string::npos ? 1 : std::atoi(item.c_str() + x + 2);
    counts.insert(counts.end(), repeat, tasks);
  }
  return counts;
}
}  // namespace

TEST(NodeLocalRank, AgreesWithTheLauncher) {
  if (std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {  // mpirun
    EXPECT_EQ(tessera::comm::node_local_rank(), env_int("OMPI_COMM_WORLD_LOCAL_RANK"));
    EXPECT_EQ(tessera::comm::node_local_size(), env_int("OMPI_COMM_WORLD_LOCAL_SIZE"));
  } else if (std::getenv("SLURM_LOCALID")) {  // srun
    EXPECT_EQ(tessera::comm::node_local_rank(), env_int("SLURM_LOCALID"));
    const char* spec = std::getenv("SLURM_STEP_TASKS_PER_NODE");
    ASSERT_NE(spec, nullptr) << "SLURM_STEP_TASKS_PER_NODE is not set under srun";
    const std::vector<int> counts = slurm_tasks_per_node(spec);
    const int node = env_int("SLURM_NODEID");
    ASSERT_TRUE(node >= 0 && node < static_cast<int>(counts.size())) << "SLURM_NODEID " << node << " outside " << spec;
    EXPECT_EQ(tessera::comm::node_local_size(), counts[node]);
  } else {
    FAIL() << "neither OMPI_COMM_WORLD_LOCAL_RANK nor SLURM_LOCALID is set: run this test under mpirun or srun";
  }
}
