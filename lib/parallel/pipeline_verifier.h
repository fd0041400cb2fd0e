// The pipeline verifier: runs every stage's program together in simulation, in unit-time steps,
// and reports deadlocks, unmatched messages, steps out of order or missing, and the schedule's
// makespan, bubble fraction and peak live activations.
//
// Model: compute steps take StepCosts time units and run one at a time per stage; sends take no
// time and are buffered (asynchronous); a receive blocks until the matching send has run and takes
// the later of its stage's clock and the send's time. A message is matched by (direction,
// receiving stage and chunk, micro-batch). Every stage runs as soon as it can, so the makespan is
// the schedule's own, bubbles included.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace tessera::parallel {

// Unit costs: F = 1, B = 1, W = 1. Without split backward a `backward` costs B + W = 2, so a
// micro-batch costs F + B + W = 3 on a stage under every schedule.
struct StepCosts {
  int forward = 1;
  int backward_input = 1;
  int backward_weight = 1;
};

struct PipelineProblem {
  enum class Kind {
    deadlock,  // no stage can progress; one problem per blocked stage
    mismatch,  // a message no one receives, a receive no one sends to, a send past the pipeline's end
    order,     // a step before what it needs, run twice, or never run; a micro-batch or chunk out of range
  };
  Kind kind;
  int stage;
  int instruction;      // index in the stage's program; -1 for a step that never runs
  std::string message;  // "stage 2, instruction 7 (recv_bwd mb 3): deadlock: waits for ..."
};

struct TimedStep {
  int start;
  int duration;
  PipelineInstruction step;
};

struct StageReport {
  std::vector<TimedStep> timeline;  // the compute steps, in program (= time) order
  int64_t busy = 0;                 // time spent computing
  // Live activations: micro-batches (per chunk) whose forward has run and whose backward has not
  // completed. Completed means the last step that reads the activations: backward, or backward_w
  // where backward is split. peak_awaiting_backward counts until backward (B) in every schedule,
  // which is the whole activation that B frees (W keeps only the layer inputs).
  int peak_live = 0;
  int peak_awaiting_backward = 0;
};

struct PipelineReport {
  std::vector<PipelineProblem> problems;  // in the order found; empty when the schedule is sound
  std::vector<StageReport> stages;
  int64_t makespan = 0;      // time until the last stage finishes
  int64_t idle = 0;          // stages x makespan - total busy time
  double bubble_fraction = 0;  // idle / (stages x makespan)
  bool ok() const { return problems.empty(); }
};

PipelineReport verify_schedule(const PipelineSchedule& schedule, const StepCosts& costs = {});
// The same with each stage's own costs (stages holding different blocks: the time model's
// per-stage times, plan/time_model.h); per_stage has one entry per stage.
PipelineReport verify_schedule(const PipelineSchedule& schedule, const std::vector<StepCosts>& per_stage);
// Throws tessera::Error naming the schedule and its first problem (and how many more there are).
void check_schedule(const PipelineSchedule& schedule, const StepCosts& costs = {});

// The timeline as text: a header of time units, then one row per stage, one cell per time unit:
// F3, B3, W3 (F3:1 for micro-batch 3 of chunk 1 when stages hold several chunks), "." when idle.
std::string timeline_text(const PipelineSchedule& schedule, const PipelineReport& report);

}  // namespace tessera::parallel
