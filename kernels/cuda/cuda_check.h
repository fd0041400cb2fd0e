// Host side of every CUDA op: the checks that turn a failed CUDA call into tessera::Error naming
// the call, the stream the ops run on, and stream-ordered scratch memory. Plain C++ (no kernels).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tessera::kernels::cuda {

// Every op is enqueued on the default (legacy) stream of the current device, the stream that
// cudaMemcpy and cudaMemset use, and waits for it before returning (finish): the ops are
// synchronous to their callers.
inline cudaStream_t op_stream() { return 0; }

// Throws tessera::Error "CUDA <call> failed (<file>:<line>): <message>" unless status is success.
void check_cuda(cudaError_t status, const char* call, const char* file, int line);
#define TESSERA_CUDA_CHECK(call) ::tessera::kernels::cuda::check_cuda((call), #call, __FILE__, __LINE__)

// Ends an op: reports a failed launch or a fault in its kernels under the op's name, then returns
// once the stream has drained.
void finish(const char* op);

// Device scratch memory for the duration of one op, from the stream-ordered pool
// (cudaMallocAsync / cudaFreeAsync on op_stream()). Not counted by core/allocator.
class Scratch {
 public:
  explicit Scratch(size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

// Grid size for a grid-stride loop over n items with `threads` per block (at least one block).
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  constexpr int64_t kMaxBlocks = 1 << 20;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

}  // namespace tessera::kernels::cuda
