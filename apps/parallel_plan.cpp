// parallel_plan: plans a parallel layout without running it. `schedule` lays out a pipeline
// schedule, verifies it in simulation and prints its timeline, bubble fraction and peak memory.
#include <boost/program_options.hpp>

#include <nlohmann/json.hpp>
#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "apps/common/cli.h"
#include "apps/common/layout_search.h"
#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "plan/calibration.h"
#include "plan/machine_model.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_verifier.h"

namespace po = boost::program_options;
using namespace tessera::parallel;

namespace {

constexpr const char* kUsage =
    "usage: parallel_plan calibrate --output machine.json [--threads N]   (under mpirun -np N, or alone)\n"
    "       parallel_plan search --ranks N [--ranks-per-node K] --device-memory BYTES --machine machine.json\n"
    "                            [--top T] [--json] [--explain \"LAYOUT FLAGS\"] [--vocab V] [--wire-bytes 4|2]\n"
    "                            [--trainer gpt_train|moe_train] TRAINER_OPTIONS...\n"
    "       parallel_plan schedule --pp P --micro-batches M [--pp-schedule gpipe|1f1b|interleaved|zb] [--virtual-stages V]\n"
    "       parallel_plan schedule --pp P --global-batch G --micro-batch B [--dp D] [--pp-schedule ...]\n"
    "       parallel_plan --version\n"
    "\n"
    "Plans a parallel layout without running it. The options are the trainers' (gpt_train --help):\n"
    "a step's micro-batches are --micro-batches, or global-batch / (micro-batch x dp) as the trainers\n"
    "split them.\n"
    "\n"
    "commands:\n"
    "  calibrate  measures this machine (or allocation) for the time model: GEMM rates by shape class and\n"
    "             precision, attention, the other kernels per element, memory copies, and each collective's\n"
    "             latency and bandwidth per group size inside a node and across nodes; writes plain JSON\n"
    "             (never over an existing file)\n"
    "  search     every gpt_train (or --trainer moe_train) layout of N ranks (dp, tp, pp and schedule, sp and\n"
    "             mode, moe_train's ep, ZeRO, micro-batch, activation checkpointing, offload) checked as the trainer checks it, its memory planned as\n"
    "             --dry-run plans it, its step time predicted from the machine file; prints the fastest that\n"
    "             fit in --device-memory with their command lines, and the rejected layouts by reason.\n"
    "             The model and training are gpt_train's own options (--config, --input or --vocab, --layers,\n"
    "             --hidden, --heads, --seq-len, --global-batch, --arch, --precision, ...); layout flags are the\n"
    "             search's to choose. --explain \"--dp 2 --tp 2 ...\" prints one layout's breakdown instead,\n"
    "             with its model FLOPs (Narayanan et al. 2021's count) and TFLOP/s per rank. --wire-bytes 2\n"
    "             times collectives and pipeline messages of half-precision values (a trainer such as\n"
    "             Megatron-LM; tessera's own, the default, move fp32: 4)\n"
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
    "  mpirun -np 4 parallel_plan calibrate --output machine.json\n"
    "  parallel_plan search --ranks 4 --device-memory 1G --machine machine.json --config inputs/gpt_tiny.ini --input data.h5\n"
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


// ---- calibrate --------------------------------------------------------------------------------

int run_calibrate(int argc, char** argv) {
  std::string output;
  int threads = 0;
  tessera::cli::OptionSections options;
  options.section("Calibration").add_options()
      ("output", po::value(&output)->required()->value_name("machine.json"), "the machine file to write (never over an existing file)")
      ("threads", po::value(&threads)->default_value(0)->value_name("N"), "CPU threads per rank, as the trainers' --threads (0: OMP_NUM_THREADS or all cores)");
  po::variables_map vm;
  if (!tessera::cli::parse(argc, argv, options, vm, {"parallel_plan", kUsage, kExample})) return 0;
  if (threads < 0) usage_error("--threads must be >= 0, got " + std::to_string(threads));
  if (threads > 0) omp_set_num_threads(threads);
  std::error_code ec;
  if (std::filesystem::exists(output, ec))
    usage_error("--output " + output + " exists: calibrate never writes over a file (remove it or give another path)");
  tessera::comm::Communicator world = tessera::comm::Communicator::world();
  const tessera::plan::MachineModel machine = tessera::plan::calibrate(world);
  if (world.rank() == 0) {
    const std::string tmp = output + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary);
      out << tessera::plan::to_json(machine);
      TESSERA_CHECK(out.good(), "cannot write ", tmp);
    }
    std::filesystem::rename(tmp, output);
    std::printf("calibrated %d rank(s) on %d node(s) (%d per node, %d thread(s) each, %d core(s) per node): wrote %s\n",
                machine.ranks, machine.nodes, machine.ranks_per_node, machine.threads_per_rank, machine.cores_per_node,
                output.c_str());
    std::printf("GEMM f32 large: %.1f GFLOP/s per rank; attention %.1f GFLOP/s; copies %.1f GB/s\n",
                machine.gemm.at("f32").back().flops_per_s / 1e9, machine.attention_flops_per_s / 1e9,
                machine.copy_bytes_per_s / 1e9);
  }
  world.barrier();
  return 0;
}

// ---- search -----------------------------------------------------------------------------------

std::string joined(const std::vector<std::string>& args) {
  std::string text;
  for (const std::string& a : args) {
    const bool plain = a.find_first_of(" \t'\"$\\") == std::string::npos && !a.empty();
    text += (text.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return text;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// The machine file can time these ranks: collectives measured inside a node (and across nodes when
// the ranks span several).
void check_machine_covers(const tessera::plan::MachineModel& m, const std::string& path, int ranks, int per_node) {
  const auto has = [&](const char* domain) {
    const auto d = m.collectives.find(domain);
    return d != m.collectives.end() && !d->second.empty();
  };
  TESSERA_CHECK(ranks == 1 || has("intra_node"), path, ": no collective was measured (calibrated on ", m.ranks,
                " rank); run mpirun -np ", std::min(ranks, per_node), " parallel_plan calibrate for a search of ",
                ranks, " ranks");
  TESSERA_CHECK(ranks <= per_node || has("inter_node"), path, ": no collective was measured across nodes (calibrated",
                " on ", m.nodes, " node); --ranks ", ranks, " over --ranks-per-node ", per_node,
                " spans nodes: calibrate on an allocation of several nodes");
}

int run_search(int argc, char** argv) {
  int ranks = 0, per_node = 0, top = 10;
  std::string memory, machine_path, explain;
  int64_t vocab = 0;
  int wire_bytes = 4;
  std::string trainer_name;
  bool json = false;
  po::options_description search("Search");
  search.add_options()
      ("ranks", po::value(&ranks)->required()->value_name("N"), "ranks of the run (mpirun -np N)")
      ("ranks-per-node", po::value(&per_node)->default_value(0)->value_name("K"), "consecutive ranks per node (0: all N on one node)")
      ("device-memory", po::value(&memory)->required()->value_name("BYTES"), "bytes per rank the plan must fit (suffix K, M, G)")
      ("machine", po::value(&machine_path)->required()->value_name("machine.json"), "parallel_plan calibrate's file")
      ("top", po::value(&top)->default_value(10)->value_name("T"), "layouts printed (0: all that fit)")
      ("json", po::bool_switch(&json), "print the ranked list as JSON")
      ("explain", po::value(&explain)->value_name("\"LAYOUT FLAGS\""), "print the breakdown of this one layout (\"--dp 2 --tp 2 ...\")")
      ("vocab", po::value(&vocab)->default_value(0)->value_name("V"), "the vocabulary, where no --input names a data set")
      ("trainer", po::value(&trainer_name)->default_value("gpt_train")->value_name("gpt_train|moe_train"), "whose layouts and options: moe_train adds ep and its expert options (--experts, --top-k, ...)")
      ("wire-bytes", po::value(&wire_bytes)->default_value(4)->value_name("4|2"), "bytes per activation and gradient value the collectives move (2: a half-precision trainer)");
  po::variables_map vm;
  const po::parsed_options parsed = po::command_line_parser(argc, argv).options(search).allow_unregistered().run();
  tessera::cli::check_parsed(parsed, tessera::cli::kOnCommandLine);
  po::store(parsed, vm);
  std::vector<std::string> trainer = po::collect_unrecognized(parsed.options, po::include_positional);
  if (!trainer.empty() && trainer.front() == argv[0]) trainer.erase(trainer.begin());
  po::notify(vm);
  if (ranks < 1) usage_error("--ranks must be >= 1, got " + std::to_string(ranks));
  if (per_node == 0) per_node = ranks;
  if (per_node < 1) usage_error("--ranks-per-node must be >= 1, got " + std::to_string(per_node));
  if (top < 0) usage_error("--top must be >= 0, got " + std::to_string(top));
  if (vocab < 0) usage_error("--vocab must be >= 1, got " + std::to_string(vocab));
  if (wire_bytes != 4 && wire_bytes != 2) usage_error("--wire-bytes must be 4 (fp32) or 2 (half precision), got " + std::to_string(wire_bytes));
  tessera::cli::SearchInput input;
  input.ranks = ranks;
  input.ranks_per_node = per_node;
  input.device_memory = tessera::cli::parse_bytes(memory, "--device-memory");
  if (input.device_memory <= 0) usage_error("--device-memory must be > 0 bytes, got " + memory);
  input.trainer_args = trainer;
  input.vocab = vocab;
  input.wire_bytes = wire_bytes;
  if (trainer_name == "vit_train")
    usage_error("--trainer vit_train: the memory planner and time model do not cover vit_train yet (gpt_train, moe_train)");
  if (trainer_name != "gpt_train" && trainer_name != "moe_train")
    usage_error("--trainer " + trainer_name + ": expected gpt_train or moe_train");
  input.moe = trainer_name == "moe_train";
  const tessera::plan::MachineModel machine = tessera::plan::read_machine_file(machine_path);
  check_machine_covers(machine, machine_path, ranks, per_node);

  if (vm.count("explain")) {
    const tessera::cli::LayoutChoice c = tessera::cli::evaluate_layout(input, machine, split_words(explain));
    std::cout << "layout: " << c.args_text() << " on " << ranks << " rank(s), " << per_node << " per node\n\n";
    std::cout << tessera::plan::describe(c.time);
    const double model_flops = tessera::plan::megatron_model_flops(c.run);
    if (!input.moe)  // the paper's count is a dense GPT's
      std::printf("  model FLOPs per step (Narayanan et al. 2021, eq. 3): %.6g; per rank: %.1f TFLOP/s\n\n", model_flops,
                model_flops / (c.time.step_s * ranks) / 1e12);
    std::cout << tessera::plan::describe(c.memory, c.run);
    std::cout << (c.peak() <= input.device_memory ? "fits" : "does NOT fit") << " in --device-memory "
              << input.device_memory << " bytes\n";
    return 0;
  }

  const tessera::cli::SearchResult r = tessera::cli::search_layouts(input, machine);
  int64_t rejected = 0;
  std::string reasons;
  for (const auto& [reason, count] : r.rejected) {
    rejected += count;
    reasons += "  " + std::to_string(count) + "  " + reason + "\n";
  }
  if (r.ranked.empty()) {
    if (r.smallest_peak >= 0)
      tessera::fail("no layout of ", ranks, " ranks fits in --device-memory ", input.device_memory, " bytes: the",
                    " smallest plan, ", joined(r.smallest_args), ", needs ", r.smallest_peak, " bytes per rank (",
                    mib(r.smallest_peak), " MiB); give more memory or ranks, or a smaller model or micro-batch");
    std::string why;
    for (const auto& [reason, count] : r.rejected) why += (why.empty() ? "" : "; ") + std::to_string(count) + " x " + reason;
    tessera::fail("no valid layout of --ranks ", ranks, " for this model and batch (", r.enumerated,
                  " enumerated): ", why);
  }
  const size_t shown = top == 0 ? r.ranked.size() : std::min<size_t>(top, r.ranked.size());
  const std::string prefix = "mpirun -np " + std::to_string(ranks) + " " + trainer_name;
  if (json) {
    nlohmann::json j;
    j["trainer"] = trainer_name;
    j["ranks"] = ranks;
    j["ranks_per_node"] = per_node;
    j["device_memory"] = input.device_memory;
    j["machine"] = machine_path;
    j["enumerated"] = r.enumerated;
    j["fitting"] = r.ranked.size();
    j["trainer_args"] = trainer;
    j["layouts"] = nlohmann::json::array();
    for (size_t i = 0; i < shown; ++i) {
      const tessera::cli::LayoutChoice& c = r.ranked[i];
      j["layouts"].push_back({{"rank", i + 1},
                              {"args", c.args},
                              {"predicted_step_ms", c.time.step_s * 1e3},
                              {"predicted_tokens_per_s", c.time.tokens_per_s},
                              {"peak_bytes", c.peak()},
                              {"bubble_ms", c.time.bubble_s * 1e3},
                              {"comm_exposed_ms", c.time.comm_exposed() * 1e3}});
    }
    for (const auto& [reason, count] : r.rejected) j["rejected"][reason] = count;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("search: %d rank(s), %d per node, %s bytes of device memory per rank, machine %s (%s, %d thread(s) per rank)\n",
              ranks, per_node, std::to_string(input.device_memory).c_str(), machine_path.c_str(), machine.host.c_str(),
              machine.threads_per_rank);
  std::printf("layouts: %lld enumerated, %zu fit, %lld rejected\n\n", static_cast<long long>(r.enumerated),
              r.ranked.size(), static_cast<long long>(rejected));
  std::printf("%4s %12s %12s %10s  %s\n", "rank", "step ms", "tokens/s", "peak MiB", "layout");
  for (size_t i = 0; i < shown; ++i) {
    const tessera::cli::LayoutChoice& c = r.ranked[i];
    std::printf("%4zu %12.3f %12.0f %10s  %s\n", i + 1, c.time.step_s * 1e3, c.time.tokens_per_s, mib(c.peak()).c_str(),
                c.args_text().c_str());
  }
  std::printf("\nthe fastest:\n  %s %s %s\n", prefix.c_str(), joined(trainer).c_str(), r.ranked.front().args_text().c_str());
  std::printf("\nrejected by reason:\n%s", reasons.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::comm::MpiRuntime mpi(&argc, &argv);
  const int code = tessera::cli::run_main([&] {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command.empty()) usage_error("missing command (calibrate, search or schedule)");
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
    if (command == "calibrate") return run_calibrate(argc - 1, argv + 1);
    if (command == "search") return run_search(argc - 1, argv + 1);
    if (command[0] == '-') usage_error("expected a command (calibrate, search, schedule) before the option '" + command + "'");
    usage_error("unknown command '" + command + "' (expected calibrate, search or schedule)");
  });
  // A failing rank of a calibration ends the whole job: no peer is left waiting in a collective.
  if (code != 0 && mpi.world_size() > 1) tessera::comm::abort_job(code);
  return code;
}
