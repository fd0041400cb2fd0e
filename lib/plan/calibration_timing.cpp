// Timing tools of the calibration (plan/calibration_timing.h).
#include "plan/calibration_timing.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

namespace tessera::plan {

double seconds_since(CalibrationClock::time_point start) {
  return std::chrono::duration<double>(CalibrationClock::now() - start).count();
}

double time_call(comm::Communicator& world, const std::function<void(int64_t call)>& body, double min_seconds) {
  int64_t call = 0;
  body(call++);
  std::vector<double> windows;
  for (int window = 0; window < 3; ++window) {
    world.barrier();
    int64_t calls = 0;
    const CalibrationClock::time_point start = CalibrationClock::now();
    do {
      body(call++);
      ++calls;
    } while (seconds_since(start) < min_seconds);
    windows.push_back(seconds_since(start) / static_cast<double>(calls));
  }
  std::sort(windows.begin(), windows.end());
  return windows[1];
}

Tensor filled(Shape shape, float value) {
  Tensor t = Tensor::empty(std::move(shape));
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value * static_cast<float>((i % 17) + 1) / 17.0f;
  return t;
}

double world_mean(comm::Communicator& world, double x) {
  Tensor t = Tensor::empty({1});
  t.data<float>()[0] = static_cast<float>(x);
  world.all_reduce_sum(t);
  return static_cast<double>(t.data<float>()[0]) / world.size();
}

int64_t cold_copies(int64_t bytes_per_copy) {
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const int64_t pool = std::max<int64_t>(int64_t{16} << 20, 8 * std::max<long>(l2, 0));
  return std::clamp<int64_t>((pool + bytes_per_copy - 1) / std::max<int64_t>(bytes_per_copy, 1), 1, 256);
}

}  // namespace tessera::plan
