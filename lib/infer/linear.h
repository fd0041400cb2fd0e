// The one seam through which inference multiplies by a weight: y = x w^T (+ bias), the weight in
// f32 or, from a quantised checkpoint (ckpt_tool quantize), int8/int4 groups multiplied by the
// quantised kernels (quant::matmul), which dequantise in registers (one token) or into f32 panels
// for the GEMM library (a batch or a prefill).
#pragma once
#include <utility>

#include "core/tensor.h"
#include "quant/quantized_matrix.h"

namespace tessera::infer {

struct LinearWeight {
  Tensor weight;  // [out, in] f32; undefined when the weight is quantized
  Tensor bias;    // [out], or undefined (always f32)
  quant::QuantizedMatrix quantized;
  static LinearWeight of(Tensor weight) {
    LinearWeight w;
    w.weight = std::move(weight);
    return w;
  }
  static LinearWeight of(quant::QuantizedMatrix quantized) {
    LinearWeight w;
    w.quantized = std::move(quantized);
    return w;
  }
  bool is_quantized() const { return !weight.defined(); }
  int64_t out_features() const { return is_quantized() ? quantized.rows() : weight.dim(0); }
  int64_t in_features() const { return is_quantized() ? quantized.cols() : weight.dim(1); }
  int64_t bytes() const {
    return (is_quantized() ? quantized.bytes() : static_cast<int64_t>(weight.nbytes())) +
           (bias.defined() ? static_cast<int64_t>(bias.nbytes()) : 0);
  }
};

// y [N, out] = x [N, in] w^T + bias. With gelu_pre, gelu_pre = that and y = gelu(gelu_pre) (GPT-2's
// first MLP layer).
void linear(Tensor& y, const Tensor& x, const LinearWeight& w, Tensor* gelu_pre = nullptr);

}  // namespace tessera::infer
