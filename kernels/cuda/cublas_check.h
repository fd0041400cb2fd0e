// The check that turns a failed cuBLAS or cuBLASLt call into tessera::Error naming the call
// (the two libraries share cublasStatus_t).
#pragma once
#include <cublas_v2.h>

#include "core/error.h"

namespace tessera::kernels::cuda {

inline void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLAS ", call, " failed: ", cublasGetStatusName(status), ": ", cublasGetStatusString(status));
}
#define TESSERA_CUBLAS_CHECK(call) ::tessera::kernels::cuda::check_cublas((call), #call)

}  // namespace tessera::kernels::cuda
