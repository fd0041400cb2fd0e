// Mlp forward/backward.
#include "nn/mlp.h"

#include "kernels/ops.h"

namespace tessera::nn {

Mlp::Mlp(ParamStore& store, const std::string& name, int64_t channels, int64_t hidden, float init_std,
         float proj_init_std, const TensorLayout& layout)
    : fc_(store, name + ".fc", channels, hidden, {true, init_std, Split::columns}, layout),
      proj_(store, name + ".proj", hidden, channels, {true, proj_init_std, Split::rows}, layout),
      layout_(&layout) {}

Mlp::Saved Mlp::allocate(int64_t rows, Device device) const {
  const int64_t h = fc_.out_features();
  return {Tensor::empty({rows, h}, DType::f32, device), Tensor::empty({rows, h}, DType::f32, device)};
}

void Mlp::forward(Tensor& y, const Tensor& x, Saved& s, RegionWorkspace& region) const {
  fc_.forward_gelu(s.gelu, s.fc, layout_->enter(x, region.in));
  Tensor& out = layout_->whole(y, region);
  proj_.forward(out, s.gelu);
  layout_->exit(y, out);
}

void Mlp::backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& s, Tensor& dh,
                   RegionWorkspace& region, WeightGrads* defer) const {
  proj_.backward(&dh, layout_->exit_backward(dy, region.out), s.gelu, false, defer);
  ops::gelu_backward(dh, s.fc, dh);
  Tensor& whole_dx = layout_->whole(dx, region);
  // Rows split: x gathered again, into the region's workspace (so a deferred W keeps a copy).
  fc_.backward(&whole_dx, dh, layout_->enter(x, region.in), false, defer, !layout_->splits_rows());
  layout_->enter_backward(dx, whole_dx);
}

}  // namespace tessera::nn
