// linear: the GEMM (bias in its epilogue where the backend has one) of an fp32 weight, or the
// quantised kernels' product followed by the bias.
#include "infer/linear.h"

#include "core/error.h"
#include "kernels/ops.h"

namespace tessera::infer {

void linear(Tensor& y, const Tensor& x, const LinearWeight& w, Tensor* gelu_pre) {
  if (w.is_quantized()) {
    Tensor& product = gelu_pre ? *gelu_pre : y;
    const int64_t n = x.numel() / w.in_features();
    TESSERA_CHECK(n * w.in_features() == x.numel() && product.numel() == n * w.out_features(),
                  "linear: input ", x.shape().str(), " and output ", product.shape().str(), " do not fit a [",
                  w.out_features(), ", ", w.in_features(), "] weight");
    quant::matmul(x.data<float>(), n, w.quantized, product.data<float>());
    if (w.bias.defined()) {
      if (gelu_pre) {
        ops::bias_gelu_forward(y, *gelu_pre, w.bias);
        return;
      }
      float* out = y.data<float>();
      const float* bias = w.bias.data<float>();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < w.out_features(); ++c) out[r * w.out_features() + c] += bias[c];
    }
    if (gelu_pre) ops::gelu_forward(y, *gelu_pre);
    return;
  }
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
