// linear: the GEMM (bias in its epilogue where the backend has one) of an fp32 weight, or for one
// activation row its GEMV, or the bf16 or quantised kernels' product, followed by the bias.
#include "infer/linear.h"

#include "core/error.h"
#include "kernels/cpu/bf16_matmul_paths.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/f32_gemv_paths.h"
#include "kernels/cpu/quant_w8a8_packed.h"
#include "kernels/ops.h"

namespace tessera::infer {

WeightPrecision parse_weight_precision(const std::string& name) {
  if (name == "f32") return WeightPrecision::f32;
  if (name == "bf16") return WeightPrecision::bf16;
  throw Error("--weights must be f32 or bf16, not '" + name + "'");
}

ActivationPrecision parse_activation_precision(const std::string& name) {
  if (name == "f32") return ActivationPrecision::f32;
  if (name == "int8") return ActivationPrecision::int8;
  throw Error("--activations must be f32 or int8, not '" + name + "'");
}

LinearWeight LinearWeight::with_int8_activations(const quant::QuantizedMatrix& quantized) {
  LinearWeight w;
  w.int8_packed = std::make_shared<const kernels::cpu::W8A8PackedMatrix>(kernels::cpu::w8a8_pack(quantized.view()));
  return w;
}

int64_t LinearWeight::out_features() const {
  return int8_packed ? int8_packed->rows : is_quantized() ? quantized.rows() : weight.dim(0);
}

int64_t LinearWeight::in_features() const {
  return int8_packed ? int8_packed->cols : is_quantized() ? quantized.cols() : weight.dim(1);
}

int64_t LinearWeight::bytes() const {
  const int64_t held = int8_packed   ? int8_packed->memory_bytes()
                       : is_quantized() ? quantized.bytes()
                                        : static_cast<int64_t>(weight.nbytes());
  return held + (bias.defined() ? static_cast<int64_t>(bias.nbytes()) : 0);
}

LinearWeight LinearWeight::to_bf16() const {
  TESSERA_CHECK(!int8_packed, "a weight packed for int8 activations has no bf16 products");
  if (is_quantized() || is_bf16()) {
    LinearWeight w = *this;
    w.bf16_products = is_quantized();
    return w;
  }
  LinearWeight w;
  w.weight = Tensor::empty(weight.shape(), DType::bf16);
  kernels::cpu::f32_to_bf16(w.weight.bits16(), weight.data<float>(), weight.numel());
  w.bias = bias;
  return w;
}

void linear(Tensor& y, const Tensor& x, const LinearWeight& w, Tensor* gelu_pre, kernels::cpu::W8A8Scratch* scratch) {
  // One activation row (decode at batch 1) by an f32 weight: the GEMV that streams the weight once
  // (kernels/cpu/f32_gemv_paths.h), then the bias as below.
  const bool f32_gemv = !w.is_quantized() && w.weight.dtype() == DType::f32 && w.weight.device() == Device::cpu &&
                        x.device() == Device::cpu && x.numel() == w.in_features();
  if (w.is_quantized() || w.is_bf16() || f32_gemv) {
    Tensor& product = gelu_pre ? *gelu_pre : y;
    const int64_t n = x.numel() / w.in_features();
    TESSERA_CHECK(n * w.in_features() == x.numel() && product.numel() == n * w.out_features(),
                  "linear: input ", x.shape().str(), " and output ", product.shape().str(), " do not fit a [",
                  w.out_features(), ", ", w.in_features(), "] weight");
    if (f32_gemv)
      kernels::cpu::f32_gemv(product.data<float>(), x.data<float>(), w.weight.data<float>(), w.out_features(),
                             w.in_features());
    else if (w.is_bf16())
      kernels::cpu::bf16_weight_matmul(product.data<float>(), x.data<float>(), n, w.weight.bits16(),
                                       w.out_features(), w.in_features());
    else if (w.bf16_products)
      kernels::cpu::quant_bf16_matmul(product.data<float>(), x.data<float>(), n, w.quantized.view());
    else if (w.int8_packed) {
      kernels::cpu::W8A8Scratch own;
      kernels::cpu::quant_w8a8_gemm_packed(product.data<float>(), x.data<float>(), n, *w.int8_packed,
                                           scratch ? *scratch : own);
    }
    else
      quant::matmul(x.data<float>(), n, w.quantized, product.data<float>());
    if (w.bias.defined()) {
      if (gelu_pre) {
        ops::bias_gelu_forward(y, *gelu_pre, w.bias);
        return;
      }
      float* out = y.data<float>();
      const float* bias = w.bias.data<float>();
      const int64_t cols = w.out_features();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] += bias[c];
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
