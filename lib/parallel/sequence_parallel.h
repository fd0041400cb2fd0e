// SequenceParallel: the sequence-parallel layout of a model over the sp group: each rank holds a
// contiguous share of every sequence's positions (zigzag: two opposite chunks, nn/zigzag_layout.h)
// for the whole model (embedding, norms, MLP, loss), and attention, the only layer that mixes
// positions, runs as SequenceAttention in the all-to-all (Ulysses), ring or zigzag mode; its
// header gives the communication. A vision model's pooling
// sums its shares of each image's pooled token over the group (all_reduce, B x C floats).
#pragma once
#include "nn/sequence_layout.h"
#include "parallel/sequence_attention.h"

namespace tessera::parallel {

class SequenceParallel final : public nn::SequenceLayout {
 public:
  // heads: the attention heads each rank of the tensor-parallel group holds.
  SequenceParallel(SequenceMode mode, comm::Communicator& sp, int64_t heads, int64_t head_dim)
      : sp_(sp), attention_(mode, sp, heads, head_dim) {}

  int rank() const override { return sp_.rank(); }
  int size() const override { return sp_.size(); }
  bool zigzag() const override { return attention_.mode() == SequenceMode::zigzag; }
  nn::AttentionSaved allocate(int64_t batch, int64_t local_seq, int64_t, int64_t, Device device) override {
    return attention_.allocate(batch, local_seq, device);
  }
  void forward(Tensor& out, const Tensor& qkv, int64_t, bool causal, nn::AttentionSaved& saved,
               ops::MatmulInputs inputs, const Tensor& segments) override {
    attention_.forward(out, qkv, saved, causal, inputs, segments);
  }
  void backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, int64_t, bool causal,
                const nn::AttentionSaved& saved, ops::MatmulInputs inputs, const Tensor& segments) override {
    attention_.backward(dqkv, dout, qkv, out, saved, causal, inputs, segments);
  }
  void all_reduce(Tensor& t) const override { sp_.all_reduce_sum(t); }

 private:
  comm::Communicator& sp_;
  SequenceAttention attention_;
};

}  // namespace tessera::parallel
