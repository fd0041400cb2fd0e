// Vectorisable math shared by the CPU kernels (defined in simd_exp.cpp).
#pragma once

namespace tessera::kernels::cpu {

// expf within 2 ulp that OpenMP can call from `omp simd` loops; results below exp(-87) are 0.
#pragma omp declare simd notinbranch
float simd_exp(float x);

}  // namespace tessera::kernels::cpu
