// RunTrace: slices and counters per rank, gathered into one Chrome trace file.
#include "train/run_trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "comm/string_exchange.h"
#include "core/error.h"

namespace tessera::train {

RunTrace::RunTrace(comm::Communicator& world) {
  world.barrier();
  clock_.reset();
}

void RunTrace::add(const std::string& name, const char* category, double start_ms, double end_ms) {
  slices_.push_back({name, category, start_ms, end_ms});
}

void RunTrace::add_counters(const std::string& name, double at_ms, std::vector<std::pair<std::string, double>> values) {
  counters_.push_back({name, at_ms, std::move(values)});
}

double RunTrace::compute_fraction() const {
  double busy = 0.0, first = 0.0, last = 0.0;
  bool any = false;
  for (const Slice& s : slices_) {
    const std::string category = s.category;
    if (category == "step") continue;
    if (category == "compute") busy += s.end - s.start;
    first = any ? std::min(first, s.start) : s.start;
    last = any ? std::max(last, s.end) : s.end;
    any = true;
  }
  return last > first ? busy / (last - first) : 0.0;
}

void RunTrace::write(const std::string& path, comm::Communicator& world) const {
  std::string events;
  char line[512];
  for (const Slice& s : slices_) {
    std::snprintf(line, sizeof line,
                  "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.1f,\"dur\":%.1f},\n",
                  s.name.c_str(), s.category, world.rank(), s.start * 1e3, (s.end - s.start) * 1e3);
    events += line;
  }
  for (const Counters& c : counters_) {
    std::string args;
    for (const auto& [key, value] : c.values) {
      std::snprintf(line, sizeof line, "%s\"%s\":%.3f", args.empty() ? "" : ",", key.c_str(), value);
      args += line;
    }
    std::snprintf(line, sizeof line, "{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%d,\"ts\":%.1f,\"args\":{",
                  c.name.c_str(), world.rank(), c.at * 1e3);
    events += line + args + "}},\n";
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
