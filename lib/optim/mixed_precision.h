// MixedPrecision: training with parameters, activations and gradients in bf16 or fp16 and fp32
// master weights and optimizer states. The store keeps the fp32 master values between steps (what
// the optimizer updates and checkpoints save); for the step's forward and backward the values a
// rank holds are rounded to the low precision in place (round_weights) and the master values come
// back before the update (restore_weights). Gradients are rounded as the low precision would
// store them (round_gradients: fp16 overflows to inf, which the loss scaler detects; bf16 sums
// their squares as it rounds them, for the norm). Under bf16 it tells the store that its layers
// multiply in bf16 (nn::ParamStore::set_matmul_inputs), and the layers pass that to their GEMMs;
// otherwise arithmetic is fp32 on rounded values, so the same logic runs and is tested without a
// GPU. It costs one copy of the held parameters, and under bf16 the store's copy of their bits.
// Under bf16 (unsharded) a parameter whose readers all read bf16 values (ParamSpec::
// rounded_on_read: the linear layers' and experts' weights and the token table, most of a
// transformer) is not rounded in place: its readers take the store's bf16 copy (or round what
// they read: the same values), which the store keeps current by the values' version. No master
// copy, no restore. The rest (norms, biases, positions) go the way above, a few ops per run of them.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "nn/param_store.h"
#include "nn/precision_rounding.h"
#include "parallel/flat_shards.h"
#include "parallel/tied_weights.h"

namespace tessera::optim {

enum class Precision { fp32, bf16, fp16 };
Precision parse_precision(const std::string& name);  // "fp32", "bf16", "fp16"; throws naming the choices
const char* precision_name(Precision p);

class MixedPrecision {
 public:
  // tied: a pipeline's tied weight, whose mirror on the last stage is multiplied in the same
  // precision and rounded with the weights, never restored (overwritten from the master after each
  // update).
  MixedPrecision(nn::ParamStore& store, Precision precision, parallel::TiedWeights* tied = nullptr);
  MixedPrecision(const MixedPrecision&) = delete;
  MixedPrecision& operator=(const MixedPrecision&) = delete;
  Precision precision() const { return precision_; }
  bool low() const { return precision_ != Precision::fp32; }

  // The held values become low precision; the fp32 master is kept. bf16 on the unsharded store:
  // those rounded on read keep their fp32 values (their readers take the store's bf16 copy).
  void round_weights();
  void restore_weights();  // the held values are the fp32 master again
  // The held gradients rounded as the low precision stores them. bf16 with sum_squares: returns
  // their sum of squares, from the same pass (the gradient norm's local sum, so it need not read
  // them again; on CUDA the host waits for it).
  std::optional<double> round_gradients(Tensor held, bool sum_squares = true);
  // The storage type of the low precision (f32 for fp32): what the models round activations to.
  DType storage() const { return rounding_.storage(); }

 private:
  Tensor held_values();
  // bf16 on the unsharded store: f(values, master) for each run of runs_rounded_in_place_, with
  // its part of the master.
  template <typename F>
  void for_each_run_rounded_in_place(Tensor flat, F f);
  void round_bf16_held(Tensor flat);

  nn::ParamStore& store_;
  Precision precision_;
  Tensor mirror_values_;  // the tied weight's mirror on the last stage, else undefined
  Tensor master_;  // the held values' fp32 copy while rounded (bf16: of runs_rounded_in_place_, end to end)
  // The runs of the flat order whose parameters are not rounded on read: what bf16 on the
  // unsharded store rounds in place.
  std::vector<parallel::Range> runs_rounded_in_place_;
  nn::PrecisionRounding rounding_;
};

}  // namespace tessera::optim
