// MixedPrecision: in-place rounding, the fp32 master copy, and the stores' precision of products.
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

MixedPrecision::MixedPrecision(nn::ParamStore& store, Precision precision, parallel::TiedWeights* tied)
    : store_(store),
      precision_(precision),
      mirror_values_(tied ? tied->mirror_values() : Tensor()),
      rounding_(precision == Precision::bf16 ? DType::bf16 : precision == Precision::fp16 ? DType::f16 : DType::f32) {
  const ops::MatmulInputs inputs = precision == Precision::bf16 ? ops::MatmulInputs::bf16 : ops::MatmulInputs::f32;
  store.set_matmul_inputs(inputs);
  if (nn::ParamStore* mirror = tied ? tied->mirror_store() : nullptr) mirror->set_matmul_inputs(inputs);
  for (const nn::ParamSpec& s : store.specs()) {  // the runs of parameters not rounded on read
    const int64_t n = s.local_shape.numel();
    if (s.rounded_on_read || n == 0) continue;
    if (!runs_rounded_in_place_.empty() && runs_rounded_in_place_.back().end == s.offset)
      runs_rounded_in_place_.back().end += n;
    else
      runs_rounded_in_place_.push_back({s.offset, s.offset + n});
  }
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
  if (mirror_values_.defined()) rounding_.round(mirror_values_);
  store_.set_rounded_for_step(true);
}

// f(values, master) for each run rounded in place: its held values and its part of the master.
template <typename F>
void MixedPrecision::for_each_run_rounded_in_place(Tensor flat, F f) {
  int64_t at = 0;
  for (const parallel::Range& r : runs_rounded_in_place_) {
    const Shape shape{r.size()};
    f(flat.slice(r.begin, shape), master_.slice(at, shape));
    at += r.size();
  }
}

// The runs read by other ops than products are copied to the master and rounded in place; the
// others keep their fp32 values, and the store's bf16 copy of them (nn::ParamStore::operand).
void MixedPrecision::round_bf16_held(Tensor flat) {
  int64_t kept = 0;
  for (const parallel::Range& r : runs_rounded_in_place_) kept += r.size();
  if (!master_.defined() || master_.numel() != kept || master_.device() != flat.device())
    master_ = Tensor::empty({kept}, DType::f32, flat.device());
  for_each_run_rounded_in_place(flat, [&](Tensor values, Tensor master) {
    master.copy_from(values);
    rounding_.round(values);
  });
}

void MixedPrecision::restore_weights() {
  if (!low()) return;
  store_.set_rounded_for_step(false);
  Tensor held = held_values();
  Tensor flat = held.reshape({held.numel()});
  if (precision_ != Precision::bf16 || store_.sharded()) {
    flat.copy_from(master_);
    return;
  }
  for_each_run_rounded_in_place(flat, [](Tensor values, Tensor master) { values.copy_from(master); });
}

std::optional<double> MixedPrecision::round_gradients(Tensor held, bool sum_squares) {
  if (precision_ != Precision::bf16 || !sum_squares || held.numel() == 0) {
    rounding_.round(held);
    return std::nullopt;
  }
  Tensor flat = held.reshape({held.numel()});
  return ops::round_bf16_inplace_sum_squares(flat);
}

}  // namespace tessera::optim
