// MixedPrecision: training with parameters, activations and gradients in bf16 or fp16 and fp32
// master weights and optimizer states. The store keeps the fp32 master values between steps (what
// the optimizer updates and checkpoints save); for the step's forward and backward the values a
// rank holds are rounded to the low precision in place (round_weights) and the master values come
// back before the update (restore_weights). Gradients are rounded as the low precision would
// store them (round_gradients: fp16 overflows to inf, which the loss scaler detects; bf16 sums
// their squares as it rounds them, for the norm). The GEMMs
// multiply in bf16 under bf16 (ops::MatmulInputs, which the trainer sets); otherwise arithmetic
// is fp32 on rounded values, so the same logic runs and is tested without a GPU. It costs one copy
// of the held parameters, and under bf16 the rounded values' bits.
// Under bf16 (unsharded) a parameter whose readers all read bf16 values (ParamSpec::
// rounded_on_read: the linear layers' and experts' weights and the token table, most of a
// transformer) is not rounded in place: its bits are written and its fp32 values left alone,
// since its readers take the bits (or round what they read: the same values). No master copy, no
// restore: of the 26 bytes per parameter the round trip moved (copy, round with bits, restore), 6
// remain. The rest (norms, biases, positions) go the way above, a few ops per run of them.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "nn/param_store.h"
#include "nn/precision_rounding.h"
#include "parallel/flat_shards.h"

namespace tessera::optim {

enum class Precision { fp32, bf16, fp16 };
Precision parse_precision(const std::string& name);  // "fp32", "bf16", "fp16"; throws naming the choices
const char* precision_name(Precision p);

class MixedPrecision {
 public:
  // extra: further values rounded with the weights and never restored (a pipeline's mirror of a
  // tied weight, overwritten from the master after each update).
  MixedPrecision(nn::ParamStore& store, Precision precision, std::vector<Tensor> extra = {});
  ~MixedPrecision() { forget_bf16_copy(); }
  MixedPrecision(const MixedPrecision&) = delete;
  MixedPrecision& operator=(const MixedPrecision&) = delete;
  Precision precision() const { return precision_; }
  bool low() const { return precision_ != Precision::fp32; }

  // The held values become low precision; the fp32 master is kept. bf16: the rounded values' bits
  // are registered as their copy (ops::set_bf16_copy), which the GEMMs read until restore_weights.
  void round_weights();
  void restore_weights();  // the held values are the fp32 master again
  // bf16 on the unsharded store: the bits of every held weight (the copy the GEMMs read), for the
  // update to write as it writes the weights (ops::adamw_spans' param_bits), then
  // note_weight_bits_written(); undefined otherwise (and before the first round_weights).
  Tensor weight_bits_for_update();
  // The update wrote every held weight's bits: the next round_weights takes them instead of casting
  // the weights again. For that one round_weights; nothing else may write the weights in between.
  void note_weight_bits_written() { bits_written_by_update_ = true; }
  void weights_changed() { bits_written_by_update_ = false; }  // written otherwise: cast them again
  // The held gradients rounded as the low precision stores them. bf16 with sum_squares: returns
  // their sum of squares, from the same pass (the gradient norm's local sum, so it need not read
  // them again; on CUDA the host waits for it).
  std::optional<double> round_gradients(Tensor held, bool sum_squares = true);
  // The storage type of the low precision (f32 for fp32): what the models round activations to.
  DType storage() const { return rounding_.storage(); }

 private:
  Tensor held_values();
  void forget_bf16_copy();
  // bf16 on the unsharded store: f(values, master) for each run of runs_rounded_in_place_, with
  // its part of the master.
  template <typename F>
  void for_each_run_rounded_in_place(Tensor flat, F f);
  void round_bf16_held(Tensor flat);

  nn::ParamStore& store_;
  Precision precision_;
  std::vector<Tensor> extra_;
  Tensor master_;  // the held values' fp32 copy while rounded (bf16: of runs_rounded_in_place_, end to end)
  // The runs of the flat order whose parameters are not rounded on read: what bf16 on the
  // unsharded store rounds in place.
  std::vector<parallel::Range> runs_rounded_in_place_;
  Tensor bf16_copy_;  // bf16: the rounded held values' bits, which the step's GEMMs read
  nn::PrecisionRounding rounding_;
  bool copy_registered_ = false;
  bool bits_written_by_update_ = false;  // note_weight_bits_written, until the next round_weights
};

}  // namespace tessera::optim
