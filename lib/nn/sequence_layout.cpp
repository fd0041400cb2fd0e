// SequenceLayout: the one-rank layout (the fused attention kernels over the whole sequence).
#include "nn/sequence_layout.h"

#include "kernels/ops.h"

namespace tessera::nn {

int64_t SequenceLayout::local_length(int64_t seq) const {
  TESSERA_CHECK(seq % size() == 0, "--seq-len ", seq, " is not divisible by --sp ", size(),
                " (sequence parallelism gives each rank an equal share of the positions)");
  return seq / size();
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
