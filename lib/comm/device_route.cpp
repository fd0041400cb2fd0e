// DeviceRoute: the collective choice between host staging and NCCL for device tensors.
#include "comm/device_route.h"

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
  char setting[16] = {};  // the backend asked for (--comm-backend; cut to 15 characters)
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  char bus[32] = {};  // PCI bus id of the current CUDA device ("" without NCCL)
};

Member describe_self(const std::string& backend) {
  Member m;
  std::strncpy(m.setting, backend.c_str(), sizeof m.setting - 1);
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
  const Member me = describe_self(backend_);
  std::vector<Member> all(size);
  exchange(&me, all.data(), static_cast<int>(sizeof me));
  // Every member checks the same answers, so each throws the same error or none does.
  const std::string want = setting_of(all[0]);
  for (int r = 0; r < size; ++r) {
    const std::string s = setting_of(all[r]);
    TESSERA_CHECK(s == "host" || s == "nccl", "group ", name, ": --comm-backend ", s, " on its rank ", r,
                  ": expected host or nccl");
    TESSERA_CHECK(s == want, "group ", name, ": --comm-backend differs between its ranks (rank 0: ", want,
                  ", rank ", r, ": ", s, "); give every rank the same");
  }
  if (want == "host") {
    decided_ = true;
    return nullptr;
  }
#ifdef TESSERA_HAVE_NCCL
  for (int a = 0; a < size; ++a)
    for (int b = a + 1; b < size; ++b)
      TESSERA_CHECK(std::strcmp(all[a].host, all[b].host) != 0 || std::strcmp(all[a].bus, all[b].bus) != 0,
                    "group ", name, ": --comm-backend nccl, but its ranks ", a, " and ", b, " share the GPU ",
                    all[a].bus, " on ", all[a].host, " (NCCL needs a GPU per rank; --comm-backend host",
                    " stages through the host)");
  nccl_ = std::make_shared<NcclCommunicator>(comm, name);
  nccl_->set_timeout(timeout_s);
  decided_ = true;
  return nccl_.get();
#else
  (void)timeout_s;
  fail("group ", name, ": --comm-backend nccl, but this build has no NCCL (--comm-backend host stages through",
       " the host)");
#endif
}

}  // namespace tessera::comm
