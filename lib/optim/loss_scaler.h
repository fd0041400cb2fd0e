// The loss scaler of fp16 mixed precision: the factor the loss is multiplied by before backward,
// how it moves after each step (dynamic: back off on overflow, grow after a run of good steps),
// whether a step must be skipped, and the overflow check that every rank of every axis agrees on.
#pragma once
#include <cstdint>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace tessera::optim {

struct LossScalerConfig {
  double initial_scale = 65536.0;  // the scale of the first step (the fixed scale when static)
  double growth_factor = 2.0;      // scale *= growth_factor after growth_interval good steps
  double backoff_factor = 0.5;     // scale *= backoff_factor when the overflows use up the hysteresis
  int64_t growth_interval = 2000;  // consecutive steps without overflow before the scale grows
  int64_t hysteresis = 2;          // consecutive overflows that make the scale back off
  double min_scale = 1.0;          // the floor; an overflow that needs to go below it is an error
  bool dynamic = true;             // false: a static scaler, the scale stays initial_scale

  // Throws tessera::Error naming the first bad field, e.g. "loss scaler: growth_factor must be > 1,
  // got 0.5". Every field is checked, whether dynamic or not.
  void validate() const;
};

// What a checkpoint carries to resume the scaler exactly where it was.
struct LossScalerState {
  double scale = 65536.0;
  int64_t good_steps = 0;             // consecutive steps without overflow since the last overflow or growth
  int64_t hysteresis_left = 2;        // overflows still to come before the next back-off (0: spent)
  int64_t consecutive_overflows = 0;  // overflowing steps in a row, up to now
  int64_t skipped_steps = 0;          // steps skipped over the whole run (for the metrics)
};

// The rules, one update() per optimizer step, after the overflow check:
// - a good step (no overflow): the step is taken; the hysteresis is restored (hysteresis_left =
//   hysteresis); good_steps counts up, and at growth_interval the scale grows by growth_factor and
//   good_steps starts again from 0. (A growth that would take the scale past the largest float
//   leaves it where it is.)
// - an overflowing step: the step is skipped; good_steps drops to 0; hysteresis_left counts down,
//   and when it reaches 0 the scale backs off to max(scale * backoff_factor, min_scale). The
//   hysteresis stays spent until a good step: every further overflow in the same run of overflows
//   backs off again. So with hysteresis h, h overflows in a row make the first back-off, and each
//   one after that another (DeepSpeed's "consecutive_hysteresis"; Megatron-LM restores the
//   hysteresis only when the scale grows, not after every good step).
// - a back-off due while the scale already is min_scale throws tessera::Error: "loss scale hit its
//   minimum 1 after 18 consecutive overflowing steps ...", with what to try, rather than skipping
//   steps forever.
// A static scaler (config.dynamic = false) keeps initial_scale, skips every overflowing step, and
// only counts (consecutive_overflows, skipped_steps); the trainer's own policy decides when to stop.
class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScalerConfig& config = {});  // validates config

  double scale() const { return state_.scale; }
  float inverse_scale() const { return static_cast<float>(1.0 / state_.scale); }  // unscales the gradients
  bool dynamic() const { return config_.dynamic; }
  const LossScalerConfig& config() const { return config_; }

  // Applies the rules above to the step just computed; returns true when it must be skipped (its
  // gradients are not to be applied). overflow must be the same on every rank (overflow_anywhere).
  bool update(bool overflow);

  int64_t skipped_steps() const { return state_.skipped_steps; }
  int64_t consecutive_overflows() const { return state_.consecutive_overflows; }

  LossScalerState state() const { return state_; }
  // Resumes from a checkpoint's state. Throws naming the field if a value cannot be a scaler's
  // (a scale not positive and finite, a negative counter). hysteresis_left above this config's
  // hysteresis (the run resumed with a smaller one) is lowered to it. A static scaler keeps its
  // configured scale and takes only the counters.
  void restore(const LossScalerState& state);

 private:
  void back_off();

  LossScalerConfig config_;
  LossScalerState state_;
};

// True when any element of grads is inf or NaN. grads: f32, contiguous, on the host (or on a GPU
// in a CUDA build); empty is fine (false). Found through the sum of squares in double, which
// is finite exactly when every f32 element is.
bool any_nonfinite(const Tensor& grads);

// True on every rank of group when local is true on any: an all-reduce (max) over the group, so
// that every rank skips the same step. Pass the world communicator: an overflow on one rank of any
// mesh axis (pp, dp, ep, sp, tp) must skip the step everywhere. Collective: every rank calls it.
bool overflow_anywhere(bool local, comm::Communicator& group);

}  // namespace tessera::optim
