// Host side of every CUDA op: the checks that turn a failed CUDA call into tessera::Error naming
// the call, the stream the ops run on, when the host waits for them, and stream-ordered scratch
// memory. Plain C++ (no kernels).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tessera::kernels::cuda {

// Every op is enqueued on the default (legacy) stream of the current device, the stream that
// cudaMemcpy and cudaMemset use, so ops run in the order they are called and a copy to the host
// sees every op before it. Ops are asynchronous to their callers: the host waits only where it
// reads a result (wait_for_ops), so a step's kernels queue back to back.
inline cudaStream_t op_stream() { return 0; }

// Throws tessera::Error "CUDA <call> failed (<file>:<line>): <message>" unless status is success.
void check_cuda(cudaError_t status, const char* call, const char* file, int line);
#define TESSERA_CUDA_CHECK(call) ::tessera::kernels::cuda::check_cuda((call), #call, __FILE__, __LINE__)

// Ends an op: reports a failed launch under the op's name. A fault inside its kernels surfaces at
// the next wait, under that waiter's name, unless TESSERA_CUDA_SYNC=1 is set in the environment:
// then every op waits for its kernels and reports their faults under its own name (for debugging,
// as CUDA_LAUNCH_BLOCKING does for launches).
void finish(const char* op);

// Returns once every op queued on op_stream() has run; a fault in any of them is reported as
// "CUDA <op>: ...". Ops that hand a value to the host call it after queueing the copy.
void wait_for_ops(const char* op);

// Whether TESSERA_CUDA_SYNC=1 was set (read once).
bool synchronous_ops();

// Device scratch memory for the duration of one op, from the stream-ordered pool
// (cudaMallocAsync / cudaFreeAsync on op_stream()): freed in stream order, so kernels still
// queued may use it after the op returns. The pool keeps freed memory for the next ops, up to a
// 16th of the device (cuda_check.cpp). Not counted by core/allocator.
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
