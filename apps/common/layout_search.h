// The layout search behind `parallel_plan search` and --layout auto: every gpt_train, moe_train or
// vit_train layout of N ranks (dp, tp size and mode, pp size, schedule and virtual stages, sp size and mode,
// ep for moe_train, ZeRO stage, micro-batch, activation checkpointing, offload), each checked by the trainer's own
// option checks (TrainOptions::finish, GptConfig::validate), its memory planned by plan/memory_plan.h
// against the device's bytes, its step time predicted by plan/time_model.h; ranked fastest first,
// with the rejected ones counted by reason. Deterministic: the same inputs give the same ranking.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "plan/machine_model.h"
#include "plan/memory_plan.h"
#include "plan/time_model.h"
#include "plan/vit_memory_plan.h"

namespace tessera::cli {

// What is searched for: the ranks, the device's bytes, and the trainer's own options for the model
// and the training (everything but the layout), as gpt_train (or moe_train) takes them.
struct SearchInput {
  int ranks = 1, ranks_per_node = 1;
  int64_t device_memory = 0;
  std::vector<std::string> trainer_args;  // "--config", "inputs/gpt_tiny.ini", "--input", "d.h5", ...
  int64_t vocab = 0;                      // the vocabulary when no --input names it (search only)
  double wire_bytes = 4;                  // per value on the wire (plan::predict_step): 4 for tessera
  bool moe = false;                       // moe_train's options and layouts (ep; its expert flags)
  bool vit = false;                       // vit_train's options and layouts (no ep, no split_gather)
  int64_t image = 0, channels = 0, classes = 0;  // vit_train: the images' geometry when no --input is read
};

struct LayoutChoice {
  std::vector<std::string> args;  // the layout's flags: "--dp", "2", "--tp", "2", ...
  plan::GptRun run;      // gpt_train, moe_train
  plan::VitRun vit_run;  // vit_train
  bool vit = false;
  plan::MemoryPlan memory;
  plan::StepTime time;
  int64_t peak() const { return memory.peak(); }
  std::string args_text() const;  // "--dp 2 --tp 2 ..."
  std::string memory_text() const;  // the memory plan as the trainer's --dry-run prints it
};

struct SearchResult {
  int64_t enumerated = 0;
  std::vector<LayoutChoice> ranked;          // within the memory, fastest first
  std::map<std::string, int64_t> rejected;   // reason -> layouts
  // The valid layout with the smallest planned peak, when none fits (for the message).
  std::vector<std::string> smallest_args;
  int64_t smallest_peak = -1;
  std::string rejected_text() const;  // "12 x reason; 3 x reason"
};

// The trainer flags a search chooses: given in trainer_args they are refused (it would contradict them).
const std::vector<std::string>& layout_options();

// Checks one layout (its flags, `layout_args`) as gpt_train would for `input.ranks` ranks, and plans
// its memory and step time. Throws tessera::Error (or po::error) naming the first problem.
LayoutChoice evaluate_layout(const SearchInput& input, const plan::MachineModel& machine,
                             const std::vector<std::string>& layout_args);

// Every layout, ranked. Throws when the inputs themselves are wrong (a layout flag among the trainer's).
SearchResult search_layouts(const SearchInput& input, const plan::MachineModel& machine);

}  // namespace tessera::cli
