// The loss scaler's rules (see loss_scaler.h): config checks, update after each step, state
// restore, and the overflow checks on this rank's gradients and over the group.
#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ops.h"

namespace tessera::optim {

void LossScalerConfig::validate() const {
  TESSERA_CHECK(std::isfinite(initial_scale) && initial_scale > 0,
                "loss scaler: initial_scale must be positive and finite, got ", initial_scale);
  TESSERA_CHECK(std::isfinite(growth_factor) && growth_factor > 1,
                "loss scaler: growth_factor must be > 1, got ", growth_factor);
  TESSERA_CHECK(backoff_factor > 0 && backoff_factor < 1,
                "loss scaler: backoff_factor must be in (0, 1), got ", backoff_factor);
  TESSERA_CHECK(growth_interval >= 1, "loss scaler: growth_interval must be >= 1, got ", growth_interval);
  TESSERA_CHECK(hysteresis >= 1, "loss scaler: hysteresis must be >= 1, got ", hysteresis);
  TESSERA_CHECK(std::isfinite(min_scale) && min_scale > 0,
                "loss scaler: min_scale must be positive and finite, got ", min_scale);
  TESSERA_CHECK(min_scale <= initial_scale, "loss scaler: min_scale ", min_scale,
                " must not be above initial_scale ", initial_scale);
}

DynamicLossScaler::DynamicLossScaler(const LossScalerConfig& config) : config_(config) {
  config_.validate();
  state_.scale = config_.initial_scale;
  state_.hysteresis_left = config_.hysteresis;
}

bool DynamicLossScaler::update(bool overflow) {
  if (!overflow) {
    state_.consecutive_overflows = 0;
    if (!config_.dynamic) return false;
    state_.hysteresis_left = config_.hysteresis;
    if (++state_.good_steps >= config_.growth_interval) {
      state_.good_steps = 0;
      const double grown = state_.scale * config_.growth_factor;
      if (grown <= std::numeric_limits<float>::max()) state_.scale = grown;
    }
    return false;
  }
  ++state_.skipped_steps;
  ++state_.consecutive_overflows;
  if (!config_.dynamic) return true;
  state_.good_steps = 0;
  state_.hysteresis_left = std::max<int64_t>(state_.hysteresis_left - 1, 0);
  if (state_.hysteresis_left == 0) back_off();
  return true;
}

void DynamicLossScaler::back_off() {
  TESSERA_CHECK(state_.scale > config_.min_scale, "loss scale hit its minimum ", config_.min_scale, " after ",
                state_.consecutive_overflows,
                " consecutive overflowing steps: the gradients hold inf or NaN even at the smallest scale, "
                "so training has diverged or overflows fp16 itself; lower the learning rate (or warm it up "
                "longer), check the data for bad samples, or train in bf16 (--precision bf16)");
  state_.scale = std::max(state_.scale * config_.backoff_factor, config_.min_scale);
}

void DynamicLossScaler::restore(const LossScalerState& state) {
  TESSERA_CHECK(std::isfinite(state.scale) && state.scale > 0,
                "loss scaler state: scale must be positive and finite, got ", state.scale);
  TESSERA_CHECK(state.good_steps >= 0, "loss scaler state: good_steps must be >= 0, got ", state.good_steps);
  TESSERA_CHECK(state.hysteresis_left >= 0,
                "loss scaler state: hysteresis_left must be >= 0, got ", state.hysteresis_left);
  TESSERA_CHECK(state.consecutive_overflows >= 0,
                "loss scaler state: consecutive_overflows must be >= 0, got ", state.consecutive_overflows);
  TESSERA_CHECK(state.skipped_steps >= 0, "loss scaler state: skipped_steps must be >= 0, got ", state.skipped_steps);
  const double scale = config_.dynamic ? state.scale : config_.initial_scale;
  state_ = state;
  state_.scale = scale;
  state_.hysteresis_left = std::min(state.hysteresis_left, config_.hysteresis);
}

bool any_nonfinite(const Tensor& grads) {
  TESSERA_CHECK(grads.dtype() == DType::f32, "any_nonfinite: gradients must be f32, got ",
                dtype_name(grads.dtype()));
  if (grads.numel() == 0) return false;
  return !std::isfinite(ops::sum_squares(grads));
}

bool overflow_anywhere(bool local, comm::Communicator& group) {
  return group.all_reduce_max(static_cast<int64_t>(local ? 1 : 0)) != 0;
}

}  // namespace tessera::optim
