// SelfAttention: qkv projection, multi-head attention (tiled, online softmax; causal for language
// models, over every position for ViT), output projection. Llama's attention (AttentionOptions with
// a rope_theta) projects q, k and v separately and without biases, rotates q and k by their
// positions (RoPE) and may have fewer kv heads than query heads (grouped-query attention): the
// rotated heads are packed with each kv head repeated for its query heads, so the attention core
// and every sequence-parallel mode run unchanged. Under a tensor-parallel layout the heads are split: the QKV projection is
// column-split (each rank computes q, k and v of its heads) and the output projection row-split:
// one tensor-parallel region, with the layout's communication at its edges. Under a sequence-parallel
// layout x holds this rank's positions and the attention core (SequenceLayout) communicates.
#pragma once
#include <string>

#include "nn/linear.h"
#include "nn/sequence_layout.h"

namespace tessera::nn {

struct AttentionOptions {
  int64_t kv_heads = 0;   // grouped-query attention's kv heads (divides the heads; 0: as many as heads)
  float rope_theta = 0;   // > 0: Llama's attention (rotary positions of this base, q/k/v without bias)
  bool llama() const { return rope_theta > 0; }
};

class SelfAttention {
 public:
  // What forward keeps for backward, for one micro-batch of B x T.
  struct Saved {
    Tensor qkv;           // [B, T, 3, H, D] of this rank's H heads (and T positions)
    Tensor att;           // [B, T, H, D], attention output before the projection
    AttentionSaved core;  // what the attention core keeps (lse, ...)
  };

  SelfAttention() = default;
  SelfAttention(ParamStore& store, const std::string& name, int64_t channels, int64_t heads, float init_std,
                float proj_init_std, bool causal = true, const TensorLayout& layout = TensorLayout::single(),
                SequenceLayout& sequence = SequenceLayout::single(), const AttentionOptions& options = {});
  // shared_core: when given, att and core are views of its tensors (selective activation
  // checkpointing: every micro-batch and block writes them into one set, and backward recomputes
  // them first).
  Saved allocate(int64_t batch, int64_t seq, Device device, const Saved* shared_core = nullptr) const;
  Saved allocate_core(int64_t batch, int64_t seq, Device device) const;  // att and core only
  // Llama's attention: workspace for its q, k and v projections (and their gradients) before they
  // are packed, shared by the blocks; undefined for the fused projection.
  Tensor allocate_projections(int64_t batch, int64_t seq, Device device) const;
  // att and core again from the kept qkv: the attention core's forward (communicating over sp as
  // forward does).
  // docs: the micro-batch's document mask (nn/sequence_layout.h; inactive: none), here and below.
  void recompute_core(Saved& saved, const DocumentMask& docs = {}) const;

  // x, y: the token rows this rank holds ([B, T, C], or a share of the rows when the layout splits
  // them); region: the layout's workspace; projections: allocate_projections' workspace.
  void forward(Tensor& y, const Tensor& x, Saved& saved, RegionWorkspace& region, Tensor& projections,
               const DocumentMask& docs = {}) const;
  // dx = d/dx (overwritten); dqkv_scratch and datt_scratch (the shapes of Saved's qkv and att) are
  // workspace. With `defer`, the weight gradients are recorded there instead (nn/weight_grads.h).
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& saved, Tensor& dqkv_scratch,
                Tensor& datt_scratch, RegionWorkspace& region, Tensor& projections,
                WeightGrads* defer = nullptr, const DocumentMask& docs = {}) const;

 private:
  // Llama's q, k and v (or their gradients) as views of the projections' workspace.
  struct Projections {
    Tensor q, k, v;
  };
  Projections views(Tensor& projections, int64_t rows) const;
  ops::RopeShape rope_shape(const Tensor& qkv, const DocumentMask& docs) const;

  Linear qkv_, proj_;
  Linear q_, k_, v_;  // Llama's projections (qkv_ unused)
  AttentionOptions options_;
  // Llama's grouped-query attention:
  int64_t kv_heads_ = 0;       // in k and v on this rank: its share, or all of them (replicated over tp)
  int64_t first_kv_head_ = 0;  // the global index of the first of them
  int64_t group_ = 1;          // query heads per kv head
  ParamStore* store_ = nullptr;  // its precision is the attention core's (ParamStore::matmul_inputs)
  const TensorLayout* layout_ = nullptr;
  SequenceLayout* sequence_ = nullptr;
  int64_t heads_ = 0;  // on this rank
  int64_t head_dim_ = 0;
  bool causal_ = true;
};

}  // namespace tessera::nn
