// Trainer: the step loop for any Workload: each data-parallel rank runs its slice of the global
// batch in micro-batches, gradients are reduced over dp x sp in buckets during the last
// micro-batch's backward (GradSync), then clipping by the global norm, AdamW under the ZeRO stage
// (ZeroOptimizer) with warmup + cosine, evaluation, metrics and progress (rank 0), checkpoints,
// preemption and the numerical guard.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "comm/process_mesh.h"
#include "kernels/ops.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/mixed_precision.h"
#include "optim/zero_optimizer.h"
#include "parallel/grad_sync.h"
#include "train/checkpointing.h"
#include "train/folder_lock.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/train_config.h"
#include "train/workload.h"

namespace tessera::train {

struct TrainResult {
  std::optional<float> last_loss;  // none when no step was trained
  // The job had already finished: the checkpoint resumed from is of step --steps (nothing was
  // trained or written).
  bool already_finished = false;
  int64_t skipped_steps = 0;  // --on-nan skip
  bool preempted = false;     // stopped on SIGTERM/SIGUSR1 after checkpointing
  std::optional<float> last_eval_loss;
  std::optional<float> last_eval_accuracy;
};

class Trainer {
 public:
  // The workload's model is built on the mesh's tp and sp groups (its layouts) and, under ZeRO-3,
  // its data group (dp x sp); batches split over dp, gradients are reduced (and ZeRO shards) over
  // dp x sp, and the whole job (world) agrees on preemption, checkpoints and the first
  // non-finite gradient.
  Trainer(Workload& workload, const TrainConfig& config, comm::ProcessMesh& mesh);
  TrainResult run();

 private:
  float train_step(int64_t step);  // returns the mean loss over the global batch
  // After train_step: the loss scaler's and the numerical guard's verdict, then the optimizer
  // step unless the step is skipped. Returns the (unscaled) gradient norm.
  double update(int64_t step, float loss, double lr, TrainResult& result, Progress& progress);
  bool fp16() const { return precision_.precision() == optim::Precision::fp16; }
  void set_context(const std::string& context);  // on every group, for the watchdog's messages
  // --resume's checkpoint (none, the newest valid one under auto, or the file named), on every rank.
  std::optional<std::string> resume_source();
  CheckpointInfo resume(const std::string& path);  // loads it; returns what it was saved with
  void init_from();  // --init-from: the weights of config_.init_from, before anything else is written
  // The checkpoint's tokenizer against the training data's: a difference is refused, naming both.
  void check_tokenizer(const std::string& path, const CheckpointInfo& info) const;
  // Rank 0 starts the metrics file with the run line (a fresh run), or continues it after the
  // checkpoint resumed from with a resume line; throws there naming the file when that fails.
  MetricsWriter open_metrics(const std::optional<std::string>& checkpoint, const CheckpointInfo& resumed);
  void add_run_fields(JsonLine& line) const;  // version, world size, layout, model, options
  void check_checkpoint_dir();  // before step 1: the folder can be written, on every rank's word
  // --device-memory-limit: every rank stops, naming the worst rank's peak, once it is passed.
  void check_device_memory(int64_t step, Device device);
  std::string first_nonfinite_gradient();  // over every rank's gradients; "" if none
  void poison_gradient();  // test hook (TESSERA_FAULT_NAN_STEP)
  void save(int64_t step);
  CheckpointInfo checkpoint_info(int64_t step) const;
  CheckpointState checkpoint_state();
  // Bytes and milliseconds of every collective of this rank so far, over every mesh group.
  std::pair<int64_t, double> comm_totals() const;

  Workload& work_;
  TrainConfig config_;
  comm::ProcessMesh& mesh_;
  comm::Communicator& world_;
  comm::Communicator& dp_;    // batch slicing
  comm::Communicator& data_;  // dp x sp: gradient reduction, ZeRO, the loss
  comm::Communicator& tp_;
  comm::Communicator& pp_;    // pipeline stages: the loss and the gradient norm are summed over it
  comm::Communicator& ep_;    // expert parallelism: its ranks see different tokens (like dp)
  int batch_ranks_;                 // ProcessMesh::batch_ranks: the ranks splitting a step's batch
  std::unique_ptr<parallel::GradSync> grad_sync_;  // zero 0-2; under zero 3 the model reduces
  optim::ZeroOptimizer optimizer_;
  optim::LrSchedule schedule_;
  optim::MixedPrecision precision_;
  optim::DynamicLossScaler scaler_;  // fp16: the loss scale; otherwise a fixed 1
  std::vector<CheckpointInfo::Attr> carried_;  // hf.* of the checkpoint started from, handed on
  std::vector<std::pair<std::string, std::string>> carried_files_;  // and its /hf_files/
  FolderLock folder_lock_;  // --checkpoint-dir belongs to this run while it runs
  bool grads_zero_ = false;  // the last update zeroed the gradients as it read them
  // bf16: the held gradients' sum of squares from their rounding, for the step's norm (reset when
  // anything changes them before it).
  std::optional<double> held_squares_;
};

}  // namespace tessera::train
