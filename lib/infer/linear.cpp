// linear: the GEMM (bias in its epilogue where the backend has one) of an fp32 weight.
#include "infer/linear.h"

#include "kernels/ops.h"

namespace tessera::infer {

void linear(Tensor& y, const Tensor& x, const LinearWeight& w, Tensor* gelu_pre) {
  if (w.bias.defined()) {
    ops::linear_forward(y, x, w.weight, w.bias, gelu_pre);
    return;
  }
  if (!gelu_pre) {
    ops::matmul(x, false, w.weight, true, y);
    return;
  }
  ops::matmul(x, false, w.weight, true, *gelu_pre);
  ops::gelu_forward(y, *gelu_pre);
}

}  // namespace tessera::infer
