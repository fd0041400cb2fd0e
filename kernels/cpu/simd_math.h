// Vectorisable math shared by the CPU kernels (defined in simd_exp.cpp), compiled with each per-ISA
// copy of them (isa.h), so a copy's vector and scalar calls run code of its own instruction set.
#pragma once

#include "kernels/cpu/isa.h"

namespace tessera::kernels::cpu::TESSERA_ISA {

// expf within 2 ulp that OpenMP can call from `omp simd` loops; results below exp(-87) are 0.
#pragma omp declare simd notinbranch
float simd_exp(float x);

}  // namespace tessera::kernels::cpu::TESSERA_ISA
