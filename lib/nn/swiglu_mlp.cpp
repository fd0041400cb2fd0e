// SwiGluMlp forward/backward.
#include "nn/swiglu_mlp.h"

#include "kernels/ops.h"

namespace tessera::nn {

SwiGluMlp::SwiGluMlp(ParamStore& store, const std::string& name, int64_t channels, int64_t hidden, float init_std,
                     float proj_init_std, const TensorLayout& layout)
    : gate_(store, name + ".gate", channels, hidden, {false, init_std, Split::columns}, layout),
      up_(store, name + ".up", channels, hidden, {false, init_std, Split::columns}, layout),
      down_(store, name + ".down", hidden, channels, {false, proj_init_std, Split::rows}, layout),
      layout_(&layout) {
  TESSERA_CHECK(hidden % layout.size() == 0, "--ffn-hidden ", hidden, " is not divisible by --tp ", layout.size(),
                " (tensor parallelism splits the MLP's hidden features)");
}

SwiGluMlp::Saved SwiGluMlp::allocate(int64_t rows, Device device) const {
  auto act = [&] { return Tensor::empty({rows, local_hidden()}, DType::f32, device); };
  return {act(), act(), act()};
}

void SwiGluMlp::forward(Tensor& y, const Tensor& x, Saved& s, RegionWorkspace& region) const {
  const Tensor& whole_x = layout_->enter(x, region.in);
  gate_.forward(s.gate, whole_x);
  up_.forward(s.up, whole_x);
  ops::swiglu_forward(s.hidden, s.gate, s.up);
  Tensor& out = layout_->whole(y, region);
  down_.forward(out, s.hidden);
  layout_->exit(y, out);
}

void SwiGluMlp::backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& s, Tensor& dgate,
                         Tensor& dup, RegionWorkspace& region, WeightGrads* defer) const {
  down_.backward(&dgate, layout_->exit_backward(dy, region.out), s.hidden, false, defer);
  ops::swiglu_backward(dgate, dup, dgate, s.gate, s.up);  // dgate held d(hidden) until now
  Tensor& whole_dx = layout_->whole(dx, region);
  // Rows split: x gathered again, into the region's workspace (so a deferred W keeps a copy).
  const Tensor& whole_x = layout_->enter(x, region.in);
  const bool x_outlives = !layout_->splits_rows();
  gate_.backward(&whole_dx, dgate, whole_x, false, defer, x_outlives);
  up_.backward(&whole_dx, dup, whole_x, true, defer, x_outlives);
  layout_->enter_backward(dx, whole_dx);
}

}  // namespace tessera::nn
