// The one seam through which inference multiplies by a weight: y = x w^T (+ bias), the weight in
// f32 (one activation row: f32_gemv, which streams the weight once; more: the GEMM), in bf16 (generate --weights bf16: the f32 weights rounded once at load, multiplied by
// bf16_weight_matmul, activations rounded to bf16 and products summed in f32), or, from a quantised
// checkpoint (ckpt_tool quantize), int8/int4 groups multiplied by the quantised kernels
// (quant::matmul), which dequantise in registers (one token) or into f32 panels for the GEMM
// library (a batch or a prefill); under --weights bf16 a quantised matrix's products are bf16 ones
// too (quant_bf16_matmul: its dequantised values rounded to bf16 in panels); under --activations int8
// a quantised matrix's products quantise the activations to int8 per row and group (quant_w8a8_matmul,
// kernels/cpu/quant_w8a8_paths.h: integer products from kW8A8MinRows rows, a batch or a prefill).
#pragma once
#include <string>
#include <utility>

#include "core/tensor.h"
#include "quant/quantized_matrix.h"

namespace tessera::infer {

// The precision generate multiplies a checkpoint's f32 matrices in (--weights).
enum class WeightPrecision { f32, bf16 };
WeightPrecision parse_weight_precision(const std::string& name);  // "f32" or "bf16"; throws otherwise
// The precision a quantised checkpoint's products take their activations in (--activations).
enum class ActivationPrecision { f32, int8 };
ActivationPrecision parse_activation_precision(const std::string& name);  // "f32" or "int8"; throws otherwise

struct LinearWeight {
  Tensor weight;  // [out, in] f32 or bf16; undefined when the weight is quantized
  Tensor bias;    // [out], or undefined (always f32)
  quant::QuantizedMatrix quantized;
  bool bf16_products = false;  // quantized: multiplied as bf16 weights (quant_bf16_matmul)
  bool int8_activations = false;  // quantized: int8 activations (quant_w8a8_matmul)
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
  // The same weight rounded to bf16 (nearest even, as every other bf16 copy in tessera), bias kept in
  // f32; a quantised one marked for bf16 products; a bf16 one as it is.
  LinearWeight to_bf16() const;
  bool is_quantized() const { return !weight.defined(); }
  bool is_bf16() const { return weight.defined() && weight.dtype() == DType::bf16; }
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
