// KernelTimer's per-thread sums (kernel_timing.h), with the CUDA ops' device time added, and the
// per-op sums of a profile (op_profile.h).
#include "kernels/kernel_timing.h"

#ifdef TESSERA_HAVE_CUDA
#include "kernels/cuda/op_timing.h"
#endif

namespace tessera::kernels {
namespace {
thread_local KernelTimes t_sums;
thread_local OpSums t_op_sums;  // by op name, while profiling
}  // namespace

KernelTimes take_kernel_times(OpProfile* profile) {
  KernelTimes taken = t_sums;
  t_sums = {};
  if (profile) {
    add_op_sums(profile->cpu, t_op_sums);
    ++profile->steps;
  }
  t_op_sums.clear();
#ifdef TESSERA_HAVE_CUDA
  const KernelTimes device = cuda::take_op_times(profile ? &profile->cuda : nullptr);
  for (int k = 0; k < kKernelKinds; ++k) taken.ms[k] += device.ms[k];
#endif
  return taken;
}

KernelTimer::~KernelTimer() {
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  t_sums.ms[static_cast<int>(kind_)] += ms;
  if (op_profile_enabled()) t_op_sums[name_ ? name_ : unnamed_op(kind_)].add(ms);
}

}  // namespace tessera::kernels
