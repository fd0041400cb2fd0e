// Trainer: the step loop for a language model: each data-parallel rank takes its slice of the
// global batch in micro-batches, gradients are reduced over dp in buckets during the last
// micro-batch's backward (GradSync), then clipping by the global norm, AdamW under the ZeRO stage
// (ZeroOptimizer) with warmup + cosine, evaluation, metrics and progress (rank 0).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "comm/process_mesh.h"
#include "io/token_dataset.h"
#include "io/token_loader.h"
#include "models/gpt/gpt.h"
#include "optim/lr_schedule.h"
#include "optim/zero_optimizer.h"
#include "parallel/grad_sync.h"
#include "train/checkpointing.h"
#include "train/fault_hooks.h"

namespace tessera::train {

struct TrainConfig {
  int64_t steps = 100, global_batch = 8, micro_batch = 8, seq_len = 64;
  double lr = 3e-4, min_lr = 0.0;
  int64_t warmup = 0;
  float grad_clip = 1.0f;
  int zero_stage = 0;           // 0: replicated; 1: optimizer states sharded over dp; 2: + gradients
  double bucket_mb = 25.0;      // data-parallel gradient bucket size
  optim::AdamWConfig adamw;
  uint64_t seed = 1234;
  int64_t eval_every = 0, eval_batches = 8, log_every = 10;
  double peak_tflops = 0.0;     // per rank; 0: measured sgemm rate (cpu) or a device default
  std::string metrics_path;
  std::string checkpoint_dir;   // empty: no checkpoints
  int64_t checkpoint_every = 0; // steps between checkpoints (0: only at the end)
  int keep_checkpoints = 0;     // keep the newest K (0: all)
  std::string resume = "none";  // none, auto (newest valid in checkpoint_dir) or a file
  std::string on_nan = "stop";  // a non-finite loss or gradient norm: stop (naming it) or skip the step
  std::string dump_path;        // debug: initial params, batches, step-1 logits and gradients
  void validate(int dp = 1) const;  // throws naming the first bad option
  // Micro-batches each of `dp` ranks runs per step.
  int64_t micro_batches(int dp = 1) const { return global_batch / (micro_batch * dp); }
};

struct TrainResult {
  float last_loss = 0.0f;
  int64_t skipped_steps = 0;  // --on-nan skip
  bool preempted = false;     // stopped on SIGTERM/SIGUSR1 after checkpointing
  std::optional<float> last_eval_loss;
};

class Trainer {
 public:
  // The model is built on the mesh's tp and sp groups (its layouts) and, under ZeRO-3, its data
  // group (dp x sp); batches split over dp, gradients are reduced (and ZeRO shards) over dp x sp,
  // and the whole job (world) agrees on preemption, checkpoints and the first non-finite gradient.
  Trainer(models::Gpt& model, const io::TokenDataset& train_data, const io::TokenDataset* val_data,
          const TrainConfig& config, comm::ProcessMesh& mesh);
  TrainResult run();

 private:
  float train_step(int64_t step);  // returns the mean loss over the global batch
  void set_context(const std::string& context);  // on every group, for the watchdog's messages
  float evaluate();
  int64_t resume();  // returns the step to continue after (0: a fresh start)
  void check_checkpoint_dir();  // before step 1: the folder can be written, on every rank's word
  std::string first_nonfinite_gradient();  // over every rank's gradients; "" if none
  void poison_gradient();  // test hook (TESSERA_FAULT_NAN_STEP)
  void save(int64_t step);
  CheckpointInfo checkpoint_info(int64_t step) const;
  void dump_initial();
  void dump_first_step();

  CheckpointState checkpoint_state();
  // Bytes and milliseconds of every collective of this rank so far, over every mesh group.
  std::pair<int64_t, double> comm_totals() const;

  models::Gpt& model_;
  TrainConfig config_;
  comm::ProcessMesh& mesh_;
  comm::Communicator& world_;
  comm::Communicator& dp_;    // batch slicing
  comm::Communicator& data_;  // dp x sp: gradient reduction, ZeRO, the loss
  comm::Communicator& sp_;
  comm::Communicator& tp_;
  io::TokenLoader train_loader_;
  std::optional<io::TokenLoader> val_loader_;
  std::unique_ptr<parallel::GradSync> grad_sync_;  // zero 0-2; under zero 3 the model reduces
  optim::ZeroOptimizer optimizer_;
  optim::LrSchedule schedule_;
  std::vector<int32_t> rows_;  // one micro-batch of token rows [B, T+1]
  FaultHooks faults_;
};

}  // namespace tessera::train
