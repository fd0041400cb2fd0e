// The FLOP rate MFU is measured against: on CPU, this machine's sgemm rate measured once in
// process (the BLAS as configured, with the current thread count); on CUDA, the fp32 peak of the device.
#pragma once
#include "core/dtype.h"

namespace tessera::kernels {

double measure_sgemm_tflops(int64_t n = 1024, int repeats = 3);  // best of `repeats` n^3 products
double peak_tflops(Device device);

}  // namespace tessera::kernels
