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
  if (precision_ == Precision::bf16 && !store_.sharded()) {  // ZeRO-3's GEMMs read gathered units, not the shard
    round_bf16_held(held.reshape({held.numel()}));
  } else {
    if (!master_.defined() || master_.numel() != held.numel())
      master_ = Tensor::empty({held.numel()}, DType::f32, held.device());
    master_.copy_from(held.reshape({held.numel()}));
    rounding_.round(held);
  }
  for (Tensor& t : extra_) rounding_.round(t);
}

const std::vector<MixedPrecision::Span>& MixedPrecision::spans() {
  if (spans_.empty())
    for (const nn::ParamSpec& s : store_.specs()) {
      const int64_t n = s.local_shape.numel();
      if (n == 0) continue;
      if (!spans_.empty() && spans_.back().rounded_on_read == s.rounded_on_read && spans_.back().end == s.offset)
        spans_.back().end += n;
      else
        spans_.push_back({s.offset, s.offset + n, s.rounded_on_read});
    }
  return spans_;
}

// Every span's bits; the spans read by other ops are also copied to the master and rounded in place.
void MixedPrecision::round_bf16_held(Tensor flat) {
  int64_t kept = 0;
  for (const Span& s : spans()) kept += s.rounded_on_read ? 0 : s.end - s.begin;
  if (!bf16_copy_.defined() || bf16_copy_.numel() != flat.numel() || bf16_copy_.device() != flat.device())
    bf16_copy_ = Tensor::empty({flat.numel()}, DType::bf16, flat.device());
  if (!master_.defined() || master_.numel() != kept || master_.device() != flat.device())
    master_ = Tensor::empty({kept}, DType::f32, flat.device());
  int64_t at = 0;
  for (const Span& s : spans()) {
    const Shape shape{s.end - s.begin};
    Tensor values = flat.slice(s.begin, shape);
    Tensor bits = bf16_copy_.slice(s.begin, shape);
    if (s.rounded_on_read) {
      ops::cast(bits, values);
    } else {
      master_.slice(at, shape).copy_from(values);
      rounding_.round(values, bits);
      at += shape.numel();
    }
  }
  ops::set_bf16_copy(flat, bf16_copy_);
  copy_registered_ = true;
}

void MixedPrecision::restore_weights() {
  if (!low()) return;
  forget_bf16_copy();
  Tensor held = held_values();
  Tensor flat = held.reshape({held.numel()});
  if (precision_ != Precision::bf16 || store_.sharded()) {
    flat.copy_from(master_);
    return;
  }
  int64_t at = 0;
  for (const Span& s : spans()) {
    if (s.rounded_on_read) continue;
    const Shape shape{s.end - s.begin};
    flat.slice(s.begin, shape).copy_from(master_.slice(at, shape));
    at += shape.numel();
  }
}

void MixedPrecision::round_gradients(Tensor held) { rounding_.round(held); }

void MixedPrecision::forget_bf16_copy() {
  if (copy_registered_) ops::clear_bf16_copy();
  copy_registered_ = false;
}

}  // namespace tessera::optim
