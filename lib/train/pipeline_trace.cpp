// PipelineTrace: slices per rank, gathered into one Chrome trace file.
#include "train/pipeline_trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "comm/string_exchange.h"
#include "core/error.h"

namespace tessera::train {

PipelineTrace::PipelineTrace(comm::Communicator& world) {
  world.barrier();
  clock_.reset();
}

void PipelineTrace::add(const std::string& name, const char* category, double start_ms, double end_ms) {
  slices_.push_back({name, category, start_ms, end_ms});
}

double PipelineTrace::compute_fraction() const {
  if (slices_.empty()) return 0.0;
  double busy = 0.0;
  for (const Slice& s : slices_)
    if (std::string(s.category) == "compute") busy += s.end - s.start;
  const double span = slices_.back().end - slices_.front().start;
  return span > 0 ? busy / span : 0.0;
}

void PipelineTrace::write(const std::string& path, comm::Communicator& world) const {
  std::string events;
  char line[512];
  for (const Slice& s : slices_) {
    std::snprintf(line, sizeof line,
                  "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.1f,\"dur\":%.1f},\n",
                  s.name.c_str(), s.category, world.rank(), s.start * 1e3, (s.end - s.start) * 1e3);
    events += line;
  }
  const std::vector<std::string> all = comm::all_gather_strings(events, world);
  if (world.rank() != 0) return;
  std::ofstream out(path);
  TESSERA_CHECK(out, "--trace: cannot write ", path);
  out << "{\"traceEvents\":[\n";
  for (int r = 0; r < world.size(); ++r) {
    std::snprintf(line, sizeof line,
                  "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n", r, r);
    out << line << all[r];
  }
  out << "{\"name\":\"end\",\"ph\":\"i\",\"pid\":0,\"tid\":0,\"ts\":0,\"s\":\"g\"}\n]}\n";
}

}  // namespace tessera::train
