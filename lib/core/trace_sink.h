// TraceSink: where code below the trainer records timeline slices for `--trace` (train/RunTrace
// writes them as a Chrome trace). A track is a row of the rank's timeline: 0 is the training
// thread's work; 1 holds operations in flight beside it (ZeRO-3's gathers and reduce-scatters).
#pragma once
#include <string>

namespace tessera {

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  virtual double now() const = 0;  // milliseconds on the trace's clock
  // A slice from start_ms to end_ms; category e.g. "step", "compute", "comm", "zero3".
  virtual void add(const std::string& name, const char* category, double start_ms, double end_ms, int track) = 0;
};

}  // namespace tessera
