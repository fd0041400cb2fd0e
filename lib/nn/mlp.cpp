// Mlp forward/backward.
#include "nn/mlp.h"

#include "kernels/ops.h"

namespace tessera::nn {

Mlp::Mlp(ParamStore& store, const std::string& name, int64_t channels, int64_t hidden, float init_std,
         float proj_init_std, const TensorLayout& layout)
    : fc_(store, name + ".fc", channels, hidden, {true, init_std, Split::columns}, layout),
      proj_(store, name + ".proj", hidden, channels, {true, proj_init_std, Split::rows}, layout) {}

Mlp::Saved Mlp::allocate(int64_t rows, Device device) const {
  const int64_t h = fc_.out_features();
  return {Tensor::empty({rows, h}, DType::f32, device), Tensor::empty({rows, h}, DType::f32, device)};
}

void Mlp::forward(Tensor& y, const Tensor& x, Saved& s) const {
  fc_.forward(s.fc, x);
  ops::gelu_forward(s.gelu, s.fc);
  proj_.forward(y, s.gelu);
}

void Mlp::backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& s, Tensor& dh) const {
  proj_.backward(&dh, dy, s.gelu);
  ops::gelu_backward(dh, s.fc, dh);
  fc_.backward(&dx, dh, x);
}

}  // namespace tessera::nn
