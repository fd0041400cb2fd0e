// RunTrace: slices and counters per rank, gathered into one Chrome trace file (JSON written by
// nlohmann-json).
#include "train/run_trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "comm/string_exchange.h"
#include "core/error.h"
#include "train/metrics.h"

namespace tessera::train {

RunTrace::RunTrace(comm::Communicator& world) {
  world.barrier();
  clock_.reset();
}

void RunTrace::add(const std::string& name, const char* category, double start_ms, double end_ms, int track) {
  slices_.push_back({name, category, start_ms, end_ms, track});
}

void RunTrace::add_counters(const std::string& name, double at_ms, std::vector<std::pair<std::string, double>> values) {
  counters_.push_back({name, at_ms, std::move(values)});
}

double RunTrace::compute_fraction() const {
  double busy = 0.0, first = 0.0, last = 0.0;
  bool any = false;
  for (const Slice& s : slices_) {
    const std::string category = s.category;
    if (category != "compute" && category != "comm") continue;
    if (category == "compute") busy += s.end - s.start;
    first = any ? std::min(first, s.start) : s.start;
    last = any ? std::max(last, s.end) : s.end;
    any = true;
  }
  return last > first ? busy / (last - first) : 0.0;
}

void RunTrace::write(const std::string& path, comm::Communicator& world) const {
  // Each rank's events as lines of JSON (nlohmann-json: names escaped), gathered to rank 0.
  using Json = nlohmann::ordered_json;
  const auto micros = [](double ms) { return std::round(ms * 1e4) / 10.0; };  // to 0.1 us
  std::string events;
  bool in_flight_track = false;
  for (const Slice& s : slices_) {
    events += json_text(Json{{"name", s.name}, {"cat", s.category}, {"ph", "X"}, {"pid", world.rank()},
                             {"tid", s.track}, {"ts", micros(s.start)}, {"dur", micros(s.end - s.start)}}) + ",\n";
    in_flight_track |= s.track == 1;
  }
  if (in_flight_track)  // the tracks' names in the viewer
    for (const auto& [tid, name] : {std::pair<int, const char*>{0, "training"}, {1, "ZeRO-3 communication in flight"}})
      events += json_text(Json{{"name", "thread_name"}, {"ph", "M"}, {"pid", world.rank()}, {"tid", tid},
                               {"args", {{"name", name}}}}) + ",\n";
  for (const Counters& c : counters_) {
    Json args = Json::object();
    for (const auto& [key, value] : c.values) args[key] = std::round(value * 1e3) / 1e3;
    events += json_text(Json{{"name", c.name}, {"ph", "C"}, {"pid", world.rank()}, {"ts", micros(c.at)},
                             {"args", std::move(args)}}) + ",\n";
  }
  const std::vector<std::string> all = comm::all_gather_strings(events, world);
  if (world.rank() != 0) return;
  std::ofstream out(path);
  TESSERA_CHECK(out, "--trace: cannot write ", path, ": ", std::strerror(errno));
  out << "{\"traceEvents\":[\n";
  for (int r = 0; r < world.size(); ++r)
    out << json_text(Json{{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}})
        << ",\n" << all[r];
  out << json_text(Json{{"name", "end"}, {"ph", "i"}, {"pid", 0}, {"tid", 0}, {"ts", 0}, {"s", "g"}}) << "\n]}\n";
  out.close();
  TESSERA_CHECK(out, "--trace: cannot write ", path, ": ", std::strerror(errno));
}

}  // namespace tessera::train
