// parallel_plan: plans a parallel layout without running it. `schedule` lays out a pipeline
// schedule, verifies it in simulation and prints its timeline, bubble fraction and peak memory.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "apps/common/cli.h"
#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_verifier.h"

namespace po = boost::program_options;
using namespace tessera::parallel;

namespace {

constexpr const char* kUsage =
    "usage: parallel_plan schedule --pp P --micro-batches M [--pp-schedule gpipe|1f1b|interleaved|zb] [--virtual-stages V]\n"
    "       parallel_plan schedule --pp P --global-batch G --micro-batch B [--dp D] [--pp-schedule ...]\n"
    "       parallel_plan --version\n"
    "\n"
    "Plans a parallel layout without running it. The options are the trainers' (gpt_train --help):\n"
    "a step's micro-batches are --micro-batches, or global-batch / (micro-batch x dp) as the trainers\n"
    "split them.\n"
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

constexpr const char* kExample =
    "  parallel_plan schedule --pp 4 --micro-batches 8 --pp-schedule 1f1b\n"
    "  parallel_plan schedule --pp 2 --global-batch 16 --micro-batch 2 --dp 2 --pp-schedule zb";

int run_schedule(int argc, char** argv) {
  int pp = 0, micro = 0, virtual_stages = 1;
  int64_t global_batch = 0, micro_batch = 0, dp = 1;
  std::string name;
  tessera::cli::OptionSections options;
  options.section(tessera::cli::kLayout).add_options()
      ("pp", po::value(&pp)->required()->value_name("P"), "pipeline stages")
      ("pp-schedule", po::value(&name)->default_value("1f1b")->value_name("gpipe|1f1b|interleaved|zb"), "the pipeline schedule")
      ("virtual-stages", po::value(&virtual_stages)->default_value(1)->value_name("V"), "model chunks per stage (interleaved)")
      ("dp", po::value(&dp)->default_value(1)->value_name("D"), "data-parallel ranks (with --global-batch)");
  options.section(tessera::cli::kTraining).add_options()
      ("micro-batches", po::value(&micro)->value_name("M"), "micro-batches per step (or give --global-batch and --micro-batch)")
      ("global-batch", po::value(&global_batch)->value_name("G"), "samples per optimizer step, as the trainers take it")
      ("micro-batch", po::value(&micro_batch)->value_name("B"), "samples per forward/backward on a rank (with --global-batch)");
  po::variables_map vm;
  const std::vector<tessera::cli::RenamedOption> renamed = {{"micro", "micro-batches"}, {"schedule", "pp-schedule"}};
  if (!tessera::cli::parse(argc, argv, options, vm, {"parallel_plan", kUsage, kExample}, renamed)) return 0;
  const bool count = vm.count("micro-batches") > 0, split = vm.count("global-batch") || vm.count("micro-batch");
  if (count == split)
    usage_error(count ? "give --micro-batches or --global-batch with --micro-batch, not both"
                      : "the option '--micro-batches' is required (or --global-batch with --micro-batch, as the trainers"
                        " take them)");
  if (split) {
    if (!vm.count("global-batch") || !vm.count("micro-batch"))
      usage_error("--global-batch and --micro-batch go together: the step's micro-batches are global-batch / "
                  "(micro-batch x dp)");
    if (global_batch < 1 || micro_batch < 1 || dp < 1)
      usage_error("--global-batch, --micro-batch and --dp must be at least 1");
    if (global_batch % (micro_batch * dp) != 0)
      usage_error("--global-batch " + std::to_string(global_batch) + " does not split into micro-batches of " +
                  std::to_string(micro_batch) + " over --dp " + std::to_string(dp));
    const int64_t m = global_batch / (micro_batch * dp);
    if (m > 1 << 20) usage_error("too large: " + std::to_string(m) + " micro-batches per step");
    micro = static_cast<int>(m);
  }

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
      std::cout << kUsage << "\nExample:\n" << kExample << "\n";
      return 0;
    }
    if (command == "--version") {
      std::cout << tessera::cli::version_text("parallel_plan");
      return 0;
    }
    // The command's options follow it: parse them as if it were the program name.
    if (command == "schedule") return run_schedule(argc - 1, argv + 1);
    if (command[0] == '-') usage_error("expected a command (schedule) before the option '" + command + "'");
    usage_error("unknown command '" + command + "' (expected schedule)");
  });
}
