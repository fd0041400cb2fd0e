// SequenceLayout: the one-rank layout (the fused attention kernels over the whole sequence).
#include "nn/sequence_layout.h"

#include "kernels/ops.h"
#include "nn/zigzag_layout.h"

namespace tessera::nn {

int64_t SequenceLayout::local_length(int64_t seq) const {
  TESSERA_CHECK(seq % size() == 0, "--seq-len ", seq, " is not divisible by --sp ", size(),
                " (sequence parallelism gives each rank an equal share of the positions)");
  TESSERA_CHECK(!zigzag() || seq % (2 * size()) == 0, "--seq-len ", seq, " is not divisible by 2 x --sp = ",
                2 * size(), " (--sp-mode zigzag cuts the sequence into 2 x sp equal chunks)");
  return seq / size();
}

int64_t SequenceLayout::local_row(int64_t batch, int64_t seq, int64_t b, int64_t t) const {
  if (zigzag()) return ZigzagPlace{rank(), size(), batch, seq}.local_row(b, t);
  const int64_t tl = local_length(seq), first = offset(seq);
  return t >= first && t < first + tl ? b * tl + t - first : -1;
}

int64_t SequenceLayout::positions_end(int64_t seq) const {
  if (zigzag()) {
    const int64_t c = local_length(seq) / 2;
    return (zigzag_chunk(rank(), 1, size()) + 1) * c;
  }
  return offset(seq) + local_length(seq);
}

AttentionSaved SequenceLayout::allocate(int64_t batch, int64_t local_seq, int64_t heads, int64_t,
                                        Device device) {
  AttentionSaved s;
  s.batch = batch;
  s.local_seq = local_seq;
  s.lse = Tensor::empty({batch, heads, local_seq}, DType::f32, device);
  return s;
}

void SequenceLayout::forward(Tensor& out, const Tensor& qkv, int64_t heads, bool causal, AttentionSaved& saved,
                             ops::MatmulInputs inputs, const Tensor& segments) {
  if (causal) {
    ops::attention_forward(out, saved.lse, qkv, heads, inputs, segments);
  } else {  // q, k and v all read from the qkv rows
    ops::attention_block_forward(out, saved.lse, qkv, qkv, heads, false, false, segments, segments);
  }
}

void SequenceLayout::backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              int64_t heads, bool causal, const AttentionSaved& saved, ops::MatmulInputs inputs,
                              const Tensor& segments) {
  if (causal) {
    ops::attention_backward(dqkv, dout, qkv, out, saved.lse, heads, inputs, segments);
  } else {
    dqkv.zero();
    ops::attention_block_backward(dqkv, dqkv, dout, qkv, qkv, out, saved.lse, heads, false, segments, segments);
  }
}

SequenceLayout& SequenceLayout::single() {
  static SequenceLayout layout;
  return layout;
}

}  // namespace tessera::nn
