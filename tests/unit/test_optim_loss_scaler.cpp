// Unit tests of the loss scaler: an injected inf or NaN skips the step and backs off (hysteresis 1
// and 2), growth after exactly growth_interval good steps, the minimum-scale error, static mode,
// config validation, and the state round trip a checkpoint makes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "optim/loss_scaler.h"

using tessera::DType;
using tessera::Tensor;
using tessera::optim::any_nonfinite;
using tessera::optim::DynamicLossScaler;
using tessera::optim::LossScalerConfig;
using tessera::optim::LossScalerState;

namespace {

// Gradients of n elements, all finite, with `poison` at element `at` when at >= 0.
Tensor gradients(int64_t n, int64_t at = -1, float poison = std::numeric_limits<float>::infinity()) {
  Tensor g = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) g.data<float>()[i] = 0.001f * static_cast<float>(i % 7) - 0.002f;
  if (at >= 0) g.data<float>()[at] = poison;
  return g;
}

LossScalerConfig config(int64_t hysteresis, int64_t growth_interval = 2000) {
  LossScalerConfig c;
  c.hysteresis = hysteresis;
  c.growth_interval = growth_interval;
  return c;
}

// Runs `call`, which must throw tessera::Error containing every one of `words`.
template <typename F>
void expect_error(F&& call, std::initializer_list<std::string> words) {
  try {
    call();
    ADD_FAILURE() << "no error thrown";
  } catch (const tessera::Error& e) {
    const std::string what = e.what();
    for (const std::string& w : words) EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' not in: " << what;
  }
}

}  // namespace

TEST(LossScaler, DefaultsAreTheDocumentedOnes) {
  const LossScalerConfig c;
  EXPECT_EQ(c.initial_scale, 65536.0);
  EXPECT_EQ(c.growth_factor, 2.0);
  EXPECT_EQ(c.backoff_factor, 0.5);
  EXPECT_EQ(c.growth_interval, 2000);
  EXPECT_EQ(c.hysteresis, 2);
  EXPECT_EQ(c.min_scale, 1.0);
  EXPECT_TRUE(c.dynamic);
  EXPECT_NO_THROW(c.validate());
  const DynamicLossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.inverse_scale(), 1.0f / 65536.0f);
  EXPECT_EQ(s.skipped_steps(), 0);
}

TEST(LossScaler, FindsInfAndNanAnywhere) {
  const int64_t n = 100003;  // past the kernels' threshold for running threads
  EXPECT_FALSE(any_nonfinite(gradients(n)));
  EXPECT_TRUE(any_nonfinite(gradients(n, 0)));
  EXPECT_TRUE(any_nonfinite(gradients(n, n - 1, -std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(any_nonfinite(gradients(n, n / 2, std::numeric_limits<float>::quiet_NaN())));
  // The largest finite floats square to a finite double: no false alarm.
  Tensor big = gradients(n);
  for (int64_t i = 0; i < n; ++i) big.data<float>()[i] = std::numeric_limits<float>::max();
  EXPECT_FALSE(any_nonfinite(big));
  EXPECT_FALSE(any_nonfinite(Tensor::empty({0}, DType::f32)));
  expect_error([] { any_nonfinite(Tensor::zeros({4}, DType::bf16)); }, {"any_nonfinite", "f32", "bf16"});
}

TEST(LossScaler, InjectedInfSkipsAndBacksOffAtOnceWithHysteresisOne) {
  DynamicLossScaler s(config(1));
  EXPECT_FALSE(s.update(any_nonfinite(gradients(64))));
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.update(any_nonfinite(gradients(64, 17))));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.update(any_nonfinite(gradients(64, 3))));
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 16384.0);  // a good step does not grow it back before the interval
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 8192.0);
  EXPECT_EQ(s.skipped_steps(), 3);
}

TEST(LossScaler, HysteresisTwoToleratesOneOverflowThenBacksOffOnEachFurther) {
  DynamicLossScaler s(config(2));
  EXPECT_TRUE(s.update(any_nonfinite(gradients(64, 5))));  // skipped, scale kept
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.state().hysteresis_left, 1);
  EXPECT_TRUE(s.update(true));  // the second in a row backs off
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.update(true));  // hysteresis spent: the third backs off again
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.consecutive_overflows(), 3);
  EXPECT_FALSE(s.update(false));  // a good step restores the hysteresis
  EXPECT_EQ(s.state().hysteresis_left, 2);
  EXPECT_EQ(s.consecutive_overflows(), 0);
  EXPECT_TRUE(s.update(true));  // tolerated again
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.skipped_steps(), 4);
}

TEST(LossScaler, HysteresisCountsOnlyConsecutiveOverflows) {
  DynamicLossScaler s(config(3));
  for (int round = 0; round < 5; ++round) {  // overflow, overflow, good: never 3 in a row
    EXPECT_TRUE(s.update(true));
    EXPECT_TRUE(s.update(true));
    EXPECT_FALSE(s.update(false));
  }
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.skipped_steps(), 10);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0);
}

TEST(LossScaler, GrowsAfterExactlyTheIntervalOfGoodSteps) {
  LossScalerConfig c = config(2, 5);
  c.initial_scale = 1024;
  c.growth_factor = 4;
  DynamicLossScaler s(c);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.state().good_steps, 4);
  EXPECT_FALSE(s.update(false));  // the fifth
  EXPECT_EQ(s.scale(), 4096.0);
  EXPECT_EQ(s.state().good_steps, 0);
  for (int i = 0; i < 4; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 4096.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 16384.0);
}

TEST(LossScaler, AnOverflowRestartsTheGrowthCount) {
  LossScalerConfig c = config(2, 3);  // hysteresis 2: one overflow does not back off
  DynamicLossScaler s(c);
  s.update(false);
  s.update(false);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.state().good_steps, 0);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.0);  // two good steps since the overflow, not four
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0);
}

TEST(LossScaler, GrowthStopsBelowTheLargestFloat) {
  LossScalerConfig c = config(1, 1);
  c.initial_scale = std::ldexp(1.0, 126);
  DynamicLossScaler s(c);
  s.update(false);
  EXPECT_EQ(s.scale(), std::ldexp(1.0, 127));
  s.update(false);
  EXPECT_EQ(s.scale(), std::ldexp(1.0, 127));  // 2^128 is not a float
  EXPECT_TRUE(std::isfinite(s.inverse_scale()) && s.inverse_scale() > 0);
}

TEST(LossScaler, MinimumScaleIsAnErrorNotAStall) {
  LossScalerConfig c = config(1);
  c.initial_scale = 4;
  c.min_scale = 1;
  DynamicLossScaler s(c);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 1.0);  // the minimum itself is tried
  expect_error([&] { s.update(true); },
               {"loss scale hit its minimum 1 after 3 consecutive overflowing steps", "lower the learning rate",
                "bf16"});
}

TEST(LossScaler, MinimumScaleErrorCountsTheOverflowsWithHysteresis) {
  LossScalerConfig c = config(2);
  c.initial_scale = 3;
  c.min_scale = 2;
  DynamicLossScaler s(c);
  EXPECT_FALSE(s.update(false));
  EXPECT_TRUE(s.update(true));  // tolerated
  EXPECT_TRUE(s.update(true));  // backs off, clamped to the minimum
  EXPECT_EQ(s.scale(), 2.0);
  expect_error([&] { s.update(true); }, {"loss scale hit its minimum 2 after 3 consecutive overflowing steps"});
}

TEST(LossScaler, StaticScalerSkipsButNeverMoves) {
  LossScalerConfig c = config(1, 2);
  c.dynamic = false;
  c.initial_scale = 128;
  c.min_scale = 128;
  DynamicLossScaler s(c);
  EXPECT_FALSE(s.dynamic());
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(s.update(any_nonfinite(gradients(8, 2))));  // no error at the floor
  EXPECT_EQ(s.scale(), 128.0);
  EXPECT_EQ(s.consecutive_overflows(), 50);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 128.0);
  EXPECT_EQ(s.skipped_steps(), 50);
  EXPECT_EQ(s.consecutive_overflows(), 0);
}

TEST(LossScaler, ConfigValidationNamesTheField) {
  auto refused = [](auto change, std::initializer_list<std::string> words) {
    LossScalerConfig c;
    change(c);
    expect_error([&] { c.validate(); }, words);
    expect_error([&] { DynamicLossScaler s(c); }, words);
  };
  refused([](LossScalerConfig& c) { c.initial_scale = 0; }, {"initial_scale", "0"});
  refused([](LossScalerConfig& c) { c.initial_scale = std::numeric_limits<double>::infinity(); }, {"initial_scale"});
  refused([](LossScalerConfig& c) { c.growth_factor = 1; }, {"growth_factor must be > 1, got 1"});
  refused([](LossScalerConfig& c) { c.growth_factor = std::nan(""); }, {"growth_factor"});
  refused([](LossScalerConfig& c) { c.backoff_factor = 1; }, {"backoff_factor must be in (0, 1), got 1"});
  refused([](LossScalerConfig& c) { c.backoff_factor = 0; }, {"backoff_factor"});
  refused([](LossScalerConfig& c) { c.backoff_factor = std::nan(""); }, {"backoff_factor"});
  refused([](LossScalerConfig& c) { c.growth_interval = 0; }, {"growth_interval must be >= 1, got 0"});
  refused([](LossScalerConfig& c) { c.hysteresis = 0; }, {"hysteresis must be >= 1, got 0"});
  refused([](LossScalerConfig& c) { c.min_scale = -1; }, {"min_scale", "-1"});
  refused([](LossScalerConfig& c) { c.min_scale = 1e6; }, {"min_scale 1e+06 must not be above initial_scale 65536"});
}

TEST(LossScaler, StateRoundTripResumesExactly) {
  LossScalerConfig c = config(2, 4);
  DynamicLossScaler a(c);
  // Overflow, overflow (back-off), three good, overflow: mid-way through everything.
  for (bool overflow : {true, true, false, false, false, true}) a.update(overflow);
  const LossScalerState saved = a.state();
  EXPECT_EQ(saved.scale, 32768.0);
  EXPECT_EQ(saved.good_steps, 0);
  EXPECT_EQ(saved.hysteresis_left, 1);
  EXPECT_EQ(saved.consecutive_overflows, 1);
  EXPECT_EQ(saved.skipped_steps, 3);

  DynamicLossScaler b(c);
  b.restore(saved);
  EXPECT_EQ(b.scale(), a.scale());
  const std::vector<bool> next = {true, false, false, false, false, true, false, false, false, false, false};
  for (bool overflow : next) {
    EXPECT_EQ(a.update(overflow), b.update(overflow));
    EXPECT_EQ(a.scale(), b.scale());
  }
  const LossScalerState sa = a.state(), sb = b.state();
  EXPECT_EQ(sa.scale, sb.scale);
  EXPECT_EQ(sa.good_steps, sb.good_steps);
  EXPECT_EQ(sa.hysteresis_left, sb.hysteresis_left);
  EXPECT_EQ(sa.consecutive_overflows, sb.consecutive_overflows);
  EXPECT_EQ(sa.skipped_steps, sb.skipped_steps);
}

TEST(LossScaler, RestoreRefusesNonsenseAndAdaptsToTheConfig) {
  DynamicLossScaler s(config(2));
  LossScalerState bad;
  bad.scale = -4;
  expect_error([&] { s.restore(bad); }, {"scale", "-4"});
  bad = {};
  bad.good_steps = -1;
  expect_error([&] { s.restore(bad); }, {"good_steps"});
  bad = {};
  bad.hysteresis_left = -1;
  expect_error([&] { s.restore(bad); }, {"hysteresis_left"});

  LossScalerState saved;  // from a run with hysteresis 5
  saved.scale = 256;
  saved.hysteresis_left = 5;
  s.restore(saved);
  EXPECT_EQ(s.state().hysteresis_left, 2);
  EXPECT_EQ(s.scale(), 256.0);

  LossScalerConfig fixed = config(2);
  fixed.dynamic = false;
  fixed.initial_scale = 1024;
  DynamicLossScaler st(fixed);
  saved.skipped_steps = 7;
  st.restore(saved);
  EXPECT_EQ(st.scale(), 1024.0);  // a static scaler keeps its own scale
  EXPECT_EQ(st.skipped_steps(), 7);
}
