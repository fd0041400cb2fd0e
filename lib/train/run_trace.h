// RunTrace: what each rank did when, as a Chrome trace (the JSON Perfetto and
// chrome://tracing open): one process per rank; a slice per training step, with the step's time
// split as counters, on a pipeline a slice per compute step or wait for a message inside it, and
// under ZeRO-3 each unit's use and waits (track 0) beside its gathers and reduce-scatters in flight
// (track 1).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/timer.h"
#include "core/trace_sink.h"

namespace tessera::train {

class RunTrace : public TraceSink {
 public:
  double now() const override { return clock_.millis(); }
  // A slice from start_ms to end_ms (now()'s clock) on track 0; category "step", "compute" or "comm".
  void add(const std::string& name, const char* category, double start_ms, double end_ms) {
    add(name, category, start_ms, end_ms, 0);
  }
  void add(const std::string& name, const char* category, double start_ms, double end_ms, int track) override;
  // Counters at at_ms: one track per name in the viewer, e.g. a step's milliseconds per kind.
  void add_counters(const std::string& name, double at_ms, std::vector<std::pair<std::string, double>> values);
  // Gathers every rank's slices to rank 0 of world, which writes the file (clocks are aligned at
  // construction by a barrier, so slices of different ranks line up to within its latency).
  void write(const std::string& path, comm::Communicator& world) const;
  // Busy fraction of this rank's compute slices over [first, last] compute or comm slice (the
  // pipeline's categories): the pipeline's bubble is the rest.
  double compute_fraction() const;

  explicit RunTrace(comm::Communicator& world);

 private:
  struct Slice {
    std::string name;
    const char* category;
    double start, end;
    int track;
  };
  struct Counters {
    std::string name;
    double at;
    std::vector<std::pair<std::string, double>> values;
  };
  Timer clock_;
  std::vector<Slice> slices_;
  std::vector<Counters> counters_;
};

}  // namespace tessera::train
