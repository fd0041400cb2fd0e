// TrainConfig: the options of a training run that the step loop and the workloads share.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "text/stored_tokenizer.h"

namespace tessera::train {

struct TrainConfig {
  int64_t steps = 100, global_batch = 8, micro_batch = 8;
  int64_t seq_len = 64;          // language models: tokens per sequence
  double lr = 3e-4, min_lr = 0.0;
  int64_t warmup = 0;
  float grad_clip = 1.0f;
  int zero_stage = 0;           // 0: replicated; 1: optimizer states sharded over dp; 2: + gradients
  double bucket_mb = 25.0;      // data-parallel gradient bucket size
  optim::AdamWConfig adamw;
  uint64_t seed = 1234;
  int64_t eval_every = 0, eval_batches = 8, log_every = 10;
  std::string sampling = "random";  // token windows: random (with replacement) or epoch (io::Sampling)
  bool document_mask = false;  // attention inside each document of a window, positions per document
  double peak_tflops = 0.0;     // per rank; 0: measured sgemm rate (cpu) or a device default
  std::string metrics_path;
  bool overwrite = false;       // a fresh run may replace an existing metrics file and set aside old checkpoints
  std::string data_identity;    // io::file_identity of the training data: part of the run's identity
  std::string checkpoint_dir;   // empty: no checkpoints
  int64_t checkpoint_every = 0; // steps between checkpoints (0: only at the end)
  int keep_checkpoints = 0;     // keep the newest K (0: all)
  std::string resume = "none";  // none, auto (newest valid in checkpoint_dir) or a file
  // A checkpoint whose weights start the run (fine-tuning): fresh optimizer, step 0. Not with
  // --resume FILE, nor with --resume auto once checkpoint_dir holds checkpoints.
  std::string init_from;
  text::StoredTokenizerFile tokenizer;  // the training data's, recorded in every checkpoint
  std::string on_nan = "stop";  // a non-finite loss or gradient norm: stop (naming it) or skip the step
  std::string precision = "fp32";    // fp32, bf16 or fp16 (parameters, activations, gradients)
  optim::LossScalerConfig loss_scaler;  // fp16's (bf16 and fp32 train unscaled)
  std::string pp_schedule = "1f1b";  // pipeline schedule (parallel::make_schedule's names)
  int virtual_stages = 1;            // model chunks per pipeline stage (interleaved)
  std::vector<int64_t> pp_layers;    // blocks per virtual stage (--pp-layers; empty: as even as possible)
  std::string trace_path;            // Chrome trace of the pipeline's compute and messages
  std::string dump_path;        // debug: initial params, batches, step-1 logits and gradients
  bool offload_params = false;       // ZeRO-3's parameter shard on the host tier
  bool zero3_overlap = true;         // ZeRO-3: next unit's gather and the reduce-scatters overlap compute
  int64_t device_memory_limit = 0;   // bytes per rank on the compute device (0: none), checked every step
  // Every option of the app as given (name -> value, defaults included), recorded in the metrics
  // file's run and resume lines.
  std::vector<std::pair<std::string, std::string>> options;
  void validate(int dp = 1) const;  // throws naming the first bad option
  // Micro-batches each of `dp` ranks runs per step.
  int64_t micro_batches(int dp = 1) const { return global_batch / (micro_batch * dp); }
};

}  // namespace tessera::train
