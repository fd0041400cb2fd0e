// The time model: the predicted step time of a gpt_train or moe_train run (a GptRun, as the memory
// planner takes it; a vit_train run, a VitRun) on a calibrated machine (plan/machine_model.h). Compute is each op's FLOPs (GEMMs,
// attention; a mixture-of-experts block's router and experts over its routed rows) or elements
// (norms, the loss, activations, the optimizer) over the calibrated rates;
// communication is docs/parallelism.md's per-layout table of collectives and sizes, each timed by
// the calibrated latency + bytes / bandwidth of its group size (inside a node or across nodes by
// where the group's ranks sit), minus what overlaps (the data-parallel gradient reduction overlaps
// the last micro-batch's backward, less its last bucket); the pipeline's bubble comes from running
// the schedule's programs in the verifier (parallel/pipeline_verifier.h) with each stage's forward
// and backward times. docs/parallelism.md ("Choosing a layout") explains each term.
#pragma once
#include <string>
#include <vector>

#include "plan/machine_model.h"
#include "plan/memory_plan.h"
#include "plan/vit_memory_plan.h"

namespace tessera::plan {

// A flash-style attention backward recomputes the scores: its time is this many forwards.
inline constexpr double kAttentionBackward = 2.5;

struct CommTerm {
  std::string what;          // "tp: blocks' all-reduces"
  std::string op;            // a collective_names() entry, or broadcast / reduce (timed as send_recv hops)
  int group = 1;             // ranks in the group
  bool across_nodes = false;
  double calls = 0;          // per step
  double bytes = 0;          // per call, as comm_bytes counts them
  double seconds = 0;        // per step, all calls
  double exposed = 0;        // per step, on the step's critical path
  bool in_layers = false;    // inside forward/backward (tp, sp, pp messages, ZeRO-3 gathers): on the
                             // critical path, counted in the pipeline's time
};

struct StepTime {
  // The slowest pipeline stage's times per micro-batch (per chunk x chunks), communication inside
  // the layers and the pipeline's messages included.
  double forward_s = 0, backward_s = 0;
  std::vector<double> stage_forward_s, stage_backward_s;  // every stage's, as the pipeline simulation takes them
  double compute_s = 0;     // per step on that stage: GEMMs, attention, other kernels, recompute
  double recompute_s = 0;   // of which activation checkpointing's recomputation
  double optimizer_s = 0;   // the update of the rank's (shard of the) parameters, offload copies
  double flops = 0;         // per step on that stage's ranks: GEMM and attention FLOPs
  std::vector<CommTerm> comm;
  double pipeline_s = 0;    // the schedule's makespan (micro-batches x (F + B) without a pipeline)
  double bubble_s = 0;      // of which the slowest stage idles
  double oversubscription = 1;  // threads per core on a node (MachineModel::oversubscription), at least 1
  double waiting_rank_share = 0;  // MachineModel::waiting_rank_share, where ranks share cores
  // Where ranks share cores: the step-end synchronisation, MachineModel::sync_lag_s and a wake-up
  // (sync_wake_s) per collective outside the layers; part of step_s.
  double sync_s = 0;
  double step_s = 0;
  double tokens_per_s = 0;
  double comm_exposed() const;
};

// ranks_per_node: how many consecutive world ranks share a node (the mesh puts tp innermost).
// Oversubscribed nodes (ranks_per_node x threads_per_rank above the machine file's cores_per_node):
// with no idle core, nothing overlaps compute (the gradient reduction, ZeRO-3's gathers: the copies of
// the shared-memory collectives take the CPU from computing ranks, and are waited for in full), and a
// pipeline stage idling in the bubble hands its cores to the stages that compute (the makespan scales
// to the node's total work over its cores, bounded below by the schedule's chain at a core per rank).
// With a core per thread (or cores_per_node not recorded) neither applies.
// wire_bytes: bytes per activation and gradient value the collectives and pipeline messages move:
// 4 for tessera (fp32 activations and gradients, whatever --precision rounds); 2 models a trainer
// that communicates half precision (Megatron-LM's fp16 runs, validation/auto_layout).
StepTime predict_step(const GptRun& run, const MachineModel& machine, int ranks_per_node, double wire_bytes = 4);
// A vit_train run: its blocks as a GPT's without the causal mask (the whole square of attention),
// the patch embedding's GEMM on the first stage, the pooled classifier on the last; tokens_per_s
// counts each image's tokens (patches and the class token).
StepTime predict_step(const VitRun& run, const MachineModel& machine, int ranks_per_node, double wire_bytes = 4);
// The model FLOPs of one step as Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training
// on GPU Clusters Using Megatron-LM", eq. 3) count them for the whole global batch B: each pass over a
// block 24 B s h^2 (1 + s / 6h) (the square of causal attention counted whole), three passes (forward,
// two backward) and a fourth under full activation checkpointing, plus the logits' 6 B s h V. With
// full recomputation it is the paper's 96 B s l h^2 (1 + s/6h + V/(16 l h)).
double megatron_model_flops(const GptRun& run);
// The breakdown as text: compute, each communication term, the bubble, the step.
std::string describe(const StepTime& t);

}  // namespace tessera::plan
