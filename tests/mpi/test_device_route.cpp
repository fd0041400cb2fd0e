// ranks: 2 3
// DeviceRoute's collective decision (comm/device_route.h): the host route by default, a bad or
// differing TESSERA_CUDA_COMM refused on every rank alike (also where only one rank has it wrong),
// the decision made once. (The NCCL route itself needs a GPU per rank; the host route's copies run
// in the staged mpi and parity tests and, on a GPU, in tests/cuda/multi_rank_parity.sh.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "comm/device_route.h"
#include "core/error.h"

using namespace tessera;
using namespace tessera::comm;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// TESSERA_CUDA_COMM set (or unset: nullptr) for a scope.
class RouteSetting {
 public:
  explicit RouteSetting(const char* value) {
    if (value)
      setenv("TESSERA_CUDA_COMM", value, 1);
    else
      unsetenv("TESSERA_CUDA_COMM");
  }
  ~RouteSetting() { unsetenv("TESSERA_CUDA_COMM"); }
};

// The world's all-gather, as the Communicator lends it.
NcclCommunicator* route_of(DeviceRoute& route) {
  const auto exchange = [](const void* mine, void* all, int bytes) {
    MPI_Allgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, MPI_COMM_WORLD);
  };
  return route.nccl(exchange, MPI_COMM_WORLD, "world", 0);
}

std::string refusal(DeviceRoute& route) {
  try {
    route_of(route);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(DeviceRoute, HostIsTheDefaultAndIsDecidedOnce) {
  const RouteSetting unset(nullptr);
  DeviceRoute route;
  EXPECT_EQ(route_of(route), nullptr);
  // Decided: a later call makes no exchange (rank 0 alone asks again; it would hang otherwise).
  if (world_rank() == 0) {
    EXPECT_EQ(route_of(route), nullptr);
  }
  const RouteSetting host("host");
  DeviceRoute explicit_host;
  EXPECT_EQ(route_of(explicit_host), nullptr);
}

TEST(DeviceRoute, SettingsThatDifferBetweenRanksAreRefusedEverywhere) {
  const RouteSetting differs(world_rank() == 1 ? "nccl" : "host");
  DeviceRoute route;
  const std::string message = refusal(route);
  EXPECT_NE(message.find("group world: TESSERA_CUDA_COMM differs between its ranks (rank 0: host, rank 1: nccl)"),
            std::string::npos)
      << message;
}

TEST(DeviceRoute, AnUnknownSettingIsRefusedOnEveryRank) {
  {
    const RouteSetting bad("infiniband");
    DeviceRoute route;
    const std::string message = refusal(route);
    EXPECT_NE(message.find("group world: TESSERA_CUDA_COMM=infiniband on its rank 0: expected host or nccl"),
              std::string::npos)
        << message;
  }
  // Wrong on one rank only: the others, whose setting is fine, throw the same error.
  const RouteSetting one_bad(world_rank() == 1 ? "infiniband" : nullptr);
  DeviceRoute route;
  const std::string message = refusal(route);
  EXPECT_NE(message.find("TESSERA_CUDA_COMM=infiniband on its rank 1: expected host or nccl"), std::string::npos)
      << message;
}

#ifndef TESSERA_HAVE_NCCL
TEST(DeviceRoute, NcclInABuildWithoutItIsRefusedEverywhere) {
  const RouteSetting nccl("nccl");
  DeviceRoute route;
  EXPECT_NE(refusal(route).find("group world: TESSERA_CUDA_COMM=nccl, but this build has no NCCL"),
            std::string::npos);
}
#endif
