// Peak FLOP rate: an in-process GEMM measurement on CPU, a per-architecture table on CUDA.
#include "kernels/peak_flops.h"

#include <algorithm>
#include <vector>

#include "core/tensor.h"
#include "core/timer.h"
#include "kernels/cpu/cpu_ops.h"
#ifdef TESSERA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera::kernels {
namespace {

// Best time of `repeats` runs of product() after one warm-up, as TFLOP/s of an n^3 product.
template <typename Product>
double best_rate(int64_t n, int repeats, const Product& product) {
  product();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    product();
    best = std::min(best, t.seconds());
  }
  return 2.0 * static_cast<double>(n) * n * n / best / 1e12;
}

#ifdef TESSERA_HAVE_CUDA
std::optional<double> this_gpu_peak(bool bf16) {
  int device = 0, major = 0, minor = 0, sms = 0, clock_khz = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) != cudaSuccess)
    return std::nullopt;
  return gpu_peak_tflops(major, minor, sms, clock_khz / 1e6, bf16);
}
#endif

Tensor filled(int64_t n, float value) {
  Tensor t = Tensor::empty({n, n});
  std::fill_n(t.data<float>(), n * n, value);
  return t;
}

}  // namespace

double measure_sgemm_tflops(int64_t n, int repeats) {
  Tensor a = filled(n, 0.5f), b = filled(n, 0.25f), c = Tensor::empty({n, n});
  return best_rate(n, repeats, [&] {
    cpu::gemm(false, false, n, n, n, 1.0f, a.data<float>(), b.data<float>(), 0.0f, c.data<float>());
  });
}

double measure_gemm_bf16_tflops(int64_t n, int repeats) {
  Tensor a = filled(n, 0.5f), b = filled(n, 0.25f), c = Tensor::empty({n, n});
  return best_rate(n, repeats, [&] {
    cpu::gemm_bf16(false, false, n, n, n, 1.0f, a.data<float>(), nullptr, b.data<float>(), nullptr, 0.0f,
                   c.data<float>());
  });
}

std::optional<double> gpu_peak_tflops(int major, int minor, int sms, double clock_ghz, bool bf16) {
  double per_sm_clock = 0;  // FLOPs per SM per clock
  if (major == 8 && minor == 0) per_sm_clock = bf16 ? 2048 : 128;
  if (major == 9 && minor == 0) per_sm_clock = bf16 ? 4096 : 256;
  if (per_sm_clock == 0 || sms <= 0 || clock_ghz <= 0) return std::nullopt;
  return per_sm_clock * sms * clock_ghz / 1e3;
}

std::optional<double> peak_tflops(Device device, bool bf16) {
  if (device == Device::cuda) {
#ifdef TESSERA_HAVE_CUDA
    return this_gpu_peak(bf16);
#else
    return std::nullopt;
#endif
  }
  static const double sgemm = measure_sgemm_tflops();
  if (!bf16) return sgemm;
  static const double gemm_bf16 = measure_gemm_bf16_tflops();
  return gemm_bf16;
}

}  // namespace tessera::kernels
