// CUDA twins of kernels/cpu/cpu_ops.h, same names and arguments, pointers in device memory:
// cuBLAS(Lt) for GEMM, own kernels for the rest, each in kernels/cuda/<file>.cu (or .cpp).
// Declared from the one list, kernels/op_list.h (what each kernel does is written there). Queued on
// op_stream() (cuda_check.h), asynchronous to callers except where a value comes back to the host.
#pragma once
#include <cstdint>

#include "kernels/op_devices.h"
#include "kernels/ops.h"

namespace tessera::kernels::cuda {

#define TESSERA_OP(file, name, devices, ret, params) TESSERA_OP_ON_CUDA_##devices(ret name params;)
#include "kernels/op_list.h"
#undef TESSERA_OP

// How many gemm_bias calls took the fallback so far (the tests check which path ran).
int64_t gemm_bias_fallbacks();

}  // namespace tessera::kernels::cuda
