// The FLOP rate MFU is measured against, for the run's precision: on CPU, this machine's GEMM rate
// measured once in process (sgemm, or the bf16-input GEMM for bf16 runs; the library and thread
// count as configured); on CUDA, the device's peak from its architecture, SM count and clock (the
// tensor cores' dense bf16 rate for bf16 runs, the fp32 rate otherwise), or none for a device not
// in the table (then MFU is not reported).
#pragma once
#include <optional>

#include "core/dtype.h"

namespace tessera::kernels {

double measure_sgemm_tflops(int64_t n = 1024, int repeats = 3);       // best of `repeats` n^3 products
double measure_gemm_bf16_tflops(int64_t n = 1024, int repeats = 3);   // the same with bf16 inputs

// A GPU's peak in TFLOP/s from its compute capability, SM count and clock (GHz): per SM and clock,
// sm_80 (A100) 128 fp32 and 2048 dense bf16 tensor-core FLOPs, sm_90 (H100, H200) 256 and 4096.
// nullopt for other architectures (their rates are not in the table).
std::optional<double> gpu_peak_tflops(int major, int minor, int sms, double clock_ghz, bool bf16);

// The peak for a run on `device` whose GEMMs take bf16 inputs (bf16) or fp32 ones.
std::optional<double> peak_tflops(Device device, bool bf16);

}  // namespace tessera::kernels
