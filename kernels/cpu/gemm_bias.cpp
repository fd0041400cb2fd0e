// A linear layer's forward on the CPU (cpu_ops.h, the twin of kernels/cuda/gemm_bias.cpp): the
// bias added in the epilogue of oneDNN's matmul primitive where the GEMMs run on oneDNN (with pre,
// the GELU follows in one pass over the output); else the unfused ops: the bias broadcast into the
// output rows and the GEMM accumulated onto them, or (with pre) the GEMM, then bias + GELU in one
// pass (bias_gelu_forward).
#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/gemm_bf16_operands.h"
#include "kernels/cpu/onednn_matmul.h"

namespace tessera::kernels::cpu {
namespace {

// y = a w^T + bias through oneDNN; false where the GEMMs do not run there (or its cache is full).
bool onednn_gemm_bias(int64_t m, int64_t n, int64_t k, const float* a, const uint16_t* a_bits, const float* w,
                      const uint16_t* w_bits, const float* bias, bool bf16, float* y) {
#ifdef TESSERA_HAVE_ONEDNN
  if (bf16) {
    if (!gemm_bf16_on_onednn()) return false;
    return onednn_matmul(false, true, m, n, k, 1.0f, gemm_bf16_operand(0, a, a_bits, m * k),
                         gemm_bf16_operand(1, w, w_bits, n * k), true, 0.0f, y, bias);
  }
  if (std::strcmp(gemm_library_name(), "oneDNN") != 0) return false;
  return onednn_matmul(false, true, m, n, k, 1.0f, a, w, false, 0.0f, y, bias);
#else
  (void)m, (void)n, (void)k, (void)a, (void)a_bits, (void)w, (void)w_bits, (void)bias, (void)bf16, (void)y;
  return false;
#endif
}

}  // namespace

void gemm_bias(int64_t m, int64_t n, int64_t k, const float* a, const uint16_t* a_bits, const float* w,
               const uint16_t* w_bits, const float* bias, bool bf16, float* pre, float* out) {
  if (m == 0 || n == 0) return;
  if (bf16 && gemm_bf16_on_onednn()) {  // rounded once, for oneDNN or (its cache full) the fallback
    a_bits = gemm_bf16_operand(0, a, a_bits, m * k);
    w_bits = gemm_bf16_operand(1, w, w_bits, n * k);
  }
  if (k > 0 && onednn_gemm_bias(m, n, k, a, a_bits, w, w_bits, bias, bf16, pre ? pre : out)) {
    if (pre) gelu_forward(out, pre, m * n);
    return;
  }
  const auto product = [&](float beta, float* c) {
    if (bf16) gemm_bf16(false, true, m, n, k, 1.0f, a, a_bits, w, w_bits, beta, c);
    else gemm(false, true, m, n, k, 1.0f, a, w, beta, c);
  };
  if (pre) {
    product(0.0f, pre);
    bias_gelu_forward(out, pre, bias, m, n);
  } else {
    broadcast_rows(out, bias, m, n);
    product(1.0f, out);
  }
}

}  // namespace tessera::kernels::cpu
