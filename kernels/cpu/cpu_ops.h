// CPU kernels behind kernels/ops.h, on raw pointers: oneDNN or BLAS for GEMM, OpenMP + SIMD loops for the
// rest. Each one has a CUDA twin of the same name in kernels/cuda/cuda_ops.h.
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace tessera::kernels::cpu {

// "oneDNN" or "BLAS": the library gemm runs on (TESSERA_CPU_GEMM=blas|onednn chooses; oneDNN
// when the build has it), and the one a setting of TESSERA_CPU_GEMM would choose (throws naming
// a bad setting, or onednn in a build without oneDNN).
const char* gemm_library_name();
const char* gemm_library_for(const char* setting);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c);
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  float alpha, const float* a, const float* b, float beta, float* c);
// The same with a and b rounded to bf16 and the products accumulated in fp32 (ops.h,
// MatmulInputs::bf16): oneDNN's bf16 matmul where the CPU has AVX512-BF16 or AMX, else the
// emulated path, an fp32 gemm of the rounded values. a_bits / b_bits: the operand's bf16 copy
// when the caller has one (ops::Operand::bf16), else nullptr. gemm_bf16_path() names the path.
const char* gemm_bf16_path();
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               const uint16_t* a_bits, const float* b, const uint16_t* b_bits, float beta, float* c);
void gemm_batched_bf16(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, const float* a, const float* b, float beta, float* c);
// out[m, n] = a[m, k] @ w[n, k]^T + bias[n]; with pre, pre = that and out = gelu(pre): a linear
// layer's forward (ops::linear_forward), the twin of the CUDA one (cuBLASLt's epilogues). The
// bias in oneDNN's matmul epilogue where the GEMMs run on oneDNN; else broadcast_rows and a GEMM
// with beta = 1, or (with pre) a GEMM and bias_gelu_forward. bf16: the inputs in bf16 as
// gemm_bf16 (a_bits, w_bits: given copies or nullptr).
void gemm_bias(int64_t m, int64_t n, int64_t k, const float* a, const uint16_t* a_bits, const float* w,
               const uint16_t* w_bits, const float* bias, bool bf16, float* pre, float* out);
void gemm_bf16_emulated(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, const uint16_t* a_bits, const float* b, const uint16_t* b_bits, float beta,
                        float* c);

void add(float* out, const float* a, const float* b, int64_t n);
void add_inplace(float* acc, const float* x, int64_t n);
void scale_inplace(float* x, float s, int64_t n);
void broadcast_rows(float* out, const float* bias, int64_t rows, int64_t cols);
void bias_backward(float* dbias, const float* dout, int64_t rows, int64_t cols);
void gelu_forward(float* out, const float* inp, int64_t n);
void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t rows, int64_t cols);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
double sum_squares(const float* x, int64_t n);
// x rounded to bf16 in place (as round_bf16_inplace), returning sum_squares of the rounded values.
double round_bf16_inplace_sum_squares(float* x, int64_t n);
void f32_to_bf16(uint16_t* out, const float* inp, int64_t n);
void bf16_to_f32(float* out, const uint16_t* inp, int64_t n);
void f32_to_f16(uint16_t* out, const float* inp, int64_t n);
void f16_to_f32(float* out, const uint16_t* inp, int64_t n);
void round_bf16_inplace(float* x, uint16_t* bits, int64_t n);  // bits may be null
void round_f16_inplace(float* x, uint16_t* bits, int64_t n);

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t rows, int64_t cols, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t rows,
                        int64_t cols);
// Columns split across ranks: inp [rows, cols] is a block of total_cols columns (ops.h).
void layernorm_split_row_sums(float* sums, const float* inp, int64_t rows, int64_t cols);
void layernorm_split_centered_squares(float* sums, const float* inp, const float* row_sums, int64_t rows,
                                      int64_t cols, int64_t total_cols);
void layernorm_split_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                             const float* bias, const float* row_sums, const float* squares, int64_t rows,
                             int64_t cols, int64_t total_cols, float eps);
void layernorm_split_backward_sums(float* sums, const float* dout, const float* inp, const float* weight,
                                   const float* mean, const float* rstd, int64_t rows, int64_t cols);
void layernorm_split_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, const float* sums,
                              int64_t rows, int64_t cols, int64_t total_cols);

// Llama's layers (rmsnorm.cpp, rope.cpp, swiglu.cpp), as the ops of the same names.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t rows, int64_t cols,
                     float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t rows, int64_t cols);
using ops::RopeShape;
void rope_pack_forward(float* qkv, const float* q, const float* k, const float* v, const RopeShape& shape);
void rope_pack_backward(float* dq, float* dk, float* dv, const float* dqkv, const RopeShape& shape);
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n);

void attention_forward(float* out, float* lse, const float* qkv, int64_t batch, int64_t seq,
                       int64_t heads, int64_t head_dim);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim);
// Attention of a query block against a key/value block (attention_block.cpp), heads inside each
// row: query row t of batch b at q + (b * tq + t) * q_stride, its head h at + h * head_dim; k, v
// (and dk, dv) rows likewise with kv_stride; dq with q_stride; out, dout [B, Tq, H, D] dense;
// lse [B, H, Tq]. Semantics (causal, merge, accumulation) as ops::attention_block_forward/backward.
struct AttentionBlockShape {
  int64_t batch, tq, tk, heads, head_dim, q_stride, kv_stride;
  bool causal;
};
void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttentionBlockShape& shape, bool merge);
void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const AttentionBlockShape& shape);

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

// A vision transformer's tokens (patches.cpp) and classifier loss (classifier_xent.cpp), as the ops
// of the same names.
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

}  // namespace tessera::kernels::cpu
