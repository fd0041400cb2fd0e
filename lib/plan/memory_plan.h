// MemoryPlan: the predicted peak bytes per rank of a gpt_train / moe_train run (vit_train's:
// plan/vit_memory_plan.h), by category, from
// its configuration and layout alone: nothing is allocated and nothing communicated (what
// `--dry-run` prints). One section per pipeline stage (stages hold different parts of the model);
// within a stage the ranks differ only by their ZeRO shard, and the largest is counted.
// Parameters, gradients and optimizer states are exactly what ZeroOptimizer::state_bytes()
// reports; activations and workspace follow the layers' allocations (plan/gpt_activations.h);
// items that depend on timing or are bounded rather than counted say so (approximate).
// docs/memory.md explains each item.
#pragma once
#include <string>
#include <vector>

#include "comm/process_mesh.h"
#include "models/gpt/gpt.h"

namespace tessera::plan {

// What a run's memory depends on beyond its model: the layout and the training's options, as
// every trainer takes them.
struct RunLayout {
  int64_t micro_batch = 0;
  int64_t micro_batches = 1;  // per step on each rank: global batch / (micro-batch x dp x ep)
  comm::MeshShape mesh;       // resolved (dp filled in)
  bool ring = false;          // the sequence-parallel mode: ring (else all_to_all when sp > 1)
  bool zigzag = false;        // ring over the zigzag layout (ring is true too)
  int zero_stage = 0;
  bool zero3_overlap = true;  // ZeRO-3 prefetches the next unit while this one computes (--zero3-overlap)
  std::string pp_schedule = "1f1b";
  int virtual_stages = 1;
  std::vector<int64_t> pp_layers;  // blocks per virtual stage (--pp-layers; empty: even)
  models::ActivationCheckpointing checkpointing;
  std::string precision = "fp32";  // bf16, fp16: the weights rounded for the step (optim/mixed_precision.h)
  std::string offload = "none";    // nvme: the optimizer states in files, streamed (optim/adamw.h)
  int64_t offload_chunk = int64_t{1} << 20;
  double host_fraction = 0.0;      // the optimizer states' chunks on the host tier (offload cpu: all)
  bool offload_params = false;     // ZeRO-3's shard of parameters and gradients on the host tier
  int64_t placement_chunk = int64_t{1} << 20;
};

// A gpt_train or moe_train run.
struct GptRun : RunLayout {
  models::GptConfig model;  // with its vocabulary
  int64_t seq = 0;
  bool split_gather = false;  // --sp-mode split_gather (rows split over tp)
};

struct MemoryItem {
  // parameters, gradients, optimizer states, activations, workspace, buffers: on the compute
  // device; "host tier": offloaded there (not in the device's total)
  std::string category;
  std::string what;      // what it counts, in a few words
  int64_t bytes = 0;
  bool approximate = false;
};

struct StageMemory {
  int stage = 0;
  std::string holds;  // "blocks 0-3, embedding, head"
  std::vector<MemoryItem> items;
  int64_t total() const;  // on the compute device
  int64_t host_tier() const { return category_bytes("host tier"); }
  int64_t category_bytes(const std::string& category) const;
  // parameters + gradients + optimizer states: ZeroOptimizer::state_bytes() of the stage's ranks
  int64_t state_bytes() const;
};

struct MemoryPlan {
  std::vector<StageMemory> stages;  // one per pipeline stage
  int64_t peak() const;             // the largest stage's total
  int64_t host_tier() const;        // the largest stage's host tier
};

MemoryPlan plan_memory(const GptRun& run);

struct Placement {
  double host_fraction;  // for AdamWConfig::host_fraction
  MemoryPlan plan;       // the run's plan with it
};
// --placement auto: the smallest share of the optimizer states' chunks on the host tier whose
// planned device peak fits in `limit` bytes (0 when everything fits), found by bisection over
// whole chunks of the largest shard (the peak only falls as chunks move); throws naming the
// shortfall when even all of them offloaded do not fit.
Placement placement_for(GptRun run, int64_t limit);
// The dry run's report: per category and stage, bytes and MiB, what is approximate, and the peak.
std::string describe(const MemoryPlan& plan, const GptRun& run);
// The same for any model: `tokens` per sample (a sequence's, an image's).
std::string describe(const MemoryPlan& plan, const RunLayout& run, int64_t tokens);

}  // namespace tessera::plan
