// KernelTimer's per-thread sums (kernel_timing.h).
#include "kernels/kernel_timing.h"

namespace tessera::kernels {
namespace {
thread_local KernelTimes t_sums;
}  // namespace

KernelTimes take_kernel_times() {
  const KernelTimes taken = t_sums;
  t_sums = {};
  return taken;
}

KernelTimer::~KernelTimer() {
  t_sums.ms[static_cast<int>(kind_)] +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace tessera::kernels
