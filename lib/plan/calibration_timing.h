// The timing tools calibration's measurements share (plan/calibration.cpp, calibration_kernels.cpp):
// a kernel timed by every rank at once, filled inputs, the ranks' mean.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace tessera::plan {

using CalibrationClock = std::chrono::steady_clock;

double seconds_since(CalibrationClock::time_point start);

// Seconds per call of `body`, measured by every rank of `world` at once (as the ranks compute at
// once in training, sharing the node's cores and memory): after a warm-up call, three windows, each
// started together by a barrier and repeating the body for at least min_seconds; the median kept.
// The body is told its call's number (counted from 0 across the windows), so that it can take its
// operands from a pool in turn (ColdPool).
double time_call(comm::Communicator& world, const std::function<void(int64_t call)>& body, double min_seconds);

// A tensor of `shape` holding value x (i % 17 + 1) / 17 at element i.
Tensor filled(Shape shape, float value);

// The mean over the world of a value each rank measured.
double world_mean(comm::Communicator& world, double x);

// How many copies of a kernel's operands (bytes_per_copy together) to take in turn so that a call
// finds its operands outside the core's private caches, as a training step's do (a block's weights
// and activations outgrow them): enough copies to fill max(16 MiB, 8 x the level-2 cache).
int64_t cold_copies(int64_t bytes_per_copy);

}  // namespace tessera::plan
