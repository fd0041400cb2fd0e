// Peak FLOP rate: an in-process sgemm measurement on CPU, a table value on CUDA.
#include "kernels/peak_flops.h"

#include <algorithm>

#include "core/tensor.h"
#include "core/timer.h"
#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels {

double measure_sgemm_tflops(int64_t n, int repeats) {
  Tensor a = Tensor::empty({n, n}), b = Tensor::empty({n, n}), c = Tensor::empty({n, n});
  std::fill_n(a.data<float>(), n * n, 0.5f);
  std::fill_n(b.data<float>(), n * n, 0.25f);
  cpu::gemm(false, false, n, n, n, 1.0f, a.data<float>(), b.data<float>(), 0.0f, c.data<float>());  // warm-up
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    cpu::gemm(false, false, n, n, n, 1.0f, a.data<float>(), b.data<float>(), 0.0f, c.data<float>());
    best = std::min(best, t.seconds());
  }
  return 2.0 * static_cast<double>(n) * n * n / best / 1e12;
}

double peak_tflops(Device device) {
  if (device == Device::cuda) return 67.0;  // H100/H200 SXM fp32 (non-tensor-core) peak
  static const double measured = measure_sgemm_tflops();
  return measured;
}

}  // namespace tessera::kernels
