// Error checks, op completion and scratch memory shared by the CUDA kernels (see cuda_check.h).
#include "kernels/cuda/cuda_check.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "kernels/cuda/op_timing.h"

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

namespace {

void synchronize(const char* op) {
  const cudaError_t run = cudaStreamSynchronize(op_stream());
  if (run != cudaSuccess)
    fail("CUDA ", op, ": cudaStreamSynchronize failed: ", cudaGetErrorName(run), ": ", cudaGetErrorString(run));
}

}  // namespace

void finish(const char* op) {
  const cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess)
    fail("CUDA ", op, ": kernel launch failed: ", cudaGetErrorName(launch), ": ", cudaGetErrorString(launch));
  if (synchronous_ops()) synchronize(op);  // debugging: the op's timer keeps running over its other kernels
}

void wait_for_ops(const char* op) {
  end_running_op_timer();  // the op's device time ends with its kernels, not with this wait
  synchronize(op);
}

namespace {

// The stream-ordered pool keeps what scratch frees instead of handing it back to the driver at
// every synchronisation (its default), so ops in a steady loop get their scratch from the pool
// (a step's largest, the logits' gradient in bf16, is hundreds of MiB on a GPT-2-sized model: a
// pool that trimmed it to 256 MiB at each of a step's waits mapped it again in the next step,
// inside the ops' timed intervals). It keeps up to a 16th of the device (at least 256 MiB): the
// rest stays free for cuBLAS, NCCL and other ranks sharing the GPU; a tensor allocation that finds
// the device full trims it and retries (core/allocator.cpp). Once per process: a rank uses one
// device.
void keep_pool_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    int device = 0;
    cudaMemPool_t pool = nullptr;
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess ||
        cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
      return;
    uint64_t keep = std::max<uint64_t>(uint64_t{256} << 20, total_bytes / 16);
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
