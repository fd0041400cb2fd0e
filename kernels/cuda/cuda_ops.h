// CUDA twins of kernels/cpu/cpu_ops.h, same names and arguments, pointers in device memory:
// cuBLAS(Lt) for GEMM, own kernels for the rest. Queued on op_stream() (cuda_check.h),
// asynchronous to callers except where a value comes back to the host.
#pragma once
#include <cstdint>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"

namespace tessera::kernels::cuda {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c);
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  float alpha, const float* a, const float* b, float beta, float* c);
// a and b rounded to bf16 (or their given bf16 copies), fp32 accumulation: cuBLAS's bf16
// tensor-core GEMM (CUBLAS_COMPUTE_32F).
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               const uint16_t* a_bits, const float* b, const uint16_t* b_bits, float beta, float* c);
void gemm_batched_bf16(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, const float* a, const float* b, float beta, float* c);
// out[m, n] = a[m, k] @ w[n, k]^T + bias[n]; with pre, pre = that and out = gelu(pre): one
// cuBLASLt GEMM with a BIAS (GELU_AUX_BIAS) epilogue; gemm + broadcast_rows (bias_gelu_forward)
// where cuBLASLt has no algorithm for it, the bias or pre is not 16-byte aligned, k is 0, or (with
// GELU) n is not a multiple of 8. bf16: the inputs in bf16 as gemm_bf16 (a_bits, w_bits: given
// copies or nullptr). The CPU twin is cpu::gemm_bias (kernels/cpu/gemm_bias.cpp).
void gemm_bias(int64_t m, int64_t n, int64_t k, const float* a, const uint16_t* a_bits, const float* w,
               const uint16_t* w_bits, const float* bias, bool bf16, float* pre, float* out);
// How many gemm_bias calls took the fallback so far (the tests check which path ran).
int64_t gemm_bias_fallbacks();

void add(float* out, const float* a, const float* b, int64_t n);
void add_inplace(float* acc, const float* x, int64_t n);
void scale_inplace(float* x, float s, int64_t n);
void broadcast_rows(float* out, const float* bias, int64_t rows, int64_t cols);
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t cols);
void gelu_forward(float* out, const float* inp, int64_t n);
void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t rows, int64_t cols);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
double sum_squares(const float* x, int64_t n);
double round_bf16_inplace_sum_squares(float* x, int64_t n);  // rounds x, returns the rounded values' sum_squares
void f32_to_bf16(uint16_t* out, const float* inp, int64_t n);
void bf16_to_f32(float* out, const uint16_t* inp, int64_t n);
void f32_to_f16(uint16_t* out, const float* inp, int64_t n);
void f16_to_f32(float* out, const uint16_t* inp, int64_t n);
void round_bf16_inplace(float* x, uint16_t* bits, int64_t n);  // bits may be null
void round_f16_inplace(float* x, uint16_t* bits, int64_t n);

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t rows, int64_t cols, float eps);
// sum = a + b (the residual stream), then out = layernorm(sum) as layernorm_forward, in one kernel
// (each row normalised as it is summed; sum may alias a or b). The CPU twin is add then
// layernorm_forward (ops::add_layernorm_forward's CPU path).
void add_layernorm_forward(float* sum, float* out, float* mean, float* rstd, const float* a, const float* b,
                           const float* weight, const float* bias, int64_t rows, int64_t cols, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t rows,
                        int64_t cols);

void attention_forward(float* out, float* lse, const float* qkv, int64_t batch, int64_t seq,
                       int64_t heads, int64_t head_dim);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim);
// The same on the tensor cores (attention_mma.cu): the score and output products take bf16 inputs
// and sum in fp32 (ops.cpp runs these when the caller asks for bf16 inputs); the CPU twin is the fp32 kernel,
// which the tests hold them to at bf16's tolerance.
void attention_forward_bf16(float* out, float* lse, const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                            int64_t head_dim);
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             int64_t batch, int64_t seq, int64_t heads, int64_t head_dim);
// Attention of a query block against a key/value block (attention_block.cu), shaped as its CPU twin's
// (cpu::AttentionBlockShape); head_dim up to 128.
void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const cpu::AttentionBlockShape& shape, bool merge);
void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse,
                              const cpu::AttentionBlockShape& shape);

// wte_bits, when given, is the table's bf16 copy (an fp32 table's copy its caller passes, ops::
// Operand::bf16): the rows are read from it, as the table rounded to bf16.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const uint16_t* wte_bits,
                       const float* wpe, int64_t batch, int64_t seq, int64_t vocab_rows, int64_t channels,
                       int64_t vocab_start);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t batch, int64_t seq, int64_t vocab_rows, int64_t channels,
                        int64_t vocab_start);

void softmax_xent_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                          int64_t rows, int64_t padded_vocab, int64_t valid_vocab);
void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* targets,
                           const float* lse, int64_t rows, int64_t padded_vocab, int64_t valid_vocab,
                           float scale, int64_t vocab_start);
void softmax_xent_row_max(float* row_max, const float* logits, int64_t rows, int64_t padded_vocab,
                          int64_t valid_vocab);
void softmax_xent_partial(float* sums, const float* logits, const int32_t* targets, const float* max,
                          int64_t rows, int64_t padded_vocab, int64_t valid_vocab, int64_t vocab_start,
                          int64_t vocab);

// A vision transformer's tokens (patches.cu) and classifier loss (classifier_xent.cu), as the ops of
// the same names.
void image_to_patches(float* patches, const float* images, int64_t batch, int64_t height, int64_t width,
                      int64_t channels, int64_t patch);
void image_tokens_forward(float* out, const float* proj, const float* cls, const float* pos, int64_t batch,
                          int64_t patches, int64_t channels);
void image_tokens_backward(float* dproj, float* dcls, float* dpos, const float* dout, int64_t batch,
                           int64_t patches, int64_t channels);
void token_pool_forward(float* pooled, const float* x, int64_t batch, int64_t tokens, int64_t channels, bool mean);
void token_pool_backward(float* dx, const float* dpooled, int64_t batch, int64_t tokens, int64_t channels,
                         bool mean);
void classifier_xent_forward(float* losses, float* lse, const float* logits, const int32_t* labels, int64_t rows,
                             int64_t classes, float smoothing);
void classifier_xent_backward(float* dlogits, const float* logits, const int32_t* labels, const float* lse,
                              int64_t rows, int64_t classes, float smoothing, float scale);

void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
           const ops::AdamWArgs& args);
void adamw_spans(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const ops::AdamWSpan* spans,
                 int64_t count, const ops::AdamWArgs& args, uint16_t* param_bits);  // bits may be null

}  // namespace tessera::kernels::cuda
