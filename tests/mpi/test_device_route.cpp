// ranks: 2 3
// DeviceRoute's collective decision (comm/device_route.h): the host route by default, a bad or
// differing --comm-backend refused on every rank alike (also where only one rank has it wrong),
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

// A route asked for `backend` (nullptr: left at its default).
DeviceRoute route_asking(const char* backend) {
  DeviceRoute route;
  if (backend) route.set_backend(backend);
  return route;
}

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
  DeviceRoute route = route_asking(nullptr);
  EXPECT_EQ(route_of(route), nullptr);
  // Decided: a later call makes no exchange (rank 0 alone asks again; it would hang otherwise).
  if (world_rank() == 0) {
    EXPECT_EQ(route_of(route), nullptr);
  }
  DeviceRoute explicit_host = route_asking("host");
  EXPECT_EQ(route_of(explicit_host), nullptr);
}

TEST(DeviceRoute, SettingsThatDifferBetweenRanksAreRefusedEverywhere) {
  DeviceRoute route = route_asking(world_rank() == 1 ? "nccl" : "host");
  const std::string message = refusal(route);
  EXPECT_NE(message.find("group world: --comm-backend differs between its ranks (rank 0: host, rank 1: nccl)"),
            std::string::npos)
      << message;
}

TEST(DeviceRoute, AnUnknownSettingIsRefusedOnEveryRank) {
  {
    DeviceRoute route = route_asking("infiniband");
    const std::string message = refusal(route);
    EXPECT_NE(message.find("group world: --comm-backend infiniband on its rank 0: expected host or nccl"),
              std::string::npos)
        << message;
  }
  // Wrong on one rank only: the others, whose setting is fine, throw the same error.
  DeviceRoute route = route_asking(world_rank() == 1 ? "infiniband" : nullptr);
  const std::string message = refusal(route);
  EXPECT_NE(message.find("--comm-backend infiniband on its rank 1: expected host or nccl"), std::string::npos)
      << message;
}

#ifndef TESSERA_HAVE_NCCL
TEST(DeviceRoute, NcclInABuildWithoutItIsRefusedEverywhere) {
  DeviceRoute route = route_asking("nccl");
  EXPECT_NE(refusal(route).find("group world: --comm-backend nccl, but this build has no NCCL"),
            std::string::npos);
}
#endif
