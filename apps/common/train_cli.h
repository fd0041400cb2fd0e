// What the training apps (gpt_train, vit_train, ...) share on the command line: the trainer's,
// the layout's and the runtime's options, their checks (all before any communication), and the
// parallel set-up that follows: the mesh with its watchdog, and the model's tensor and sequence
// layouts. Each app adds its model's and data's options and builds its Workload.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/cli.h"
#include "comm/process_mesh.h"
#include "models/model_layout.h"
#include "parallel/expert_parallel.h"
#include "parallel/sequence_parallel.h"
#include "parallel/tensor_grid.h"
#include "parallel/tensor_parallel.h"
#include "train/train_config.h"
#include "train/workload.h"

namespace tessera::plan {
struct RunLayout;
}

namespace tessera::cli {

struct TrainOptions {
  train::TrainConfig train;
  comm::MeshShape mesh;
  std::string tp_mode, sp_mode, device_name;
  std::string pp_layers;                          // --pp-layers "3,5,5,3", parsed into train.pp_layers
  std::string activation_checkpointing = "none";  // none, full or selective
  std::string placement = "static";               // static or auto (the planner picks the host share)
  std::string device_memory_limit = "0";          // parsed into train.device_memory_limit
  double placement_chunk_mb = 4.0;                // parsed into train.adamw.placement_chunk
  int64_t recompute_every_k_blocks = 1;            // --recompute-every-k-blocks (was --checkpoint-every-k-blocks)
  std::string comm_backend = "host";              // host or nccl: device tensors' collectives (comm/device_route.h)
  std::string zero3_overlap = "on";               // on or off: parsed into train.zero3_overlap
  bool dry_run = false;                           // print the plan and exit
  int threads = 0;
  double comm_timeout = 600;
  bool check_collectives = false;
  std::string log_level = "info";  // --log-level; --quiet is warn
  bool quiet = false;
  enum class App { gpt, moe, vit };
  // Adds the options `app` takes to their --help sections (the other trainers' to foreign()).
  // `unit` names a sample in the help ("sequences", "images").
  void add_to(OptionSections& sections, const std::string& unit, App app);
  // The trainers' renamed options, for cli::parse: the old names still work with a warning.
  static const std::vector<RenamedOption>& renamed();
  // After parsing: every option's value (TrainConfig::validate), options that need or exclude
  // others (`vm` tells which the user gave), threads, the mesh against the world size, the modes,
  // micro-batching. Throws naming the first problem, before any communication.
  void finish(int world_size, const po::variables_map& vm);
  bool split_gather() const { return sp_mode == "split_gather"; }
  // --seq-len splits over the sp ranks as the mode cuts it (zigzag: 2 x sp equal chunks); a
  // language model's (causal) check, before any communication.
  void check_sequence_split(int64_t seq_len) const;
  // all_to_all gives each sp rank an equal share of a rank's heads (--heads over the tp ranks that
  // split them): checked before any communication (the attention's own check comes after start-up).
  void check_sequence_heads(int64_t heads) const;
  bool auto_placement() const { return placement == "auto"; }
  bool grid() const { return mesh.tp_mode != comm::TpMode::d1; }  // --tp-mode 2d, 2.5d or 3d
  // The ranks splitting the model's heads (tp, or a grid's side q), after checking that a grid
  // can split the heads and features (3d: a weight's inputs over q^2).
  int split_model(int64_t heads, int64_t hidden) const;
  models::ActivationCheckpointing checkpointing() const;  // throws on an unknown mode
  Device device() const;
  // on the CPU: " (GEMMs: oneDNN, kernels: avx512)": the GEMMs' library (or bf16's path) and the
  // instruction set of tessera's own kernels (kernels/cpu/isa.h); else empty
  std::string gemm_note() const;
};

// The first collective of a training app, right after parsing: every rank was started with the
// same options (the config file's included) and reads the same data (io::file_identity of the
// files the data_options name). Throws naming every option that differs and the ranks holding each
// value, so a job launched with different arguments per rank stops before it trains. Returns the
// identity of data_options[0]'s file (the training data: part of the run's identity, which its
// checkpoints record), so that it is read once.
std::string check_ranks_started_alike(const po::variables_map& vm, const std::vector<std::string>& data_options);

// A file an option names: {"--metrics", "m.jsonl"}.
struct OptionPath {
  std::string option, path;
};

// A run never writes over what it reads: each output (--metrics, --trace, --dump; empty paths
// skipped) must be none of the inputs (data sets, the checkpoint resumed) and no other output,
// also through another path to the same file. Throws naming both options and the file.
void check_output_files(const std::vector<OptionPath>& inputs, const std::vector<OptionPath>& outputs);

// The mesh (collective over the world) with the watchdog and collective checks on every group,
// and the model layouts on it.
class ParallelSetup {
 public:
  // heads, head_dim: the model's attention shape (the sequence-parallel attention needs them).
  ParallelSetup(const TrainOptions& options, int64_t heads, int64_t head_dim);
  comm::ProcessMesh& mesh() { return mesh_; }
  models::ModelLayout layout();

 private:
  const TrainOptions& options_;
  comm::ProcessMesh mesh_;
  parallel::TensorParallel1D tensor_;
  std::optional<parallel::TensorParallelGrid> grid_;  // --tp-mode 2d, 2.5d
  std::optional<parallel::SequenceParallel> sequence_;
  std::optional<parallel::ExpertParallel> experts_;
};

// The Slurm job id, node list and restart count, when under Slurm; a warning when the environment
// slows the CPU kernels (OMP_WAIT_POLICY=PASSIVE).
void log_run_environment();

// Trains the workload to its last step (a preempted run: its checkpoint, then train::kExitPreempted)
// and says on world rank 0 how it ended: the final loss, and the last evaluation's loss and accuracy
// where the run has them. Returns the app's exit code.
int train_and_report(train::Workload& workload, const train::TrainConfig& tc, comm::ProcessMesh& mesh, int world_rank);

// What the memory planner and the time model take of the layout and the training options
// (plan/memory_plan.h), for a step split over `batch_ranks` (dp x ep for the GPTs, dp for ViT).
plan::RunLayout planned_layout(const TrainOptions& o, int batch_ranks);

}  // namespace tessera::cli
