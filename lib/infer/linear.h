// The one seam through which inference multiplies by a weight: y = x w^T (+ bias), the weight in
// f32 (one activation row: f32_gemv, which streams the weight once; more: the GEMM), in bf16 (generate --weights bf16: the f32 weights rounded once at load, multiplied by
// bf16_weight_matmul, activations rounded to bf16 and products summed in f32), or, from a quantised
// checkpoint (ckpt_tool quantize), int8/int4 groups multiplied by the quantised kernels
// (quant::matmul), which dequantise in registers (one token) or into f32 panels for the GEMM
// library (a batch or a prefill); under --weights bf16 a quantised matrix's products are bf16 ones
// too (quant_bf16_matmul: its dequantised values rounded to bf16 in panels); under --activations int8
// a quantised matrix is packed once at load into the integer kernels' blocks (its quantised bytes
// then dropped: kernels/cpu/quant_w8a8_packed.h says what that costs) and every product, one row or
// many, quantises the activations to int8 per row and group and sums integer products
// (quant_w8a8_gemm_packed; AVX-512 VNNI where the CPU has it).
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "core/tensor.h"
#include "quant/quantized_matrix.h"

namespace tessera::kernels::cpu {
struct W8A8PackedMatrix;
struct W8A8Scratch;
}  // namespace tessera::kernels::cpu

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
  quant::QuantizedMatrix quantized;  // empty where int8_packed holds the matrix
  bool bf16_products = false;  // quantized: multiplied as bf16 weights (quant_bf16_matmul)
  // quantized, under int8 activations: the matrix as the integer kernels read it (shared by copies).
  std::shared_ptr<const kernels::cpu::W8A8PackedMatrix> int8_packed;
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
  // A quantised matrix for int8-activation products: packed (kernels::cpu::w8a8_pack), its bytes dropped.
  static LinearWeight with_int8_activations(const quant::QuantizedMatrix& quantized);
  // The same weight rounded to bf16 (nearest even, as every other bf16 copy in tessera), bias kept in
  // f32; a quantised one marked for bf16 products; a bf16 one as it is.
  LinearWeight to_bf16() const;
  bool is_quantized() const { return !weight.defined(); }
  bool is_bf16() const { return weight.defined() && weight.dtype() == DType::bf16; }
  int64_t out_features() const;
  int64_t in_features() const;
  int64_t bytes() const;  // what a product reads: the weight (as held) and the bias
};

// y [N, out] = x [N, in] w^T + bias. With gelu_pre, gelu_pre = that and y = gelu(gelu_pre) (GPT-2's
// first MLP layer). `scratch`: where an int8-activation product quantises x (the caller's, reused
// call to call); none: one made for this call.
void linear(Tensor& y, const Tensor& x, const LinearWeight& w, Tensor* gelu_pre = nullptr,
            kernels::cpu::W8A8Scratch* scratch = nullptr);

}  // namespace tessera::infer
