// MixedPrecision: in-place rounding, the fp32 master copy, and bf16's copy of the rounded weights.
#include "optim/mixed_precision.h"

#include "kernels/ops.h"

namespace tessera::optim {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  fail("--precision ", name, ": expected fp32, bf16 or fp16");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

MixedPrecision::MixedPrecision(nn::ParamStore& store, Precision precision, std::vector<Tensor> extra)
    : store_(store),
      precision_(precision),
      rounding_(precision == Precision::bf16 ? DType::bf16 : precision == Precision::fp16 ? DType::f16 : DType::f32) {
  for (Tensor& t : extra)
    if (t.defined()) extra_.push_back(t);
}

Tensor MixedPrecision::held_values() { return store_.sharded() ? store_.shard_values() : store_.flat_values(); }

void MixedPrecision::round_weights() {
  if (!low()) return;
  Tensor held = held_values();
  if (!master_.defined() || master_.numel() != held.numel())
    master_ = Tensor::empty({held.numel()}, DType::f32, held.device());
  master_.copy_from(held.reshape({held.numel()}));
  if (precision_ == Precision::bf16 && !store_.sharded()) {  // ZeRO-3's GEMMs read gathered units, not the shard
    if (!bf16_copy_.defined() || bf16_copy_.numel() != held.numel() || bf16_copy_.device() != held.device())
      bf16_copy_ = Tensor::empty({held.numel()}, DType::bf16, held.device());
    rounding_.round(held, bf16_copy_);
    ops::set_bf16_copy(held.reshape({held.numel()}), bf16_copy_);
    copy_registered_ = true;
  } else {
    rounding_.round(held);
  }
  for (Tensor& t : extra_) rounding_.round(t);
}

void MixedPrecision::restore_weights() {
  if (!low()) return;
  forget_bf16_copy();
  Tensor held = held_values();
  held.reshape({held.numel()}).copy_from(master_);
}

void MixedPrecision::round_gradients(Tensor held) { rounding_.round(held); }

void MixedPrecision::forget_bf16_copy() {
  if (copy_registered_) ops::clear_bf16_copy();
  copy_registered_ = false;
}

}  // namespace tessera::optim
