// SwiGluMlp: Llama's feed-forward, down(silu(gate(x)) * up(x)), no biases. Under a tensor-parallel
// layout gate and up are column-split and down row-split: one region, with the layout's
// communication at its edges (as Mlp).
#pragma once
#include <string>

#include "nn/linear.h"

namespace tessera::nn {

class SwiGluMlp {
 public:
  struct Saved {
    Tensor gate, up;  // [N, F / tp] the two projections
    Tensor hidden;    // [N, F / tp] silu(gate) * up, down's input
  };

  SwiGluMlp() = default;
  SwiGluMlp(ParamStore& store, const std::string& name, int64_t channels, int64_t hidden, float init_std,
            float proj_init_std, const TensorLayout& layout = TensorLayout::single());
  Saved allocate(int64_t rows, Device device) const;
  int64_t local_hidden() const { return gate_.out_features(); }

  // x, y: the token rows this rank holds; region: the layout's workspace.
  void forward(Tensor& y, const Tensor& x, Saved& saved, RegionWorkspace& region) const;
  // dx = d/dx (overwritten); dgate_scratch and dup_scratch [N, F / tp] are workspace. With `defer`,
  // the weight gradients are recorded there instead (nn/weight_grads.h).
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& saved, Tensor& dgate_scratch,
                Tensor& dup_scratch, RegionWorkspace& region, WeightGrads* defer = nullptr) const;

 private:
  Linear gate_, up_, down_;
  const TensorLayout* layout_ = nullptr;
};

}  // namespace tessera::nn
