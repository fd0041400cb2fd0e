// Shared by the kernel tests: Philox-filled tensors and a scoped OpenMP thread count (kernels are
// run on 1 and 3 threads so that a race shows even though CTest pins one).
#pragma once
#include <omp.h>

#include "core/philox.h"
#include "core/tensor.h"

namespace tessera::testing {

// A [shape] tensor of mean + std * normal(seed, stream, i).
inline Tensor random_tensor(Shape shape, uint64_t seed, uint64_t stream, float mean = 0.0f, float std = 1.0f) {
  Tensor t = Tensor::empty(std::move(shape));
  philox_fill_normal(t.data<float>(), t.numel(), seed, stream, 0, mean, std);
  return t;
}

// Sets the OpenMP thread count for a scope.
struct ScopedThreads {
  int saved = omp_get_max_threads();
  explicit ScopedThreads(int n) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(saved); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;
};

}  // namespace tessera::testing
