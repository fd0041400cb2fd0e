// Error checks, op completion and scratch memory shared by the CUDA kernels (see cuda_check.h).
#include "kernels/cuda/cuda_check.h"

#include "core/error.h"

namespace tessera::kernels::cuda {

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    fail("CUDA ", call, " failed (", file, ":", line, "): ", cudaGetErrorName(status), ": ",
         cudaGetErrorString(status));
}

void finish(const char* op) {
  const cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess)
    fail("CUDA ", op, ": kernel launch failed: ", cudaGetErrorName(launch), ": ", cudaGetErrorString(launch));
  const cudaError_t run = cudaStreamSynchronize(op_stream());
  if (run != cudaSuccess)
    fail("CUDA ", op, ": cudaStreamSynchronize failed: ", cudaGetErrorName(run), ": ", cudaGetErrorString(run));
}

Scratch::Scratch(size_t bytes) {
  if (bytes) TESSERA_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, op_stream()));
}

Scratch::~Scratch() {
  if (ptr_) (void)cudaFreeAsync(ptr_, op_stream());  // a destructor must not throw
}

}  // namespace tessera::kernels::cuda
