// Error checks, op completion and scratch memory shared by the CUDA kernels (see cuda_check.h).
#include "kernels/cuda/cuda_check.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace tessera::kernels::cuda {

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    fail("CUDA ", call, " failed (", file, ":", line, "): ", cudaGetErrorName(status), ": ",
         cudaGetErrorString(status));
}

bool synchronous_ops() {
  static const bool sync = [] {
    const char* v = std::getenv("TESSERA_CUDA_SYNC");
    return v && std::strcmp(v, "1") == 0;
  }();
  return sync;
}

void finish(const char* op) {
  const cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess)
    fail("CUDA ", op, ": kernel launch failed: ", cudaGetErrorName(launch), ": ", cudaGetErrorString(launch));
  if (synchronous_ops()) wait_for_ops(op);
}

void wait_for_ops(const char* op) {
  const cudaError_t run = cudaStreamSynchronize(op_stream());
  if (run != cudaSuccess)
    fail("CUDA ", op, ": cudaStreamSynchronize failed: ", cudaGetErrorName(run), ": ", cudaGetErrorString(run));
}

namespace {

// The stream-ordered pool keeps up to kPoolKeepBytes of what scratch frees instead of handing it
// back to the driver at every synchronisation (its default), so ops in a steady loop get their
// scratch from the pool; past that it trims, leaving the rest to cudaMalloc's tensors. Once per
// process: a rank uses one device.
constexpr uint64_t kPoolKeepBytes = uint64_t{256} << 20;

void keep_pool_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    int device = 0;
    cudaMemPool_t pool = nullptr;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) return;
    uint64_t keep = kPoolKeepBytes;
    (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  });
}

}  // namespace

Scratch::Scratch(size_t bytes) {
  if (!bytes) return;
  keep_pool_memory();
  TESSERA_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, op_stream()));
}

Scratch::~Scratch() {
  if (ptr_) (void)cudaFreeAsync(ptr_, op_stream());  // a destructor must not throw
}

}  // namespace tessera::kernels::cuda
