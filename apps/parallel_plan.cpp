// parallel_plan: plans a parallel layout without running it. `schedule` lays out a pipeline
// schedule, verifies it in simulation and prints its timeline, bubble fraction and peak memory.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "apps/common/cli.h"
#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_verifier.h"

namespace po = boost::program_options;
using namespace tessera::parallel;

namespace {

constexpr const char* kUsage =
    "usage: parallel_plan schedule --pp P --micro M [--schedule gpipe|1f1b|interleaved|zb] [--virtual-stages V]\n"
    "\n"
    "Plans a parallel layout without running it.\n"
    "\n"
    "commands:\n"
    "  schedule   lays out the pipeline schedule's program for each of P stages over M micro-batches,\n"
    "             runs them together in simulation (forward 1 time unit, backward 2, or 1 + 1 where\n"
    "             zb splits it into input and weight gradient) and prints the timeline, one row per\n"
    "             stage (F3/B3/W3: forward, backward, weight gradient of micro-batch 3; F3:1 for\n"
    "             chunk 1; '.' idle), the bubble fraction and the peak live activations per stage";

// A mistake on the command line: cli::run_main reports po::error with exit code 2.
[[noreturn]] void usage_error(const std::string& what) { throw po::error(what); }

std::string per_stage(const PipelineReport& r, int StageReport::*field) {
  std::string text;
  for (const StageReport& st : r.stages) {
    text += ' ';
    text += std::to_string(st.*field);
  }
  return text;
}

int run_schedule(int argc, char** argv) {
  int pp = 0, micro = 0, virtual_stages = 1;
  std::string name;
  po::options_description options("schedule");
  options.add_options()("pp", po::value(&pp)->required(), "pipeline stages")(
      "micro", po::value(&micro)->required(), "micro-batches per step")(
      "schedule", po::value(&name)->default_value("1f1b"), "gpipe, 1f1b, interleaved or zb")(
      "virtual-stages", po::value(&virtual_stages)->default_value(1), "model chunks per stage (interleaved)");
  po::variables_map vm;
  if (!tessera::cli::parse(argc, argv, options, vm, kUsage)) return 0;

  PipelineSchedule schedule;
  try {
    schedule = make_schedule(name, pp, micro, virtual_stages);
  } catch (const tessera::Error& e) {
    usage_error(e.what());
  }
  check_schedule(schedule);
  const PipelineReport r = verify_schedule(schedule);

  std::printf("pipeline schedule %s: %d stages, %d micro-batches, %d chunk%s per stage\n", schedule.name.c_str(),
              schedule.stages, schedule.micro_batches, schedule.chunks, schedule.chunks > 1 ? "s" : "");
  std::printf("cost model: %s; sends and receives take no time\n",
              schedule.split_backward ? "forward 1, backward (input gradient) 1, backward_w (weight gradient) 1"
                                      : "forward 1, backward 2 (input and weight gradients)");
  std::cout << "\n" << timeline_text(schedule, r) << "\n";
  std::printf("makespan: %lld time units\n", static_cast<long long>(r.makespan));
  std::printf("bubble fraction: %.4f (idle %lld of %d stages x %lld time units)\n", r.bubble_fraction,
              static_cast<long long>(r.idle), schedule.stages, static_cast<long long>(r.makespan));
  const char* unit = schedule.chunks > 1 ? " (chunk micro-batches)" : "";
  std::printf("peak live activations per stage%s:%s\n", unit, per_stage(r, &StageReport::peak_live).c_str());
  if (schedule.split_backward)
    std::printf("peak activations awaiting backward (input gradient) per stage:%s\n",
                per_stage(r, &StageReport::peak_awaiting_backward).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tessera::cli::run_main([&] {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command.empty()) usage_error("missing command (schedule)");
    if (command == "--help" || command == "-h" || command == "help") {
      std::cout << kUsage << "\n";
      return 0;
    }
    // The command's options follow it: parse them as if it were the program name.
    if (command == "schedule") return run_schedule(argc - 1, argv + 1);
    if (command[0] == '-') usage_error("expected a command (schedule) before the option '" + command + "'");
    usage_error("unknown command '" + command + "' (expected schedule)");
  });
}
