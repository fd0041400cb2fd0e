// Every raw kernel behind kernels/ops.h, declared once:
//
//   TESSERA_OP(file, name, devices, return type, (parameters))
//
// file: the source of the kernel, kernels/cpu/<file>.cpp on the CPU and kernels/cuda/<file>.cu (or
// .cpp) on CUDA, so twins share their file's name; devices: cpu_and_cuda, cpu_only or cuda_only.
// Pointers are in the memory of the kernel's device. From this list come the declarations of
// kernels/cpu/cpu_ops.h (namespace cpu) and kernels/cuda/cuda_ops.h (namespace cuda), the constants
// op_devices::<name> that kernels/ops.cpp's dispatch checks at compile time (an op dispatched to
// CUDA must be declared so, an op dispatched to the CPU alone must be cpu_only), and docs/ops.md,
// the op-by-device table (tests/tools/op_table.py writes it; the test unit.op_table fails when it
// is stale, when a file does not define its op, or when an op with a CUDA kernel has no twin test
// in tests/cuda/ calling it). How to add an op: docs/testing.md, "Kernels and their twins".
//
// No include guard: each reader defines TESSERA_OP, includes this file and undefines it
// (kernels/op_devices.h includes the types the parameters use). CUDA kernels are queued on
// op_stream() (cuda/cuda_check.h), asynchronous to callers except where a value comes back to the
// host.

// ---- GEMM ----------------------------------------------------------------------------------------
// c = alpha op(a) op(b) + beta c, row-major, fp32: oneDNN or BLAS on the CPU (cpu::gemm_library_name),
// cuBLAS without TF32 on CUDA. On the CPU call it in turn, never from several threads of ours side by
// side (it threads inside): oneDNN's matmul run so gave wrong blocks (test_kernels_quant_gemm_threads).
TESSERA_OP(gemm, gemm, cpu_and_cuda, void, (bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                             const float* a, const float* b, float beta, float* c))
TESSERA_OP(gemm, gemm_batched, cpu_and_cuda, void,
           (int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            const float* b, float beta, float* c))
// The same with a and b rounded to bf16 and the products accumulated in fp32 (ops.h,
// MatmulInputs::bf16). a_bits / b_bits: the operand's bf16 copy when the caller has one
// (ops::Operand::bf16), else nullptr. CPU: oneDNN's bf16 matmul where the CPU has AVX512-BF16 or
// AMX, else the emulated path (cpu::gemm_bf16_path names it). CUDA: cuBLAS's bf16 tensor-core
// GEMM (CUBLAS_COMPUTE_32F).
TESSERA_OP(gemm_bf16, gemm_bf16, cpu_and_cuda, void,
           (bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            const uint16_t* a_bits, const float* b, const uint16_t* b_bits, float beta, float* c))
TESSERA_OP(gemm_bf16, gemm_batched_bf16, cpu_and_cuda, void,
           (int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            const float* b, float beta, float* c))
// gemm_bf16's emulated path, an fp32 gemm of the rounded values (the reference the tests hold
// the bf16 GEMMs to).
TESSERA_OP(gemm_bf16, gemm_bf16_emulated, cpu_only, void,
           (bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            const uint16_t* a_bits, const float* b, const uint16_t* b_bits, float beta, float* c))
// out[m, n] = a[m, k] @ w[n, k]^T + bias[n]; with pre, pre = that and out = gelu(pre): a linear
// layer's forward (ops::linear_forward). bf16: the inputs in bf16 as gemm_bf16 (a_bits, w_bits:
// given copies or nullptr). CPU: the bias in oneDNN's matmul epilogue where the GEMMs run on
// oneDNN; else broadcast_rows and a GEMM with beta = 1, or (with pre) a GEMM and
// bias_gelu_forward. CUDA: one cuBLASLt GEMM with a BIAS (GELU_AUX_BIAS) epilogue; gemm +
// broadcast_rows (bias_gelu_forward) where cuBLASLt has no algorithm for it, the bias or pre is not
// 16-byte aligned, k is 0, or (with GELU) n is not a multiple of 8 (cuda::gemm_bias_fallbacks
// counts those).
TESSERA_OP(gemm_bias, gemm_bias, cpu_and_cuda, void,
           (int64_t m, int64_t n, int64_t k, const float* a, const uint16_t* a_bits, const float* w,
            const uint16_t* w_bits, const float* bias, bool bf16, float* pre, float* out))

// ---- Elementwise ops and reductions -------------------------------------------------------------
TESSERA_OP(elementwise, add, cpu_and_cuda, void, (float* out, const float* a, const float* b, int64_t n))
TESSERA_OP(elementwise, add_inplace, cpu_and_cuda, void, (float* acc, const float* x, int64_t n))
TESSERA_OP(elementwise, scale_inplace, cpu_and_cuda, void, (float* x, float s, int64_t n))
TESSERA_OP(elementwise, broadcast_rows, cpu_and_cuda, void,
           (float* out, const float* bias, int64_t rows, int64_t cols))
// dbias += column sums of dout [rows, cols] (deterministic).
TESSERA_OP(elementwise, bias_backward, cpu_and_cuda, void,
           (float* dbias, const float* dout, int64_t rows, int64_t cols))
// gelu: the tanh approximation.
TESSERA_OP(elementwise, gelu_forward, cpu_and_cuda, void, (float* out, const float* inp, int64_t n))
TESSERA_OP(elementwise, bias_gelu_forward, cpu_and_cuda, void,
           (float* out, float* pre, const float* bias, int64_t rows, int64_t cols))
TESSERA_OP(elementwise, gelu_backward, cpu_and_cuda, void,
           (float* dinp, const float* inp, const float* dout, int64_t n))
// The sum of x[i]^2 in double, returned to the host (CUDA waits for it).
TESSERA_OP(elementwise, sum_squares, cpu_and_cuda, double, (const float* x, int64_t n))
// x rounded to bf16 in place (as round_bf16_inplace), returning sum_squares of the rounded values.
TESSERA_OP(elementwise, round_bf16_inplace_sum_squares, cpu_and_cuda, double, (float* x, int64_t n))

// ---- Casts (nearest even) -----------------------------------------------------------------------
TESSERA_OP(cast, f32_to_bf16, cpu_and_cuda, void, (uint16_t* out, const float* inp, int64_t n))
TESSERA_OP(cast, bf16_to_f32, cpu_and_cuda, void, (float* out, const uint16_t* inp, int64_t n))
TESSERA_OP(cast, f32_to_f16, cpu_and_cuda, void, (uint16_t* out, const float* inp, int64_t n))
TESSERA_OP(cast, f16_to_f32, cpu_and_cuda, void, (float* out, const uint16_t* inp, int64_t n))
// x rounded in place through the low precision; bits (may be null) keeps the low-precision bits.
TESSERA_OP(cast, round_bf16_inplace, cpu_and_cuda, void, (float* x, uint16_t* bits, int64_t n))
TESSERA_OP(cast, round_f16_inplace, cpu_and_cuda, void, (float* x, uint16_t* bits, int64_t n))

// ---- Layer norm ----------------------------------------------------------------------------------
TESSERA_OP(layernorm, layernorm_forward, cpu_and_cuda, void,
           (float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
            int64_t rows, int64_t cols, float eps))
// sum = a + b (the residual stream), then out = layernorm(sum) as layernorm_forward, in one kernel
// (each row normalised as it is summed; sum may alias a or b). On the CPU the fused loop measured no
// faster: ops::add_layernorm_forward runs add then layernorm_forward there, which the twin test
// compares with.
TESSERA_OP(layernorm, add_layernorm_forward, cuda_only, void,
           (float* sum, float* out, float* mean, float* rstd, const float* a, const float* b, const float* weight,
            const float* bias, int64_t rows, int64_t cols, float eps))
TESSERA_OP(layernorm, layernorm_backward, cpu_and_cuda, void,
           (float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
            const float* mean, const float* rstd, int64_t rows, int64_t cols))
// Columns split across ranks: inp [rows, cols] is a block of total_cols columns (ops.h).
TESSERA_OP(layernorm, layernorm_split_row_sums, cpu_only, void,
           (float* sums, const float* inp, int64_t rows, int64_t cols))
TESSERA_OP(layernorm, layernorm_split_centered_squares, cpu_only, void,
           (float* sums, const float* inp, const float* row_sums, int64_t rows, int64_t cols, int64_t total_cols))
TESSERA_OP(layernorm, layernorm_split_forward, cpu_only, void,
           (float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
            const float* row_sums, const float* squares, int64_t rows, int64_t cols, int64_t total_cols, float eps))
TESSERA_OP(layernorm, layernorm_split_backward_sums, cpu_only, void,
           (float* sums, const float* dout, const float* inp, const float* weight, const float* mean,
            const float* rstd, int64_t rows, int64_t cols))
TESSERA_OP(layernorm, layernorm_split_backward, cpu_only, void,
           (float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
            const float* mean, const float* rstd, const float* sums, int64_t rows, int64_t cols,
            int64_t total_cols))

// ---- Llama's layers, as the ops of the same names (CPU only until their CUDA twins run on a GPU) --
TESSERA_OP(rmsnorm, rmsnorm_forward, cpu_only, void,
           (float* out, float* rstd, const float* inp, const float* weight, int64_t rows, int64_t cols, float eps))
TESSERA_OP(rmsnorm, rmsnorm_backward, cpu_only, void,
           (float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, const float* rstd,
            int64_t rows, int64_t cols))
// Columns split across ranks (grid tensor parallelism): inp [rows, cols] is a block of total_cols columns (ops.h).
TESSERA_OP(rmsnorm, rmsnorm_split_squares, cpu_only, void, (float* sums, const float* inp, int64_t rows, int64_t cols))
TESSERA_OP(rmsnorm, rmsnorm_split_forward, cpu_only, void,
           (float* out, float* rstd, const float* inp, const float* weight, const float* squares, int64_t rows,
            int64_t cols, int64_t total_cols, float eps))
TESSERA_OP(rmsnorm, rmsnorm_split_backward_sums, cpu_only, void,
           (float* sums, const float* dout, const float* inp, const float* weight, const float* rstd, int64_t rows,
            int64_t cols))
TESSERA_OP(rmsnorm, rmsnorm_split_backward, cpu_only, void,
           (float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, const float* rstd,
            const float* sums, int64_t rows, int64_t cols, int64_t total_cols))
TESSERA_OP(rope, rope_pack_forward, cpu_only, void,
           (float* qkv, const float* q, const float* k, const float* v, const RopeShape& shape))
TESSERA_OP(rope, rope_pack_backward, cpu_only, void,
           (float* dq, float* dk, float* dv, const float* dqkv, const RopeShape& shape))
TESSERA_OP(swiglu, swiglu_forward, cpu_only, void, (float* out, const float* gate, const float* up, int64_t n))
TESSERA_OP(swiglu, swiglu_backward, cpu_only, void,
           (float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n))

// ---- Attention -----------------------------------------------------------------------------------
// Causal self-attention over qkv [B, T, 3C] (heads inside each row): out [B, T, C], lse [B, H, T].
// CUDA: a fused flash-attention-style kernel (online softmax over 64-key tiles); its backward
// recomputes P from lse (no atomics, deterministic). CPU: the block kernel with the whole sequence
// as its diagonal block.
TESSERA_OP(attention, attention_forward, cpu_and_cuda, void,
           (float* out, float* lse, const float* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim))
TESSERA_OP(attention, attention_backward, cpu_and_cuda, void,
           (float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t batch,
            int64_t seq, int64_t heads, int64_t head_dim))
// The same on the tensor cores: the score and output products take bf16 inputs and sum in fp32
// (ops.cpp runs these when the caller asks for bf16 inputs). Their CPU twin is the fp32 kernel,
// which the tests hold them to at bf16's tolerance.
TESSERA_OP(attention_mma, attention_forward_bf16, cuda_only, void,
           (float* out, float* lse, const float* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim))
TESSERA_OP(attention_mma, attention_backward_bf16, cuda_only, void,
           (float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t batch,
            int64_t seq, int64_t heads, int64_t head_dim))
// Attention of a query block against a key/value block, shaped by AttentionBlockShape
// (op_devices.h); CUDA takes head_dim up to 128.
TESSERA_OP(attention_block, attention_block_forward, cpu_and_cuda, void,
           (float* out, float* lse, const float* q, const float* k, const float* v, const AttentionBlockShape& shape,
            bool merge))
TESSERA_OP(attention_block, attention_block_backward, cpu_and_cuda, void,
           (float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
            const float* out, const float* lse, const AttentionBlockShape& shape))
// One query row (a decode step's, per slot and head) against n cached positions kv [n, 2 x
// head_dim], each position's key then its value (the KV cache's layout): out [head_dim] =
// softmax(q k^T / sqrt(head_dim)) v, the rows read once in order, no transposed tile.
TESSERA_OP(attention_decode, attention_decode_forward, cpu_only, void,
           (float* out, const float* q, const float* kv, int64_t n, int64_t head_dim))

// ---- Embedding and losses ------------------------------------------------------------------------
// wte_bits, when given, is the table's bf16 copy (an fp32 table's copy its caller passes, ops::
// Operand::bf16): the rows are read from it, as the table rounded to bf16.
TESSERA_OP(embedding, embedding_forward, cpu_and_cuda, void,
           (float* out, const int32_t* tokens, const float* wte, const uint16_t* wte_bits, const float* wpe,
            int64_t batch, int64_t seq, int64_t vocab_rows, int64_t channels, int64_t vocab_start))
TESSERA_OP(embedding, embedding_backward, cpu_and_cuda, void,
           (float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t batch, int64_t seq,
            int64_t vocab_rows, int64_t channels, int64_t vocab_start))
// Softmax cross-entropy over a padded vocabulary, possibly split across ranks (ops.h).
TESSERA_OP(softmax_xent, softmax_xent_forward, cpu_and_cuda, void,
           (float* losses, float* lse, const float* logits, const int32_t* targets, int64_t rows,
            int64_t padded_vocab, int64_t valid_vocab))
TESSERA_OP(softmax_xent, softmax_xent_backward, cpu_and_cuda, void,
           (float* dlogits, const float* logits, const int32_t* targets, const float* lse, int64_t rows,
            int64_t padded_vocab, int64_t valid_vocab, float scale, int64_t vocab_start))
TESSERA_OP(softmax_xent, softmax_xent_row_max, cpu_and_cuda, void,
           (float* row_max, const float* logits, int64_t rows, int64_t padded_vocab, int64_t valid_vocab))
TESSERA_OP(softmax_xent, softmax_xent_partial, cpu_and_cuda, void,
           (float* sums, const float* logits, const int32_t* targets, const float* max, int64_t rows,
            int64_t padded_vocab, int64_t valid_vocab, int64_t vocab_start, int64_t vocab))

// ---- A vision transformer's tokens and classifier loss, as the ops of the same names --------------
TESSERA_OP(patches, image_to_patches, cpu_and_cuda, void,
           (float* patches, const float* images, int64_t batch, int64_t height, int64_t width, int64_t channels,
            int64_t patch))
TESSERA_OP(patches, image_tokens_forward, cpu_and_cuda, void,
           (float* out, const float* proj, const float* cls, const float* pos, int64_t batch, int64_t patches,
            int64_t channels))
TESSERA_OP(patches, image_tokens_backward, cpu_and_cuda, void,
           (float* dproj, float* dcls, float* dpos, const float* dout, int64_t batch, int64_t patches,
            int64_t channels))
TESSERA_OP(patches, token_pool_forward, cpu_and_cuda, void,
           (float* pooled, const float* x, int64_t batch, int64_t tokens, int64_t channels, bool mean))
TESSERA_OP(patches, token_pool_backward, cpu_and_cuda, void,
           (float* dx, const float* dpooled, int64_t batch, int64_t tokens, int64_t channels, bool mean))
TESSERA_OP(classifier_xent, classifier_xent_forward, cpu_and_cuda, void,
           (float* losses, float* lse, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
            float smoothing))
TESSERA_OP(classifier_xent, classifier_xent_backward, cpu_and_cuda, void,
           (float* dlogits, const float* logits, const int32_t* labels, const float* lse, int64_t rows,
            int64_t classes, float smoothing, float scale))

// ---- Quantised weights (inference; CPU only until CUDA twins have run on a GPU) --------------------
// w [rows, cols] to a QuantMatrixView's q, scales (and zeros for bits 4), round to nearest, per
// group (docs/checkpoints.md): int8 symmetric (scale = max |w| / 127), int4 with a zero point over
// [min(w, 0), max(w, 0)] (scale = range / 15). bf16_scales: each scale rounded up to a bf16 value
// (kept as f32) before the group is quantised, so it stores exactly as bf16. Every element
// dequantises to within half its group's scale.
TESSERA_OP(quant_pack, quantize_weights, cpu_only, void,
           (uint8_t* q, float* scales, uint8_t* zeros, const float* w, int64_t rows, int64_t cols, int64_t group,
            int bits, bool bf16_scales))
// w [rows, cols] = the dequantised weights (the reference the matmul kernels are held to).
TESSERA_OP(quant_pack, dequantize_weights, cpu_only, void, (float* w, const QuantMatrixView& q))
// y[rows] = W x for one activation row x[cols] (decode), W dequantised in registers; AVX-512 or a
// portable path (kernels/cpu/quant_paths.h), OpenMP threads over output rows. Within f32 rounding of
// the product of x and dequantize_weights' W: |y - x.w| <= (gamma_K + u) sum |x_k w_k| (the AVX-512
// int8 path applies each group's scale to its sum; the others use W's values themselves).
TESSERA_OP(quant_gemv, quant_gemv, cpu_only, void, (float* y, const float* x, const QuantMatrixView& w))
// y[m, rows] = x[m, cols] W^T (prefill, batched decode), the same contract: under 4 rows tiles of
// m x 4 rows; from 4 rows blocks of W dequantised once into f32 panels, multiplied by gemm.
TESSERA_OP(quant_gemm, quant_gemm, cpu_only, void,
           (float* y, const float* x, int64_t m, const QuantMatrixView& w))

// ---- Optimizer -----------------------------------------------------------------------------------
TESSERA_OP(adamw, adamw, cpu_and_cuda, void,
           (float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWArgs& args))
// param_bits may be null.
TESSERA_OP(adamw, adamw_spans, cpu_and_cuda, void,
           (float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const AdamWSpan* spans, int64_t count,
            const AdamWArgs& args, uint16_t* param_bits))
