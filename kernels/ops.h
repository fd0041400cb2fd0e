// The one dispatch header for compute: every op takes Tensors, checks shapes, dtypes and devices,
// and runs the CPU kernel (kernels/cpu) or its CUDA twin (kernels/cuda) by the tensors' device.
// Conventions: row-major; "[N, C]" means a tensor viewed as N rows of C (leading dims flattened);
// gradients named "accumulate" are added to (+=), the others are overwritten.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace tessera::ops {

// ---- GEMM ----------------------------------------------------------------------------------
// What a GEMM multiplies is its caller's choice, passed with each call; nothing process-wide
// changes it. MatmulInputs::f32 multiplies the f32 values. MatmulInputs::bf16 rounds both inputs
// to bf16 (nearest even) and accumulates the products in fp32, on either device: on CPUs with
// AVX512-BF16 or AMX through oneDNN's bf16 matmul (twice the fp32 rate), elsewhere as an fp32 GEMM
// of the rounded values (the same numbers up to summation order); on CUDA through cuBLAS's bf16
// tensor-core GEMM. Mixed precision's layers ask for bf16 (nn::ParamStore::matmul_inputs).
enum class MatmulInputs { f32, bf16 };

// A GEMM operand: its f32 values and, when the caller already holds it, their bf16 rounding
// (bits: one bf16 element per element of values, on values' device), which GEMMs with bf16 inputs
// read instead of rounding the values again: a weight's copy owned by the parameter store
// (nn::ParamStore::operand), or a RoundedOperand. The caller vouches that the bits are the values'
// rounding and keeps both unchanged while the op runs. A plain Tensor is an operand without bits;
// under f32 inputs the bits are not read.
struct Operand {
  Tensor values;
  const uint16_t* bf16 = nullptr;
  Operand(const Tensor& v) : values(v) {}  // NOLINT(google-explicit-constructor): a tensor is an operand
  // bits: a bf16 tensor of at least values' size on values' device (checked; its first elements).
  Operand(const Tensor& v, const Tensor& bits);
  Operand(const Tensor& v, const uint16_t* bits) : values(v), bf16(bits) {}  // unchecked (the pieces above)
  // Elements [first, first + shape.numel()) of the values (as Tensor::slice), with their bits.
  Operand slice(int64_t first, Shape shape) const { return {values.slice(first, shape), bf16 ? bf16 + first : nullptr}; }
};

// c[M, N] = alpha * op(a) @ op(b) + beta * c, op(x) = x or x^T; a, b, c viewed as matrices
// [numel / last_dim, last_dim]; inputs: as above.
void matmul(const Operand& a, bool trans_a, const Operand& b, bool trans_b, Tensor& c, float alpha = 1.0f,
            float beta = 0.0f, MatmulInputs inputs = MatmulInputs::f32);
// The same for `batch` independent products, each tensor [batch, rows, cols].
void matmul_batched(int64_t batch, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                    float alpha = 1.0f, float beta = 0.0f, MatmulInputs inputs = MatmulInputs::f32);

// y = x @ w^T + bias (a linear layer's forward: x [N, K], w [C, K], bias [C], y [N, C]); with pre,
// pre = that and y = gelu(pre) (the MLP's first layer, pre kept for gelu_backward). The bias in the
// GEMM's epilogue: on the CPU oneDNN's matmul primitive (then the GELU in one pass), on CUDA one
// cuBLASLt GEMM with the bias (and GELU) fused; where neither runs, broadcast_rows + matmul (matmul
// + bias_gelu_forward with pre). Multiplies as matmul does under `inputs`. Timed as one GEMM
// ("gemm_bias"), the GELU included.
void linear_forward(Tensor& y, const Operand& x, const Operand& w, const Tensor& bias, Tensor* pre = nullptr,
                    MatmulInputs inputs = MatmulInputs::f32);

// An operand that several GEMMs read, rounded to bf16 once for all of them (a linear layer's
// output gradient feeds its weight product and its input product): while this object lives,
// operand() is x with that rounding. The same numbers as rounding x in each GEMM; the caller keeps
// x unchanged meanwhile. Under f32 inputs, or with TESSERA_SHARED_BF16_OPERANDS=0 (an A/B switch),
// nothing is rounded and operand() is x alone. The bits live outside the tracked allocator, as
// gemm_bf16's own rounded operands: on the CPU in a buffer lent by a pool of grow-only buffers kept
// for reuse, on CUDA in memory from the stream-ordered pool.
class RoundedOperand {
 public:
  RoundedOperand(const Tensor& x, MatmulInputs inputs);
  ~RoundedOperand();
  RoundedOperand(const RoundedOperand&) = delete;
  RoundedOperand& operator=(const RoundedOperand&) = delete;
  const Operand& operand() const { return operand_; }
  operator const Operand&() const { return operand_; }  // NOLINT(google-explicit-constructor)

 private:
  struct DeviceBits;
  Operand operand_;
  std::vector<uint16_t> host_bits_;          // CPU: borrowed from the pool, given back on destruction
  std::unique_ptr<DeviceBits> device_bits_;  // CUDA: the pool memory of the copy
};

// ---- elementwise and reductions -------------------------------------------------------------
void add(Tensor& out, const Tensor& a, const Tensor& b);       // out = a + b (residual)
void add_inplace(Tensor& acc, const Tensor& x);                // acc += x
void scale_inplace(Tensor& x, float s);                        // x *= s
void broadcast_rows(Tensor& out, const Tensor& bias);          // out[n, :] = bias (bias [C])
void bias_backward(Tensor& dbias, const Tensor& dout);         // dbias[C] += sum_n dout[n, :] (accumulate)
void gelu_forward(Tensor& out, const Tensor& inp);             // tanh approximation
// pre[n, :] += bias, then out = gelu(pre): a linear layer's bias and its activation in one pass over
// the GEMM's output (pre keeps the biased value gelu_backward needs).
void bias_gelu_forward(Tensor& out, Tensor& pre, const Tensor& bias);
void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout);  // dinp may alias dout
double sum_squares(const Tensor& x);                           // sum x^2 in double
// values (f32) rounded to bf16 in place, as round_inplace does, returning the rounded values'
// sum_squares: one pass where the two take two (mixed precision's gradients and their norm).
double round_bf16_inplace_sum_squares(Tensor& values);
void cast(Tensor& out, const Tensor& inp);                     // f32 <-> bf16/f16 (round to nearest even)
// values (f32) rounded in place to what storage (bf16 or f16) holds, as cast there and back would;
// bits, when defined (storage dtype, at least values' size), also receives the low-precision bits.
void round_inplace(Tensor& values, DType storage, Tensor bits = Tensor());

// ---- layernorm --------------------------------------------------------------------------------
// out = (inp - mean) * rstd * weight + bias per row of [N, C]; saves mean[N], rstd[N].
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, float eps = 1e-5f);
// sum = a + b (the residual stream), then out = layernorm(sum): on CUDA one kernel (each row
// normalised as it is summed), on the CPU add then layernorm_forward (a fused loop measured no
// faster there). The same numbers either way up to the device's rounding; sum may alias a or b.
void add_layernorm_forward(Tensor& sum, Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& a, const Tensor& b,
                           const Tensor& weight, const Tensor& bias, float eps = 1e-5f);
// dinp, dweight, dbias: accumulate.
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd);

// ---- layernorm over columns split across ranks (2D/2.5D/3D tensor parallelism) ----------------
// Each rank holds inp [N, Cl], a block of the C = total_cols columns. The row statistics need sums
// over every rank's columns: the caller all-reduces (sums) `sums` between the calls. Two passes like
// layernorm_forward: mean first, then the centred squares. CPU only: a CUDA tensor throws.
void layernorm_split_row_sums(Tensor& sums, const Tensor& inp);   // sums [N] = sum_c inp[n, c] (overwritten)
void layernorm_split_centered_squares(Tensor& sums, const Tensor& inp, const Tensor& row_sums, int64_t total_cols);
                                                                  // sums [N] = sum_c (inp - row_sums/total_cols)^2
// out = (inp - mean) * rstd * weight + bias with mean = row_sums / C, rstd = 1/sqrt(squares / C + eps);
// saves mean[N], rstd[N]. weight, bias: this rank's [Cl] block.
void layernorm_split_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                             const Tensor& bias, const Tensor& row_sums, const Tensor& squares, int64_t total_cols,
                             float eps);
// sums [2, N]: sums[0][n] = sum_c g, sums[1][n] = sum_c g * xhat over this rank's columns (g = weight * dout,
// xhat = (inp - mean) * rstd); overwritten.
void layernorm_split_backward_sums(Tensor& sums, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd);
// With the sums all-reduced: dinp += rstd (g - sums[0]/C - xhat sums[1]/C), dweight += dout xhat, dbias += dout
// (accumulate, like layernorm_backward).
void layernorm_split_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                              const Tensor& weight, const Tensor& mean, const Tensor& rstd, const Tensor& sums,
                              int64_t total_cols);

// ---- Llama family: RMSNorm, rotary positions, SwiGLU ------------------------------------------------
// CPU kernels; their CUDA twins are not written yet (a CUDA tensor throws naming the op): no GPU has
// run them.
// out = inp * rstd * weight per row of [N, C], rstd[N] = 1 / sqrt(mean(inp^2) + eps) saved.
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps);
// sum = a + b (the residual stream), then out = rmsnorm(sum); sum may alias a or b.
void add_rmsnorm_forward(Tensor& sum, Tensor& out, Tensor& rstd, const Tensor& a, const Tensor& b,
                         const Tensor& weight, float eps);
// dinp, dweight: accumulate.
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd);
// RMSNorm over columns split across ranks (2D/2.5D/3D tensor parallelism), as the split layer norm:
// each rank holds inp [N, Cl] of the C = total_cols columns and the caller all-reduces (sums) the
// row sums between the calls. One all-reduce of N values forward, one backward.
void rmsnorm_split_squares(Tensor& sums, const Tensor& inp);  // sums [N] = sum_c inp[n, c]^2 (overwritten)
// out = inp * rstd * weight with rstd = 1 / sqrt(squares / C + eps), saved; squares may alias rstd.
void rmsnorm_split_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, const Tensor& squares,
                           int64_t total_cols, float eps);
// sums [N] = sum_c g xhat over this rank's columns (g = weight * dout, xhat = inp * rstd); overwritten.
void rmsnorm_split_backward_sums(Tensor& sums, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                 const Tensor& rstd);
// With the sums all-reduced: dinp += rstd (g - xhat sums / C), dweight += dout xhat (accumulate).
void rmsnorm_split_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                            const Tensor& rstd, const Tensor& sums, int64_t total_cols);

// Rotary position embedding with Hugging Face Llama's "rotate half" pairing (element i of a head
// with element i + D/2, angle position x theta^(-2i/D)), applied to q and k as they are packed into
// the attention kernels' qkv [B, T, 3, H, D]. Grouped-query attention: query head h (global index
// first_head + h) reads kv head (first_head + h) / group, which is head (that - first_kv_head) of
// the k and v tensors; so each kv head is repeated for the `group` query heads sharing it.
struct RopeShape {
  int64_t batch = 0, seq = 0;  // seq: this rank's positions, the first at first_position
  int64_t heads = 0;           // query heads in q and qkv (this rank's)
  int64_t kv_heads = 0;        // heads in k and v
  int64_t head_dim = 0;        // even
  int64_t group = 1;           // query heads per kv head (the whole model's heads / kv heads)
  int64_t first_head = 0, first_kv_head = 0, first_position = 0;
  float theta = 10000.0f;
  // Document masking: [batch, seq] int32 on the host, each row's position (its index inside its
  // document, in [0, first_position + seq)) in place of first_position + t; nullptr: none.
  const int32_t* positions = nullptr;
};
// q [B, T, H x D], k and v [B, T, K x D] -> qkv [B, T, 3, H, D] (overwritten).
void rope_pack_forward(Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, const RopeShape& shape);
// The transpose: dq, dk, dv overwritten from dqkv (a kv head's gradient sums over its query heads;
// a kv head no query head here reads gets zero).
void rope_pack_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dqkv, const RopeShape& shape);

// out = silu(gate) * up (silu(g) = g sigmoid(g)); the backward overwrites dgate and dup (dgate may
// alias dout).
void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up);
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up);

// ---- causal self-attention ----------------------------------------------------------------------
// qkv [B, T, 3, H, D] (the QKV projection's output, q then k then v, heads inside), out [B, T, H, D],
// lse [B, H, T] (log-sum-exp of each query row's scaled scores, saved for backward). Computed in
// key/value tiles with an online softmax: no T x T matrix is held. On CUDA with inputs bf16 the
// products run on the tensor cores with bf16 inputs (kernels/cuda/attention_mma.cu); the CPU runs
// its fp32 kernel either way.
// Document masking: segments [B, T] int32 on the host (the document of every position; undefined:
// none) keeps each query inside its own document (causal and block-diagonal); CPU only, a CUDA
// tensor with segments is refused.
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads,
                       MatmulInputs inputs = MatmulInputs::f32, const Tensor& segments = Tensor());
// dqkv [B, T, 3, H, D]: overwritten.
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int64_t n_heads, MatmulInputs inputs = MatmulInputs::f32,
                        const Tensor& segments = Tensor());

// ---- attention between a query block and a key/value block --------------------------------------
// The pieces of sequence-parallel (ring) attention, and non-causal attention. C = H x D is out's
// last dimension. q [B, Tq, Wq]: the first C columns of each row are its queries (Wq = C, or a qkv
// row, 3C); kv [B, Tk, Wkv]: the last 2C columns of each row are its keys then its values (Wkv =
// 2C, or a qkv row), so one qkv [B, T, 3C] may be passed as both. causal: query i sees key j iff
// j <= i (the diagonal block: Tq == Tk, the same positions); otherwise every key is seen.
// out [B, Tq, C], lse [B, H, Tq]: merge = false overwrites them with this block's attention;
// merge = true takes them as the attention over other keys (a row with lse = -inf: none yet) and
// makes them the attention over those keys and this block's together (an online-softmax merge).
// CPU and CUDA (head_dim <= 128 on CUDA; the CUDA twin's test passed on an H200, 2026-12-04).
// Document masking (CPU only): q_segments [B, Tq] and kv_segments [B, Tk] int32 on the host, the
// document of every query and key row; a query sees only keys of its own document (a row seeing no
// key of this block: merge leaves it as it was, else it gets out 0 and lse -inf).
void attention_block_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& kv, int64_t n_heads,
                             bool causal, bool merge, const Tensor& q_segments = Tensor(),
                             const Tensor& kv_segments = Tensor());
// out, lse: the final attention over every key block (after the last merge), dout its gradient.
// Adds this block's share of the gradients: dq (shaped as q: its first C columns) and dkv (shaped
// as kv: its last 2C columns) accumulate, other columns untouched; dq and dkv may be one tensor.
void attention_block_backward(Tensor& dq, Tensor& dkv, const Tensor& dout, const Tensor& q, const Tensor& kv,
                              const Tensor& out, const Tensor& lse, int64_t n_heads, bool causal,
                              const Tensor& q_segments = Tensor(), const Tensor& kv_segments = Tensor());

// ---- embedding -------------------------------------------------------------------------------------
// out[b, t, :] = wte[tokens[b, t] - vocab_start, :] + wpe[t, :] (wpe may be undefined); token ids
// outside [vocab_start, vocab_start + wte rows) contribute zero (a vocab-parallel shard). A table
// given with its bf16 rounding (wte.bf16: mixed precision keeps the table in fp32 and has the
// lookup read bf16 values, as its GEMMs do) is read from the bits.
void embedding_forward(Tensor& out, const Tensor& tokens, const Operand& wte, const Tensor& wpe,
                       int64_t vocab_start = 0);
// dwte, dwpe: accumulate (no atomics: each thread owns a range of vocabulary rows).
void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_start = 0);

// ---- softmax + cross-entropy -------------------------------------------------------------------------
// logits [N, Vp]; only the first `valid_vocab` columns are real (the rest is padding, masked).
// losses[N] = lse - logit[target], lse[N] saved; a target < 0 is ignored (loss 0).
void softmax_xent_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets,
                          int64_t valid_vocab);
// dlogits = (softmax - onehot) * scale, padding columns and ignored rows 0; dlogits may alias logits.
// A vocab-parallel shard: the columns are vocabulary ids [vocab_start, vocab_start + valid_vocab)
// and lse is over the whole vocabulary; targets are global ids (checked by the forward).
void softmax_xent_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                           const Tensor& lse, int64_t valid_vocab, float scale, int64_t vocab_start = 0);
// The pieces of a vocab-parallel loss over a shard of the vocabulary (columns = ids
// [vocab_start, vocab_start + valid_vocab)): row_max [N] of the valid columns (-inf if none);
// then, given the global row maximum max [N], sums [2, N] = (sum_j exp(x_j - max), x[target] if
// the target is in this shard else 0). Targets must be below `vocab`.
void softmax_xent_row_max(Tensor& row_max, const Tensor& logits, int64_t valid_vocab);
void softmax_xent_partial(Tensor& sums, const Tensor& logits, const Tensor& targets, const Tensor& max,
                          int64_t valid_vocab, int64_t vocab_start, int64_t vocab);

// ---- vision transformer: patches, token sequence, pooling, classifier loss --------------------------
// images [B, H, W, C] (channels last) -> patches [B, P, p*p*C]: the non-overlapping p x p patches in
// row-major order (P = H/p x W/p), each flattened in (row, column, channel) order. H, W divide by p.
void image_to_patches(Tensor& patches, const Tensor& images, int64_t patch);
// The token sequence out [B, T, C] from the patch projections proj [B, P, C]: with a class token
// cls [C], T = P + 1 and token 0 of every image is cls; without (cls undefined), T = P. Then the
// positions pos [T, C] are added: out[b, t] = (cls or proj[b, t - first]) + pos[t].
void image_tokens_forward(Tensor& out, const Tensor& proj, const Tensor& cls, const Tensor& pos);
// dproj [B, P, C]: overwritten; dcls [C] (undefined: no class token) and dpos [T, C]: accumulate.
void image_tokens_backward(Tensor& dproj, Tensor& dcls, Tensor& dpos, const Tensor& dout);
// x [B, T, C] -> pooled [B, C]: token 0 of each image (first: a class token), or the mean of its
// tokens. The backward overwrites dx [B, T, C] (zero rows where the pooling does not look).
enum class TokenPool { first, mean };
void token_pool_forward(Tensor& pooled, const Tensor& x, TokenPool pool);
void token_pool_backward(Tensor& dx, const Tensor& dpooled, TokenPool pool);
// Softmax cross-entropy of logits [N, K] against labels [N] (int32; < 0: ignored, loss 0) with
// label smoothing eps in [0, 1): the target is (1 - eps) onehot(label) + eps / K everywhere, so
// losses[N] = lse - (1 - eps) x[label] - eps mean_j x_j; lse[N] saved. A label >= K throws.
void classifier_xent_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& labels,
                             float smoothing);
// dlogits = (softmax - target) * scale, ignored rows 0; dlogits may alias logits.
void classifier_xent_backward(Tensor& dlogits, const Tensor& logits, const Tensor& labels, const Tensor& lse,
                              float smoothing, float scale);

// ---- optimizer ---------------------------------------------------------------------------------------
struct AdamWArgs {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // grads are multiplied by this first (clipping, loss-scale undo)
  bool zero_grad = false;   // zero the gradient once read: the next step needs no zeroing pass
};
// One fused pass: m, v, param updated in place (decoupled weight decay, bias-corrected).
void adamw(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWArgs& args);
// [begin, end) of a flat buffer, with args.weight_decay applied or not (biases and norms are not
// decayed).
struct AdamWSpan {
  int64_t begin, end;
  bool decay;
};
// adamw over every span of four buffers of one length, as one pass: on the CPU one team of threads
// shares the chunks of all spans (a GPT's hundred parameter tensors cost one parallel region, not a
// hundred), with the same results as one adamw call per span. Spans come in increasing order and
// do not overlap. param_bits (bf16, as many as param; optional) receives the updated spans' bf16
// bits (nearest even) as they are written: mixed precision's copy for the next step, without a
// pass of its own.
void adamw_spans(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const std::vector<AdamWSpan>& spans, const AdamWArgs& args, Tensor param_bits = Tensor());

// ---- completion ----------------------------------------------------------------------------------
// CUDA ops are queued in call order and return before their kernels run; the host waits where it
// reads a value (sum_squares, a copy to the host). synchronize returns once every op queued on
// device has run and reports a fault in any (CPU ops are synchronous: nothing to wait for). A
// training step ends with it, so the step's time is the device's.
void synchronize(Device device);

}  // namespace tessera::ops
