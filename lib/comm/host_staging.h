// Device tensors over MPI: the Communicator's MPI calls read and write host memory, so an operation
// on a device (CUDA) tensor runs on host copies. staged_send gives the host tensor MPI reads,
// staged_receive the one it writes; WriteBack puts a staged result into its tensor once the
// operation completed. Host tensors pass through as they are (no copy, nothing to write back),
// except under the test hook TESSERA_TEST_STAGE_HOST=1, which stages them too, so that the CPU
// tests run the staging path the GPU takes.
// The copy of a device send waits for the device's queued work (cudaMemcpy on the default stream
// orders after every op): the operation's time in the stats includes that wait.
#pragma once
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/tensor.h"
#include "core/test_hooks.h"

namespace tessera::comm {

// Whether t travels through a host copy.
inline bool staged(const Tensor& t) {
  return t.device() != Device::cpu || test_hooks().stage_host;
}

// t itself, or a host copy of its values.
inline Tensor staged_send(const Tensor& t) { return staged(t) ? t.to(Device::cpu) : t; }

// t itself, or a host tensor of its shape and dtype for MPI to fill.
inline Tensor staged_receive(const Tensor& t) {
  return staged(t) ? Tensor::empty(t.shape(), t.dtype(), Device::cpu) : t;
}

// A staged result and the tensor it belongs in (empty when the result was received in place).
struct WriteBack {
  Tensor host, target;
  WriteBack() = default;
  WriteBack(Tensor staged_result, Tensor into) {
    if (!staged(into)) return;
    host = std::move(staged_result);
    target = std::move(into);
  }
  void operator()() {
    if (target.defined()) target.copy_from(host);
  }
};

}  // namespace tessera::comm
