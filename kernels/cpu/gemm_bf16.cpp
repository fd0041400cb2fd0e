// GEMM with bf16 inputs on the CPU (cpu_ops.h): a and b rounded to bf16 (nearest even), products
// accumulated in fp32. CPUs with AVX512-BF16 (or AMX) run oneDNN's bf16 matmul primitive
// (onednn_matmul.h) on the rounded copies; other CPUs (or TESSERA_CPU_GEMM=blas) run the fp32
// gemm on the rounded values, the same products (a bf16 x bf16 product is exact in fp32) summed
// in another order. The rounded copies live in buffers of the
// calling thread that grow to the largest GEMM and are then reused, so a step allocates nothing;
// an operand whose bf16 copy the caller passes (mixed precision's rounded weights) is not rounded.
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/gemm_bf16_operands.h"
#include "kernels/cpu/onednn_matmul.h"

namespace tessera::kernels::cpu {
namespace {

// The calling thread's buffers for the rounded inputs (grow-only). Plain vectors, outside the
// tracked allocator and the memory plan: on the oneDNN path they hold the step's largest
// activation and gradient operands in bf16 (the logits' gradient: rows x vocab x 2 bytes).
struct RoundedInputs {
  std::vector<uint16_t> a, b;  // bf16 bits, for oneDNN
  std::vector<float> a32, b32;  // the same values as floats, for the emulated path
};
RoundedInputs& rounded_inputs() {
  thread_local RoundedInputs buffers;
  return buffers;
}

template <typename T>
T* at_least(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// x's bf16 bits: its copy when the caller gave one, else rounded into buffer.
const uint16_t* rounded_bits(std::vector<uint16_t>& buffer, const float* x, const uint16_t* copy, int64_t n) {
  if (copy) return copy;
  uint16_t* out = at_least(buffer, n);
  f32_to_bf16(out, x, n);
  return out;
}

const float* rounded_values(std::vector<uint16_t>& bits, std::vector<float>& buffer, const float* x,
                            const uint16_t* copy, int64_t n) {
  float* out = at_least(buffer, n);
  bf16_to_f32(out, rounded_bits(bits, x, copy, n), n);
  return out;
}

}  // namespace

#ifdef TESSERA_HAVE_ONEDNN
bool gemm_bf16_on_onednn() {
  static const bool yes = std::strcmp(gemm_library_name(), "oneDNN") == 0 && onednn_has_bf16_dot_products();
  return yes;
}
#else
bool gemm_bf16_on_onednn() { return false; }
#endif

const uint16_t* gemm_bf16_operand(int which, const float* x, const uint16_t* copy, int64_t n) {
  RoundedInputs& r = rounded_inputs();
  return rounded_bits(which == 0 ? r.a : r.b, x, copy, n);
}

const char* gemm_bf16_path() {
  return gemm_bf16_on_onednn() ? "oneDNN bf16 matmul" : "fp32 GEMM of bf16-rounded inputs (no AVX512-BF16 in use)";
}

void gemm_bf16_emulated(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                        const uint16_t* a_bits, const float* b, const uint16_t* b_bits, float beta, float* c) {
  RoundedInputs& r = rounded_inputs();
  const float* a_rounded = rounded_values(r.a, r.a32, a, a_bits, m * k);
  const float* b_rounded = rounded_values(r.b, r.b32, b, b_bits, k * n);
  gemm(trans_a, trans_b, m, n, k, alpha, a_rounded, b_rounded, beta, c);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               const uint16_t* a_bits, const float* b, const uint16_t* b_bits, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0 || !gemm_bf16_on_onednn())
    return gemm_bf16_emulated(trans_a, trans_b, m, n, k, alpha, a, a_bits, b, b_bits, beta, c);
#ifdef TESSERA_HAVE_ONEDNN
  a_bits = gemm_bf16_operand(0, a, a_bits, m * k);
  b_bits = gemm_bf16_operand(1, b, b_bits, k * n);
  if (!onednn_matmul(trans_a, trans_b, m, n, k, alpha, a_bits, b_bits, true, beta, c))
    gemm_bf16_emulated(trans_a, trans_b, m, n, k, alpha, a, a_bits, b, b_bits, beta, c);
#endif
}

void gemm_batched_bf16(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, const float* b, float beta, float* c) {
  for (int64_t i = 0; i < batch; ++i)
    gemm_bf16(trans_a, trans_b, m, n, k, alpha, a + i * m * k, nullptr, b + i * k * n, nullptr, beta, c + i * m * n);
}

}  // namespace tessera::kernels::cpu
