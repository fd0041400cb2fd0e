// gpt_train: train a GPT language model on an HDF5 token data set.
#include <omp.h>

#include <cstdlib>
#include <iostream>
#include <optional>

#include "apps/common/cli.h"
#include "comm/mpi_runtime.h"
#include "comm/process_mesh.h"
#include "core/log.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "models/gpt/gpt.h"
#include "parallel/sequence_parallel.h"
#include "parallel/tensor_parallel.h"
#include "train/gpt_workload.h"
#include "train/preemption.h"
#include "train/trainer.h"

using namespace tessera;
namespace po = boost::program_options;

int main(int argc, char** argv) {
  comm::MpiRuntime mpi(&argc, &argv);
  if (mpi.world_size() > 1) log::set_rank(mpi.world_rank());
  const int code = cli::run_main([&] {
    po::options_description opts;
    train::TrainConfig tc;
    models::GptConfig mc;
    std::string input, val_input, device_name = "cpu";
    int64_t seq_len = 64;
    int threads = 0;
    double comm_timeout = 600;
    bool check_collectives = false;
    comm::MeshShape mesh_shape;
    std::string tp_mode, sp_mode;
    opts.add_options()
        ("input", po::value(&input)->required(), "training token data set (HDF5: /tokens, or /train/tokens)")
        ("val-input", po::value(&val_input), "validation data set (default: the /val split of --input, if any)")
        ("layers", po::value(&mc.layers)->default_value(4), "transformer blocks")
        ("hidden", po::value(&mc.hidden)->default_value(128), "hidden size")
        ("heads", po::value(&mc.heads)->default_value(4), "attention heads (must divide --hidden)")
        ("seq-len", po::value(&seq_len)->default_value(64), "tokens per sequence")
        ("global-batch", po::value(&tc.global_batch)->default_value(8), "sequences per optimizer step")
        ("micro-batch", po::value(&tc.micro_batch)->default_value(0), "sequences per forward/backward on a rank (0: global-batch / dp, no accumulation)")
        ("steps", po::value(&tc.steps)->default_value(100), "optimizer steps")
        ("lr", po::value(&tc.lr)->default_value(1e-3), "peak learning rate")
        ("min-lr", po::value(&tc.min_lr)->default_value(1e-4), "learning rate at the last step (cosine)")
        ("warmup", po::value(&tc.warmup)->default_value(10), "linear warm-up steps")
        ("weight-decay", po::value(&tc.adamw.weight_decay)->default_value(0.1f), "AdamW weight decay (matrices, embeddings)")
        ("beta1", po::value(&tc.adamw.beta1)->default_value(0.9f), "AdamW beta1")
        ("beta2", po::value(&tc.adamw.beta2)->default_value(0.95f), "AdamW beta2")
        ("grad-clip", po::value(&tc.grad_clip)->default_value(1.0f), "clip the global gradient norm (0: off)")
        ("seed", po::value(&tc.seed)->default_value(1234), "seed of initialisation and data order")
        ("eval-every", po::value(&tc.eval_every)->default_value(0), "evaluate every N steps and at the end (0: never)")
        ("eval-batches", po::value(&tc.eval_batches)->default_value(8), "validation micro-batches per evaluation")
        ("log-every", po::value(&tc.log_every)->default_value(10), "log a line every N steps (when not on a terminal)")
        ("metrics", po::value(&tc.metrics_path), "write metrics as JSON lines to this file")
        ("zero", po::value(&tc.zero_stage)->default_value(0), "ZeRO stage: 0 replicated, 1 shard optimizer states, 2 also gradients, 3 also parameters")
        ("bucket-mb", po::value(&tc.bucket_mb)->default_value(25.0), "data-parallel gradient bucket size in MiB")
        ("dp", po::value(&mesh_shape.dp)->default_value(0), "data-parallel ranks (0: world / (pp x ep x sp x tp))")
        ("tp", po::value(&mesh_shape.tp)->default_value(1), "tensor-parallel ranks (must divide --heads)")
        ("tp-mode", po::value(&tp_mode)->default_value("1d"), "tensor-parallel layout: 1d (Megatron: heads, MLP and vocabulary split)")
        ("pp", po::value(&mesh_shape.pp)->default_value(1), "pipeline stages")
        ("sp", po::value(&mesh_shape.sp)->default_value(1), "sequence-parallel ranks (must divide --seq-len)")
        ("sp-mode", po::value(&sp_mode)->default_value("all_to_all"), "sequence parallelism: all_to_all (Ulysses: heads must divide by sp), ring (ring attention), or split_gather (Megatron's, inside the tp group: with --tp, no --sp)")
        ("ep", po::value(&mesh_shape.ep)->default_value(1), "expert-parallel ranks")
        ("comm-timeout", po::value(&comm_timeout)->default_value(600.0), "seconds any collective may take before the job is aborted, naming it (0: wait forever)")
        ("check-collectives", po::bool_switch(&check_collectives), "debug: compare each collective's fingerprint across its group first, reporting the first mismatch")
        ("device", po::value(&device_name)->default_value("cpu"), "cpu or cuda")
        ("threads", po::value(&threads)->default_value(0), "CPU threads (0: OMP_NUM_THREADS or all cores)")
        ("peak-tflops", po::value(&tc.peak_tflops)->default_value(0.0), "peak TFLOP/s for MFU (0: measured sgemm rate)")
        ("checkpoint-dir", po::value(&tc.checkpoint_dir), "write checkpoints (step_N.h5) here")
        ("checkpoint-every", po::value(&tc.checkpoint_every)->default_value(0), "steps between checkpoints (0: only at the end)")
        ("keep-checkpoints", po::value(&tc.keep_checkpoints)->default_value(0), "keep only the newest K checkpoints (0: all)")
        ("resume", po::value(&tc.resume)->default_value("none"), "none, auto (newest valid checkpoint in --checkpoint-dir) or a checkpoint file")
        ("on-nan", po::value(&tc.on_nan)->default_value("stop"), "a non-finite loss or gradient: stop (naming the parameter and the last good checkpoint) or skip the step")
        ("dump", po::value(&tc.dump_path), "debug: write initial parameters, batches and step-1 logits/gradients to this HDF5 file");
    po::variables_map vm;
    if (!cli::parse(argc, argv, opts, vm, "usage: gpt_train --input DATA.h5 [options]")) return 0;
    if (threads > 0) omp_set_num_threads(threads);

    // The layout is checked on every rank before any communication.
    mesh_shape = mesh_shape.resolved(mpi.world_size());
    TESSERA_CHECK(mesh_shape.pp == 1 && mesh_shape.ep == 1, "layout ", mesh_shape.str(),
                  ": this build trains data-, tensor- and sequence-parallel layouts; pipeline and expert",
                  " parallelism are not implemented yet");
    const bool split_gather = sp_mode == "split_gather";
    TESSERA_CHECK(!split_gather || (mesh_shape.tp > 1 && mesh_shape.sp == 1), "--sp-mode split_gather splits the",
                  " sequence inside the tensor-parallel group: it needs --tp > 1 and takes no --sp (got ",
                  mesh_shape.str(), ")");
    const parallel::SequenceMode sequence_mode =
        split_gather ? parallel::SequenceMode::all_to_all : parallel::parse_sequence_mode(sp_mode);
    TESSERA_CHECK(seq_len % mesh_shape.sp == 0, "--seq-len ", seq_len, " is not divisible by --sp ", mesh_shape.sp,
                  " (sequence parallelism gives each rank an equal share of the positions)");
    TESSERA_CHECK(tp_mode == "1d" || tp_mode == "2d" || tp_mode == "2.5d" || tp_mode == "3d", "--tp-mode ", tp_mode,
                  ": expected 1d, 2d, 2.5d or 3d");
    TESSERA_CHECK(tp_mode == "1d", "--tp-mode ", tp_mode, ": not implemented yet (this build has 1d)");
    const Device device = parse_device(device_name);
    TESSERA_CHECK(device == Device::cpu || cuda_available(), "--device cuda: no CUDA device is available",
                  " (or this build has no CUDA)");
    const io::TokenDataset train_data = io::TokenDataset::open(input, "train");
    std::optional<io::TokenDataset> val_data;
    if (!val_input.empty()) {
      val_data = io::TokenDataset::open(val_input, "val");
    } else if (io::H5File::open_read(input).has("/val/tokens")) {
      val_data = io::TokenDataset::open(input, "val");
    }
    TESSERA_CHECK(tc.eval_every == 0 || val_data, "--eval-every needs validation data: pass --val-input or use a",
                  " file with a /val split");
    if (val_data)
      TESSERA_CHECK(val_data->vocab_size == train_data.vocab_size, "validation vocab_size ", val_data->vocab_size,
                    " differs from training vocab_size ", train_data.vocab_size);
    TESSERA_CHECK(comm_timeout >= 0, "--comm-timeout must be >= 0, got ", comm_timeout);
    tc.seq_len = seq_len;
    if (tc.micro_batch == 0) {
      TESSERA_CHECK(tc.global_batch % mesh_shape.dp == 0, "--global-batch ", tc.global_batch,
                    " does not split over dp = ", mesh_shape.dp, " ranks");
      tc.micro_batch = tc.global_batch / mesh_shape.dp;
    }
    tc.validate(mesh_shape.dp);
    mc.vocab = train_data.vocab_size;
    mc.max_seq = seq_len;
    mc.validate(mesh_shape.tp);

    if (mpi.world_rank() == 0) log::info("gpt_train: ", mpi.world_size(), " rank(s), ", mesh_shape.str(), ", ", mc.layers, " layers, hidden ", mc.hidden, ", ", mc.heads, " heads, vocab ", mc.vocab,
              ", seq ", seq_len, ", global batch ", tc.global_batch, " (micro ", tc.micro_batch, "), ", tc.steps,
              " steps on ", device_name, " with ", omp_get_max_threads(), " threads");
    comm::ProcessMesh mesh(mesh_shape);
    for (comm::Communicator* g : mesh.all_groups()) {  // the watchdog and the debug check on every group
      g->set_timeout(comm_timeout);
      g->set_check_collectives(check_collectives);
    }
    const parallel::TensorParallel1D tensor_layout(mesh.group(comm::Axis::tp), split_gather);
    std::optional<parallel::SequenceParallel> sequence_layout;
    models::ModelLayout layout{&tensor_layout};
    if (mesh_shape.sp > 1) {
      layout.sequence = &sequence_layout.emplace(sequence_mode, mesh.group(comm::Axis::sp), mc.heads / mesh_shape.tp,
                                                 mc.hidden / mc.heads);
    }
    if (tc.zero_stage == 3) layout.zero3 = &mesh.data_group();
    models::Gpt model(mc, device, tc.seed, tc.micro_batch, seq_len, layout);
    if (mpi.world_rank() == 0) {
      log::info("parameters: ", model.params().global_numel());
      if (const char* job = std::getenv("SLURM_JOB_ID"))
        log::info("slurm job ", job, " on nodes ", std::getenv("SLURM_JOB_NODELIST") ? std::getenv("SLURM_JOB_NODELIST") : "?",
                  " (restart ", std::getenv("SLURM_RESTART_COUNT") ? std::getenv("SLURM_RESTART_COUNT") : "0", ")");
    }
    train::GptWorkload workload(model, train_data, val_data ? &*val_data : nullptr, tc, mesh.coord(comm::Axis::dp),
                                mesh_shape.dp, mesh.group(comm::Axis::sp));
    train::Trainer trainer(workload, tc, mesh);
    train::install_preemption_handlers();
    const train::TrainResult result = trainer.run();
    if (result.preempted) return train::kExitPreempted;
    if (mpi.world_rank() == 0) log::info("done: final loss ", result.last_loss,
              result.last_eval_loss ? ", eval loss " + std::to_string(*result.last_eval_loss) : std::string());
    return 0;
  });
  // A failing rank ends the whole job: no peer is left waiting in a collective.
  if (code != 0 && code != train::kExitPreempted && mpi.world_size() > 1) comm::abort_job(code);
  return code;
}
