// DeviceRoute: the collective choice between host staging and NCCL for device tensors.
#include "comm/device_route.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/nccl_communicator.h"
#include "core/error.h"

#ifdef TESSERA_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace tessera::comm {
namespace {

// What each member says about itself: the route it was asked for and where its GPU is.
struct Member {
  char setting[16] = {};  // TESSERA_CUDA_COMM as set ("" unset; cut to 15 characters)
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  char bus[32] = {};  // PCI bus id of the current CUDA device ("" without NCCL)
};

Member describe_self() {
  Member m;
  if (const char* env = std::getenv("TESSERA_CUDA_COMM")) std::strncpy(m.setting, env, sizeof m.setting - 1);
  int len = 0;
  MPI_Get_processor_name(m.host, &len);
#ifdef TESSERA_HAVE_NCCL
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetPCIBusId(m.bus, sizeof m.bus, device);
#endif
  return m;
}

std::string setting_of(const Member& m) { return *m.setting ? m.setting : "host"; }

}  // namespace

NcclCommunicator* DeviceRoute::nccl(const Exchange& exchange, MPI_Comm comm, const std::string& name,
                                    double timeout_s) {
  if (decided_) return nccl_.get();
  int size = 1;
  MPI_Comm_size(comm, &size);
  const Member me = describe_self();
  std::vector<Member> all(size);
  exchange(&me, all.data(), static_cast<int>(sizeof me));
  // Every member checks the same answers, so each throws the same error or none does.
  const std::string want = setting_of(all[0]);
  for (int r = 0; r < size; ++r) {
    const std::string s = setting_of(all[r]);
    TESSERA_CHECK(s == "host" || s == "nccl", "group ", name, ": TESSERA_CUDA_COMM=", s, " on its rank ", r,
                  ": expected host or nccl");
    TESSERA_CHECK(s == want, "group ", name, ": TESSERA_CUDA_COMM differs between its ranks (rank 0: ", want,
                  ", rank ", r, ": ", s, "); set it the same on every rank (mpirun -x TESSERA_CUDA_COMM)");
  }
  if (want == "host") {
    decided_ = true;
    return nullptr;
  }
#ifdef TESSERA_HAVE_NCCL
  for (int a = 0; a < size; ++a)
    for (int b = a + 1; b < size; ++b)
      TESSERA_CHECK(std::strcmp(all[a].host, all[b].host) != 0 || std::strcmp(all[a].bus, all[b].bus) != 0,
                    "group ", name, ": TESSERA_CUDA_COMM=nccl, but its ranks ", a, " and ", b, " share the GPU ",
                    all[a].bus, " on ", all[a].host, " (NCCL needs a GPU per rank; unset TESSERA_CUDA_COMM to",
                    " stage through the host)");
  nccl_ = std::make_shared<NcclCommunicator>(comm, name);
  nccl_->set_timeout(timeout_s);
  decided_ = true;
  return nccl_.get();
#else
  (void)timeout_s;
  fail("group ", name, ": TESSERA_CUDA_COMM=nccl, but this build has no NCCL (unset it to stage through the host)");
#endif
}

}  // namespace tessera::comm
