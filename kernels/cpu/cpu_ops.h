// CPU kernels behind kernels/ops.h, on raw pointers: oneDNN or BLAS for GEMM, OpenMP + SIMD loops for
// the rest. Declared from the one list, kernels/op_list.h (what each kernel does is written there),
// each in kernels/cpu/<file>.cpp; an op the list gives to CUDA too has a twin of the same name in
// kernels/cuda/cuda_ops.h.
#pragma once
#include <cstdint>

#include "kernels/op_devices.h"
#include "kernels/ops.h"

namespace tessera::kernels::cpu {

using kernels::AdamWArgs;
using kernels::AdamWSpan;
using kernels::AttentionBlockShape;
using kernels::QuantMatrixView;
using kernels::RopeShape;

#define TESSERA_OP(file, name, devices, ret, params) TESSERA_OP_ON_CPU_##devices(ret name params;)
#include "kernels/op_list.h"
#undef TESSERA_OP

// The CPU build, not ops: "oneDNN" or "BLAS", the library gemm runs on (TESSERA_CPU_GEMM=blas|onednn
// chooses; oneDNN when the build has it), and the one a setting of TESSERA_CPU_GEMM would choose
// (throws naming a bad setting, or onednn in a build without oneDNN); the path gemm_bf16 takes.
const char* gemm_library_name();
const char* gemm_library_for(const char* setting);
const char* gemm_bf16_path();

}  // namespace tessera::kernels::cpu
