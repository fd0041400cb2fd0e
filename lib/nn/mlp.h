// Mlp: fc (C -> 4C), GELU (tanh), proj (4C -> C). Under a tensor-parallel layout fc is
// column-split and proj row-split: one region, with the layout's communication at its edges.
#pragma once
#include <string>

#include "nn/linear.h"

namespace tessera::nn {

class Mlp {
 public:
  struct Saved {
    Tensor fc;    // [N, 4C / tp] pre-activation
    Tensor gelu;  // [N, 4C / tp]
  };

  Mlp() = default;
  Mlp(ParamStore& store, const std::string& name, int64_t channels, int64_t hidden, float init_std,
      float proj_init_std, const TensorLayout& layout = TensorLayout::single());
  Saved allocate(int64_t rows, Device device) const;

  // x, y: the token rows this rank holds; region: the layout's workspace.
  void forward(Tensor& y, const Tensor& x, Saved& saved, RegionWorkspace& region) const;
  // dx = d/dx (overwritten); dhidden_scratch [N, 4C / tp] is workspace.
  // With `defer`, the weight gradients are recorded there instead (nn/weight_grads.h).
  void backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& saved, Tensor& dhidden_scratch,
                RegionWorkspace& region, WeightGrads* defer = nullptr) const;

 private:
  Linear fc_, proj_;
  const TensorLayout* layout_ = nullptr;
};

}  // namespace tessera::nn
