// KernelTimer's per-thread sums (kernel_timing.h), with the CUDA ops' device time added.
#include "kernels/kernel_timing.h"

#ifdef TESSERA_HAVE_CUDA
#include "kernels/cuda/op_timing.h"
#endif

namespace tessera::kernels {
namespace {
thread_local KernelTimes t_sums;
}  // namespace

KernelTimes take_kernel_times() {
  KernelTimes taken = t_sums;
  t_sums = {};
#ifdef TESSERA_HAVE_CUDA
  const KernelTimes device = cuda::take_op_times();
  for (int k = 0; k < kKernelKinds; ++k) taken.ms[k] += device.ms[k];
#endif
  return taken;
}

KernelTimer::~KernelTimer() {
  t_sums.ms[static_cast<int>(kind_)] +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace tessera::kernels
