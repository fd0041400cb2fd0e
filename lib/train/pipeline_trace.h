// PipelineTrace: what each rank did when, as a Chrome trace (the JSON Perfetto and
// chrome://tracing open): one process per rank, one slice per compute step or wait for a message.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/timer.h"

namespace tessera::train {

class PipelineTrace {
 public:
  double now() const { return clock_.millis(); }
  // A slice from start_ms to end_ms (now()'s clock); category "compute" or "comm".
  void add(const std::string& name, const char* category, double start_ms, double end_ms);
  // Gathers every rank's slices to rank 0 of world, which writes the file (clocks are aligned at
  // construction by a barrier, so slices of different ranks line up to within its latency).
  void write(const std::string& path, comm::Communicator& world) const;
  // Busy fraction of this rank's compute slices over [first slice, last slice], and its bubble.
  double compute_fraction() const;

  explicit PipelineTrace(comm::Communicator& world);

 private:
  struct Slice {
    std::string name;
    const char* category;
    double start, end;
  };
  Timer clock_;
  std::vector<Slice> slices_;
};

}  // namespace tessera::train
