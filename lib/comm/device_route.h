// How a group's collectives on device (CUDA) tensors travel: through host copies over MPI (the
// default: comm/host_staging.h, any MPI and any number of ranks per GPU), or over NCCL with
// --comm-backend nccl, which needs a GPU of its own for every member of the group (NCCL refuses
// two ranks on one GPU). Decided on the group's first collective on device tensors by all its
// members together: each says what it was asked for and where its GPU is, in one exchange the
// Communicator makes under its timeout, and every member then checks the same answers, so that a bad
// or differing setting, or a GPU shared under nccl, makes every member throw the same error instead
// of leaving some of them waiting. Point-to-point messages always take the host route (a pipeline's
// sends and receives match by tag, out of order: MPI's, not NCCL's).
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

namespace tessera::comm {

class NcclCommunicator;

class DeviceRoute {
 public:
  // The route this member asks for: "host" (the default) or "nccl" (--comm-backend); anything
  // else is refused, on every member alike, when the group decides. Set before the first collective.
  void set_backend(const std::string& backend) { backend_ = backend; }

  // Gathers `bytes` bytes from every member, in rank order (the Communicator's watched all-gather).
  using Exchange = std::function<void(const void* mine, void* all, int bytes)>;

  // The group's NCCL communicator, or null for the host route. Until a call succeeds, a call is
  // collective over `comm` (the exchange, then under nccl ncclCommInitRank); after it, local.
  NcclCommunicator* nccl(const Exchange& exchange, MPI_Comm comm, const std::string& name, double timeout_s);

 private:
  std::string backend_ = "host";
  bool decided_ = false;
  std::shared_ptr<NcclCommunicator> nccl_;  // (shared_ptr: its deleter is made with it, only in NCCL builds)
};

}  // namespace tessera::comm
