// Where a training step's time goes: every kernels/ops.h call on the CPU is timed on the calling
// thread and added to its kind (GEMMs, attention, the optimizer: the update, the gradient norm
// and zeroing the gradients; everything else), as is the wait for the step's data, until
// take_kernel_times() hands the sums over and starts again (the trainer does so once per step:
// gemm_ms, attention_ms, optimizer_ms, other_kernels_ms, data_ms in the metrics; comm_ms comes
// from the communicators). CUDA ops run asynchronously, so a host-side timer would time their
// launch only: they are timed on the device instead (kernels/cuda/op_timing.h) and added here.
#pragma once
#include <chrono>
#include <string_view>

namespace tessera::kernels {

enum class KernelKind { gemm, attention, optimizer, other, data };
constexpr int kKernelKinds = 5;

// The kind of a kernel by its name in kernels/cpu/cpu_ops.h.
constexpr KernelKind kernel_kind(std::string_view name) {
  if (name.starts_with("gemm")) return KernelKind::gemm;
  if (name.starts_with("attention")) return KernelKind::attention;
  if (name.starts_with("adamw") || name == "sum_squares") return KernelKind::optimizer;  // the update, the norm
  return KernelKind::other;
}

struct KernelTimes {
  double ms[kKernelKinds] = {};
  double of(KernelKind k) const { return ms[static_cast<int>(k)]; }
};

// The calling thread's sums since the last call; resets them.
KernelTimes take_kernel_times();

// Times one kernel call into the calling thread's sums.
class KernelTimer {
 public:
  explicit KernelTimer(KernelKind kind) : kind_(kind), start_(std::chrono::steady_clock::now()) {}
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

 private:
  KernelKind kind_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessera::kernels
