// Workload: what the Trainer trains, a model with its data, behind one interface, so the step
// loop, ZeRO, clipping, checkpoints, metrics and fault handling are written once for every model
// (GptWorkload, VitWorkload). A workload knows this rank's slice of each global batch: it is built
// with the data-parallel rank and the micro-batch plan.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/trace_sink.h"
#include "nn/param_store.h"
#include "parallel/grad_sync.h"
#include "parallel/tied_weights.h"

namespace tessera::train {

class PipelineRunner;

class Workload {
 public:
  virtual ~Workload() = default;

  virtual nn::ParamStore& params() = 0;
  // Called once before the first step trained (step 1, or the step after a resumed checkpoint).
  virtual void start(int64_t first_step) { (void)first_step; }
  // How training data is sampled ("random", "epoch"; "" where it does not apply) and, for epochs,
  // the epoch the sample after `consumed_samples` falls in (-1: none). Recorded in checkpoints.
  virtual std::string data_sampling() const { return ""; }
  virtual int64_t data_epoch(int64_t consumed_samples) const { (void)consumed_samples; return -1; }
  // More of the data's position after `step` steps, as checkpoint attributes (a blend: its sources,
  // the samples and epoch of each); a resume compares the values it computes with those recorded.
  virtual std::vector<std::pair<std::string, std::string>> data_state(int64_t step) const {
    (void)step;
    return {};
  }
  // Micro-batch `micro` of this rank's slice of the step's global batch: forward and backward,
  // gradients added with grad_scale as the models do; with a GradSync, its buckets start as the
  // gradients become final. Returns this rank's share of the micro-batch's mean loss.
  virtual float train_micro_batch(int64_t step, int64_t micro, float grad_scale, parallel::GradSync* sync) = 0;

  struct Evaluation {
    double loss = 0;
    std::optional<double> accuracy;  // classifiers
  };
  virtual bool can_evaluate() const = 0;
  virtual Evaluation evaluate() = 0;

  // What one sample of the global batch is, for the metrics: "tokens" (a sample is a sequence of
  // units_per_sample tokens) or "samples" (an image).
  virtual std::string unit() const = 0;
  virtual int64_t units_per_sample() const = 0;
  virtual double flops_per_sample() const = 0;  // training FLOPs (forward and backward)

  // Checkpoint identity: the model's name and the configuration a checkpoint must match.
  virtual std::string model_name() const = 0;
  virtual std::vector<std::pair<std::string, int64_t>> model_config() const = 0;
  // Real-valued settings of the model that a checkpoint imported from Hugging Face records as
  // hf.<name> (llama: norm_eps, rope_theta): a run resuming it must compute with the same.
  virtual std::vector<std::pair<std::string, double>> model_values() const { return {}; }

  // Extra metrics of the step just trained (mixture-of-experts: aux_loss, dropped_tokens, expert
  // load), as this rank's contribution: the trainer sums them over the job, or takes the maximum.
  struct StepMetric {
    std::string name;
    double value = 0;
    bool max = false;
  };
  virtual std::vector<StepMetric> step_metrics() { return {}; }

  // Pipeline parallelism: the runner of this rank's stage and the weights tied across stages
  // (nullptr: the whole model is on this rank, and train_micro_batch runs it).
  virtual PipelineRunner* pipeline() { return nullptr; }
  virtual parallel::TiedWeights* tied_weights() { return nullptr; }
  // --trace: where the model records its own slices (ZeRO-3's gathers; nullptr: none).
  virtual void set_trace(TraceSink* trace) { (void)trace; }

  // Debug dumps (--dump): initial parameters and batches, then step 1's outputs and gradients.
  virtual void dump_initial(const std::string& path) { (void)path; }
  virtual void dump_first_step(const std::string& path) { (void)path; }
};

}  // namespace tessera::train
