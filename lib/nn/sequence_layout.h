// SequenceLayout: how each sequence is split over the sequence-parallel group, as the model sees
// it: this rank holds the contiguous positions [offset(), offset() + local length) (or, zigzag, two
// opposite chunks: nn/zigzag_layout.h), and attention
// (causal, or every position to every position) runs over the whole sequence from this rank's
// share of q, k and v. The base class is one rank (the whole sequence, the local attention
// kernels); lib/parallel implements the all-to-all (Ulysses), ring and zigzag modes, which communicate
// inside attention (and in all_reduce, for a model's per-sequence values) only.
#pragma once
#include "core/tensor.h"
#include "kernels/ops.h"

namespace tessera::nn {

// What attention keeps from forward for backward, per block and micro-batch; a mode leaves what it
// does not use undefined.
struct AttentionSaved {
  int64_t batch = 0, local_seq = 0;
  Tensor lse;                   // log-sum-exp per query row and head
  Tensor qkv_heads, out_heads;  // all-to-all mode: the head-sharded q, k, v and output
};

// Document masking of one micro-batch (--document-mask; segments undefined: none): attention stays
// inside each document of a packed window (causal and block-diagonal), and positions restart at 0
// at each document's first token (learned positions and RoPE). Every sequence-parallel rank holds
// the whole window's segments (4 bytes a position): a ring rank reads any block's from them, an
// all-to-all rank attends over the whole sequence. Host tensors (no CUDA kernel masks documents).
struct DocumentMask {
  Tensor segments;   // [B, T] int32: the document (numbered within its row) of every position
  Tensor positions;  // [B, Tl] int32: this rank's positions' indices inside their documents (also
                     // without segments under the zigzag layout: each local row's position)
  bool active() const { return segments.defined(); }
};

class SequenceLayout {
 public:
  virtual ~SequenceLayout() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  // This rank's share of a sequence of seq positions (throws unless size() divides it).
  int64_t local_length(int64_t seq) const;
  int64_t offset(int64_t seq) const { return rank() * local_length(seq); }
  // The zigzag layout (nn/zigzag_layout.h): chunks rank() and 2 size() - 1 - rank() of 2 size(),
  // local rows half-major, instead of one contiguous share (local rows sequence-major).
  virtual bool zigzag() const { return false; }
  // Where a micro-batch's tokens sit: the local row (of B x local_length) holding position t of
  // sequence b, or -1 when another rank holds it. The one place that knows; the model reads its
  // token rows, targets and positions through it.
  int64_t local_row(int64_t batch, int64_t seq, int64_t b, int64_t t) const;
  // One past the last position this rank holds (rotary tables cover [0, positions_end)).
  int64_t positions_end(int64_t seq) const;

  // qkv [B, Tl, 3, H, D] of this rank's positions (H: the heads this rank holds) -> out [B, Tl, H, D];
  // causal: each position attends to itself and earlier ones only (language models), else to all.
  // inputs: the precision of the attention's products (ops::attention_forward; the CPU's are fp32).
  // segments: DocumentMask::segments (the whole sequence's), or undefined: no document mask.
  virtual AttentionSaved allocate(int64_t batch, int64_t local_seq, int64_t heads, int64_t head_dim,
                                  Device device);
  virtual void forward(Tensor& out, const Tensor& qkv, int64_t heads, bool causal, AttentionSaved& saved,
                       ops::MatmulInputs inputs, const Tensor& segments);
  virtual void backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, int64_t heads,
                        bool causal, const AttentionSaved& saved, ops::MatmulInputs inputs, const Tensor& segments);

  // Sums t over the sequence-parallel group (a model's per-sequence values from its shares of the
  // positions, e.g. a pooled image token); nothing on one rank.
  virtual void all_reduce(Tensor& t) const { (void)t; }

  static SequenceLayout& single();  // the one-rank layout
};

}  // namespace tessera::nn
