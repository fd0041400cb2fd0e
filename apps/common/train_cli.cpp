// The training apps' shared options, checks and parallel set-up.
#include "apps/common/train_cli.h"

#include <algorithm>

#include <omp.h>

#include <cstdlib>
#include <filesystem>

#include "comm/mpi_runtime.h"
#include "comm/rank_agreement.h"
#include "core/allocator.h"
#include "core/log.h"
#include "io/file_identity.h"
#include "io/token_dataset.h"
#include "io/token_blend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "memory/scratch_file.h"
#include "optim/mixed_precision.h"
#include "parallel/pipeline_verifier.h"
#include "plan/memory_plan.h"
#include "train/preemption.h"
#include "train/trainer.h"

namespace tessera::cli {

namespace {

// "3,5,5,3" -> {3, 5, 5, 3}; "" -> {}. Anything but comma-separated integers is refused.
std::vector<int64_t> parse_block_counts(const std::string& text) {
  std::vector<int64_t> counts;
  if (text.empty()) return counts;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TESSERA_CHECK(!item.empty() && used == item.size(), "--pp-layers ", text,
                  ": expected block counts separated by commas, such as 3,5,5,3");
    counts.push_back(value);
    if (end == text.size()) return counts;
    begin = end + 1;
  }
}

}  // namespace

void TrainOptions::add_to(OptionSections& sections, const std::string& unit, App app) {
  train::TrainConfig& tc = train;
  const bool gpt = app != App::vit, moe = app == App::moe;
  sections.section(kTraining).add_options()
      ("global-batch", po::value(&tc.global_batch)->default_value(8)->value_name("N"), (unit + " per optimizer step").c_str())
      ("micro-batch", po::value(&tc.micro_batch)->default_value(0)->value_name("N"), (unit + " per forward/backward on a rank (0: global-batch / dp, no accumulation)").c_str())
      ("steps", po::value(&tc.steps)->default_value(100)->value_name("N"), "optimizer steps")
      ("lr", po::value(&tc.lr)->default_value(1e-3, "0.001")->value_name("LR"), "peak learning rate")
      ("min-lr", po::value(&tc.min_lr)->default_value(1e-4, "0.0001")->value_name("LR"), "learning rate at the last step (cosine)")
      ("warmup", po::value(&tc.warmup)->default_value(10)->value_name("N"), "linear warm-up steps")
      ("weight-decay", po::value(&tc.adamw.weight_decay)->default_value(0.1f, "0.1")->value_name("X"), "AdamW weight decay (matrices, embeddings)")
      ("beta1", po::value(&tc.adamw.beta1)->default_value(0.9f, "0.9")->value_name("X"), "AdamW beta1")
      ("beta2", po::value(&tc.adamw.beta2)->default_value(0.95f, "0.95")->value_name("X"), "AdamW beta2")
      ("grad-clip", po::value(&tc.grad_clip)->default_value(1.0f, "1")->value_name("X"), "clip the global gradient norm (0: off)")
      ("seed", po::value(&tc.seed)->default_value(1234)->value_name("N"), "seed of initialisation and data order")
      ("eval-every", po::value(&tc.eval_every)->default_value(0)->value_name("N"), "evaluate every N steps and at the end (0: never)")
      ("on-nan", po::value(&tc.on_nan)->default_value("stop")->value_name("stop|skip"), "a non-finite loss or gradient: stop (naming the parameter and the last good checkpoint) or skip the step");
  // Options one trainer takes and another does not: the other parses them only to refuse them,
  // naming the trainer that has them, and --help leaves them out (OptionSections::foreign).
  po::options_description& gpt_only = gpt ? sections.section(kTraining) : sections.foreign();
  gpt_only.add_options()
      ("eval-batches", po::value(&tc.eval_batches)->default_value(8)->value_name("N"), "validation global batches per evaluation: the same windows under every layout")
      ("sampling", po::value(&tc.sampling)->default_value("random")->value_name("random|epoch"), "training windows: random (anywhere, with replacement) or epoch (the data cut into windows of seq-len + 1, each visited once per epoch in a shuffled order)");
  po::options_description& layout = sections.section(kLayout);
  layout.add_options()
      ("dp", po::value(&mesh.dp)->default_value(0)->value_name("N"), "data-parallel ranks (0: world / (pp x ep x sp x tp))")
      ("tp", po::value(&mesh.tp)->default_value(1)->value_name("N"), "tensor-parallel ranks (must divide --heads)")
      ("tp-mode", po::value(&tp_mode)->default_value("1d")->value_name("1d|2d|2.5d|3d"), "tensor-parallel layout: 1d (Megatron: heads, MLP and vocabulary split), 2d (SUMMA on a q x q grid, --tp q^2: rows of sequences x feature blocks) 2.5d (--tp-depth d layers of q x q grids, --tp d q^2) or 3d (a q x q x q cube, --tp q^3)")
      ("tp-depth", po::value(&mesh.tp_depth)->default_value(1)->value_name("D"), "--tp-mode 2.5d: the grid layers d (the batch splits over d x q, the weights are the same on every layer)")
      ("pp", po::value(&mesh.pp)->default_value(1)->value_name("N"), "pipeline stages")
      ("pp-schedule", po::value(&tc.pp_schedule)->default_value("1f1b")->value_name("gpipe|1f1b|interleaved|zb"), "pipeline schedule (with --pp > 1): gpipe, 1f1b, interleaved (with --virtual-stages >= 2) or zb (ZB-H1)")
      ("virtual-stages", po::value(&tc.virtual_stages)->default_value(1)->value_name("V"), "model chunks per pipeline stage (interleaved schedule)")
      ("pp-layers", po::value(&pp_layers)->value_name("N,N,..."), "blocks per pipeline (virtual) stage in order, adding up to --layers, e.g. 3,5,5,3 so the stages holding the embedding and the head get fewer (default: as even as possible)");
  layout.add_options()
      ("sp", po::value(&mesh.sp)->default_value(1)->value_name("N"), "sequence-parallel ranks (must divide the sequence)")
      ("sp-mode", po::value(&sp_mode)->default_value("all_to_all")->value_name(gpt ? "all_to_all|ring|zigzag|split_gather" : "all_to_all|ring"), gpt ? "sequence parallelism: all_to_all (Ulysses: heads must divide by sp), ring (ring attention, rank r holding the r-th contiguous share) or zigzag (ring attention balanced under the causal mask: rank r holds chunks r and 2 sp - 1 - r of 2 sp), with --sp > 1; or split_gather (Megatron's, inside the tp group: with --tp, no --sp)" : "sequence parallelism with --sp > 1: all_to_all (Ulysses: heads must divide by sp) or ring (ring attention)");
  (moe ? layout : sections.foreign()).add_options()
      ("ep", po::value(&mesh.ep)->default_value(1)->value_name("N"), "expert-parallel ranks: they split the experts, and the batch like dp");
  layout.add_options()
      ("zero", po::value(&tc.zero_stage)->default_value(0)->value_name("0|1|2|3"), "ZeRO stage: 0 replicated, 1 shard optimizer states, 2 also gradients, 3 also parameters")
      ("zero3-overlap", po::value(&zero3_overlap)->default_value("on")->value_name("on|off"), "with --zero 3: on posts each unit's all-gather while the unit before it computes (forward and backward, into reused buffers) and its gradients' reduce-scatter without waiting; off gathers and reduce-scatters each unit when it is reached, waiting for each; the results are the same to the bit")
      ("bucket-mb", po::value(&tc.bucket_mb)->default_value(25.0, "25")->value_name("MIB"), "data-parallel gradient bucket size in MiB (> 0)")
      ("device", po::value(&device_name)->default_value("cpu")->value_name("cpu|cuda"), "where to compute: the CPU, or a node's GPUs (each rank takes one, by its node-local rank)")
      ("threads", po::value(&threads)->default_value(0)->value_name("N"), "CPU threads per rank (0: OMP_NUM_THREADS, else Slurm's --cpus-per-task, else all cores)")
      ("comm-backend", po::value(&comm_backend)->default_value("host")->value_name("host|nccl"), "--device cuda: collectives on device tensors through host copies over MPI (host: any MPI, ranks may share a GPU) or over NCCL (a GPU per rank)")
      ("comm-timeout", po::value(&comm_timeout)->default_value(600.0, "600")->value_name("SECONDS"), "seconds any collective may take before the job is aborted, naming it (0: wait forever)");
  po::options_description& memory = sections.section(kPrecisionMemory);
  memory.add_options()
      ("precision", po::value(&tc.precision)->default_value("fp32")->value_name("fp32|bf16|fp16"), "parameters, activations and gradients (fp32 master weights and optimizer states); bf16 multiplies in bf16 with fp32 sums (oneDNN on CPUs with AVX512-BF16, tensor cores on GPUs); on the CPU fp16 is rounded storage with fp32 arithmetic")
      ("loss-scale", po::value(&tc.loss_scaler.initial_scale)->default_value(65536.0, "65536")->value_name("X"), "fp16: the initial loss scale")
      ("static-loss-scale", po::bool_switch()->notifier([&tc](bool s) { tc.loss_scaler.dynamic = !s; }), "fp16: keep --loss-scale fixed (overflowing steps are still skipped)")
      ("loss-scale-window", po::value(&tc.loss_scaler.growth_interval)->default_value(2000)->value_name("N"), "fp16: steps without overflow before the loss scale doubles")
      ("hysteresis", po::value(&tc.loss_scaler.hysteresis)->default_value(2)->value_name("N"), "fp16: consecutive overflows before the loss scale halves")
      ("min-loss-scale", po::value(&tc.loss_scaler.min_scale)->default_value(1.0, "1")->value_name("X"), "fp16: the loss scale's floor (reaching it is an error that says what to do)")
      ("activation-checkpointing", po::value(&activation_checkpointing)->default_value("none")->value_name("none|full|selective"), "none, full (a checkpointed block keeps only its input; backward reruns its forward) or selective (backward recomputes the attention core's output)")
      ("recompute-every-k-blocks", po::value(&recompute_every_k_blocks)->default_value(1)->value_name("K"), "with --activation-checkpointing: recompute blocks K-1, 2K-1, ... (1: every block)")
      ("offload", po::value(&tc.adamw.offload)->default_value("none")->value_name("none|cpu|nvme"), "where the fp32 optimizer states (exp_avg, exp_avg_sq) live: none (the compute device), cpu (the host tier, updated there), or nvme (scratch files in --offload-dir, streamed through two 4 MiB buffers per state with the I/O overlapping the update; deleted at exit, checkpoints stay the source of truth)")
      ("offload-dir", po::value(&tc.adamw.offload_dir)->value_name("DIR"), "directory for --offload nvme's scratch files (a fast local disk; only with --offload nvme)")
      ("offload-optim-frac", po::value(&tc.adamw.host_fraction)->default_value(0.0, "0")->value_name("F"), "static placement: this share of the optimizer states' chunks on the host tier (the last ones of the flat order), the rest on the compute device (--offload cpu: all)")
      ("offload-params", po::bool_switch(&tc.offload_params), "with --zero 3: this rank's shard of the parameters and gradients on the host tier (the device holds the units gathered for use; ZeRO-Infinity)")
      ("placement-chunk-mb", po::value(&placement_chunk_mb)->default_value(4.0, "4")->value_name("MIB"), "the optimizer states' placement unit: MiB of each state per chunk (> 0)");
  (gpt ? memory : sections.foreign()).add_options()
      ("placement", po::value(&placement)->default_value("static")->value_name("static|auto"), "static (--offload, --offload-optim-frac as given) or auto (the smallest --offload-optim-frac whose planned device peak fits --device-memory-limit)");
  memory.add_options()
      ("device-memory-limit", po::value(&device_memory_limit)->default_value("0")->value_name("BYTES"), "bytes of the compute device this job may use per rank (suffix K, M, G: KiB, MiB, GiB; 0: no limit); checked after every step, the job stops naming the peak when it is passed")
      ("dry-run", po::bool_switch(&dry_run), gpt ? "print the predicted peak memory per rank by category and exit without training (reads only the data's vocab_size); plans for --dp x ... ranks when --dp is given, else for this job's" : "print the plan (layout, batch split, pipeline schedule and its bubble, the model and its parameters) and the predicted peak memory per rank by category, and exit without training; plans for --dp x ... ranks when --dp is given, else for this job's");
  sections.section(kCheckpoints).add_options()
      ("checkpoint-dir", po::value(&tc.checkpoint_dir)->value_name("DIR"), "write checkpoints (step_N.h5) here")
      ("checkpoint-every", po::value(&tc.checkpoint_every)->default_value(0)->value_name("N"), "steps between checkpoints (0: only at the end; needs --checkpoint-dir)")
      ("keep-checkpoints", po::value(&tc.keep_checkpoints)->default_value(0)->value_name("K"), "keep only the newest K checkpoints in --checkpoint-dir (0: all)")
      ("resume", po::value(&tc.resume)->default_value("none")->value_name("none|auto|FILE"), "none, auto (newest valid checkpoint in --checkpoint-dir) or a checkpoint file")
      ("overwrite", po::bool_switch(&tc.overwrite), "a fresh run may replace an existing metrics file, and moves the checkpoints already in --checkpoint-dir into a set_aside_<time> folder there");
  sections.section(kLogging).add_options()
      ("metrics", po::value(&tc.metrics_path)->value_name("FILE.jsonl"), "write metrics as JSON lines to this file (a resumed run continues it after the resumed step)")
      ("log-every", po::value(&tc.log_every)->default_value(10)->value_name("N"), "log a line every N steps (N >= 1; when not on a terminal)")
      ("log-level", po::value(&log_level)->default_value("info")->value_name("debug|info|warn|error"), "the least severe lines printed (errors always are)")
      ("quiet", po::bool_switch(&quiet), "only warnings and errors: no progress or info lines (--log-level warn)")
      ("peak-tflops", po::value(&tc.peak_tflops)->default_value(0.0, "0")->value_name("X"), "peak TFLOP/s per rank for MFU (0: measured sgemm rate)")
      ("trace", po::value(&tc.trace_path)->value_name("FILE.json"), "write a Chrome trace JSON file (Perfetto): every rank's steps with their time split, and on a pipeline its compute and messages");
  sections.section(kDebugging).add_options()
      ("check-collectives", po::bool_switch(&check_collectives), "compare each collective's fingerprint across its group first, reporting the first mismatch");
}

const std::vector<RenamedOption>& TrainOptions::renamed() {
  static const std::vector<RenamedOption> names = {{"checkpoint-every-k-blocks", "recompute-every-k-blocks"}};
  return names;
}

void TrainOptions::finish(int world_size, const po::variables_map& vm) {
  const log::Level level = log::parse_level(log_level);  // throws naming the choices
  TESSERA_CHECK(!quiet || !given(vm, "log-level"), "--quiet is --log-level warn: give one of them, not --quiet with",
                " --log-level ", log_level);
  log::set_level(quiet ? log::Level::warn : level);
  TESSERA_CHECK(threads >= 0, "--threads must be >= 0 (0: OMP_NUM_THREADS or all cores), got ", threads);
  // Threads per rank: --threads, else OMP_NUM_THREADS, else Slurm's CPUs per task, else every core.
  if (threads > 0) {
    omp_set_num_threads(threads);
  } else if (const char* slurm = std::getenv("SLURM_CPUS_PER_TASK"); slurm && !std::getenv("OMP_NUM_THREADS")) {
    if (const int cpus = std::atoi(slurm); cpus > 0) omp_set_num_threads(cpus);
  }
  if (device() == Device::cpu) {
    kernels::cpu::gemm_library_name();  // throws on a bad TESSERA_CPU_GEMM
    kernels::cpu::kernel_isa();         // throws on a bad TESSERA_CPU_ISA
  }
  mesh.tp_mode = comm::parse_tp_mode(tp_mode);  // throws naming the choices
  mesh = mesh.resolved(world_size);             // also checks --tp against the mode
  TESSERA_CHECK(!split_gather() || (mesh.tp > 1 && mesh.sp == 1), "--sp-mode split_gather splits the",
                " sequence inside the tensor-parallel group: it needs --tp > 1 and takes no --sp (got ", mesh.str(),
                ")");
  if (!split_gather()) parallel::parse_sequence_mode(sp_mode);  // throws naming the choices
  if (grid()) {
    auto refuse = [&](bool bad, const std::string& what) {
      TESSERA_CHECK(!bad, "--tp-mode ", tp_mode, " with ", what, ": not supported yet");
    };
    refuse(mesh.sp > 1 || split_gather(), "sequence parallelism (--sp, --sp-mode split_gather)");
    refuse(mesh.ep > 1, "expert parallelism (--ep)");
    refuse(mesh.pp > 1 && train.pp_schedule == "zb", "--pp-schedule zb");
    refuse(device() != Device::cpu, "--device cuda");
    refuse(train.precision != "fp32", "--precision " + train.precision);
  }
  // Several ranks on cuda: collectives on device tensors go through the Communicator (host copies, or
  // NCCL: comm/device_route.h). (moe_train, the only one with --ep, refuses cuda itself.)
  TESSERA_CHECK(device() == Device::cpu || cuda_available(), "--device cuda: no CUDA device is available",
                " (or this build has no CUDA)");
  // --comm-backend; TESSERA_CUDA_COMM, its former environment variable, still counts when the option
  // is not given (docs/environment.md).
  if (const char* env = std::getenv("TESSERA_CUDA_COMM"); env && !given(vm, "comm-backend")) {
    log::warn("TESSERA_CUDA_COMM=", env, " is read as --comm-backend ", env, ": the variable will be removed;",
              " give --comm-backend instead");
    comm_backend = env;
  }
  TESSERA_CHECK(comm_backend == "host" || comm_backend == "nccl", "--comm-backend ", comm_backend,
                ": expected host or nccl");
  // A node's ranks spread over its GPUs (several share one when they outnumber them).
  if (device() == Device::cuda) use_cuda_device(comm::node_local_rank());
  const models::ActivationCheckpointing ckpt = checkpointing();
  TESSERA_CHECK(!ckpt.enabled() || mesh.pp == 1 || train.pp_schedule != "zb", "--activation-checkpointing ",
                activation_checkpointing, " with --pp-schedule zb: not supported (zb's deferred weight gradients",
                " would read recomputed activations that later blocks overwrite); use 1f1b, gpipe or interleaved");
  TESSERA_CHECK(ckpt.enabled() || !given(vm, "recompute-every-k-blocks"), "--recompute-every-k-blocks ",
                recompute_every_k_blocks, " needs --activation-checkpointing full or selective (it chooses which",
                " blocks they recompute)");
  TESSERA_CHECK(comm_timeout >= 0, "--comm-timeout must be >= 0, got ", comm_timeout);
  const std::string& offload = train.adamw.offload;
  TESSERA_CHECK(offload == "none" || offload == "cpu" || offload == "nvme", "--offload ", offload,
                ": expected none, cpu or nvme");
  TESSERA_CHECK(offload == "none" || device() == Device::cpu, "--offload ", offload,
                ": not implemented for --device cuda yet");
  if (offload == "nvme") memory::check_scratch_dir(train.adamw.offload_dir, "--offload-dir");
  TESSERA_CHECK(offload == "nvme" || !given(vm, "offload-dir"), "--offload-dir ", train.adamw.offload_dir,
                " is for --offload nvme's scratch files: it takes --offload nvme, not --offload ", offload);
  const double frac = train.adamw.host_fraction;
  TESSERA_CHECK(frac >= 0.0 && frac <= 1.0, "--offload-optim-frac must be in [0, 1], got ", frac);
  TESSERA_CHECK(frac == 0.0 || offload == "none", "--offload-optim-frac ", frac, " places the optimizer states",
                " itself: it takes no --offload ", offload, " (--offload cpu is --offload-optim-frac 1)");
  TESSERA_CHECK(frac == 0.0 || device() == Device::cpu, "--offload-optim-frac: not implemented for --device cuda yet");
  train.device_memory_limit = parse_bytes(device_memory_limit, "--device-memory-limit");
  TESSERA_CHECK(zero3_overlap == "on" || zero3_overlap == "off", "--zero3-overlap ", zero3_overlap,
                ": expected on or off");
  TESSERA_CHECK(train.zero_stage == 3 || !given(vm, "zero3-overlap"), "--zero3-overlap ", zero3_overlap,
                " overlaps ZeRO-3's gathers: it takes --zero 3 (got --zero ", train.zero_stage, ")");
  train.zero3_overlap = zero3_overlap == "on";
  TESSERA_CHECK(!train.offload_params || train.zero_stage == 3, "--offload-params moves ZeRO-3's shard of the",
                " parameters: it needs --zero 3 (with --dp 1 the shard is the whole model)");
  TESSERA_CHECK(!train.offload_params || device() == Device::cpu, "--offload-params: not implemented for --device cuda yet");
  TESSERA_CHECK(placement_chunk_mb > 0, "--placement-chunk-mb must be > 0, got ", placement_chunk_mb);
  TESSERA_CHECK(placement_chunk_mb <= 1 << 20, "--placement-chunk-mb must be at most 1048576 (1 TiB), got ",
                placement_chunk_mb);
  train.adamw.placement_chunk = std::max<int64_t>(1, static_cast<int64_t>(placement_chunk_mb * (1 << 20) / 4));
  TESSERA_CHECK(placement == "static" || placement == "auto", "--placement ", placement, ": expected static or auto");
  TESSERA_CHECK(placement == "static" || (train.device_memory_limit > 0 && offload == "none" && frac == 0.0),
                "--placement auto chooses --offload-optim-frac to fit --device-memory-limit: give the limit, and",
                " no --offload or --offload-optim-frac");
  // fp16's loss-scaling options mean nothing in fp32 or bf16 (they train unscaled).
  if (train.precision != "fp16")
    for (const char* o : {"loss-scale", "static-loss-scale", "loss-scale-window", "hysteresis", "min-loss-scale"})
      TESSERA_CHECK(!given(vm, o), "--", o, " is fp16's loss scaling: it takes --precision fp16 (",
                    train.precision, " trains unscaled)");
  TESSERA_CHECK(mesh.pp > 1 || !given(vm, "pp-schedule"), "--pp-schedule ", train.pp_schedule,
                " needs --pp > 1 (one stage has no pipeline schedule)");
  TESSERA_CHECK(mesh.pp > 1 || pp_layers.empty(), "--pp-layers ", pp_layers, " needs --pp > 1 (one stage holds every block)");
  train.pp_layers = parse_block_counts(pp_layers);
  TESSERA_CHECK(mesh.sp > 1 || split_gather() || !given(vm, "sp-mode"), "--sp-mode ", sp_mode,
                " needs --sp > 1 (split_gather: --tp > 1)");
  // The batch splits over dp x ep (expert-parallel ranks route different tokens) x the tp grid's
  // batch shares (its rows and layers hold different sequences).
  const int batch_ranks = mesh.dp * mesh.ep * mesh.tp_batch_parts();
  if (train.micro_batch == 0) {
    TESSERA_CHECK(train.global_batch % batch_ranks == 0, "--global-batch ", train.global_batch,
                  " does not split over dp x ep", grid() ? " x the tp grid's rows and layers" : "", " = ", batch_ranks,
                  " ranks");
    train.micro_batch = train.global_batch / batch_ranks;
  }
  train.validate(batch_ranks);
  if (mesh.pp > 1) {
    // The schedule is built and verified now, on every rank, before any message is sent.
    const int64_t micro = train.micro_batches(batch_ranks);
    TESSERA_CHECK(micro <= 4096, "--pp: ", micro, " micro-batches per step; at most 4096");
    parallel::check_schedule(
        parallel::make_schedule(train.pp_schedule, mesh.pp, static_cast<int>(micro), train.virtual_stages));
  } else {
    TESSERA_CHECK(train.virtual_stages == 1, "--virtual-stages ", train.virtual_stages, " needs --pp > 1");
  }
}

std::string check_ranks_started_alike(const po::variables_map& vm, const std::vector<std::string>& data_options) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (auto& [option, value] : option_values(vm))
    if (option != "config") entries.emplace_back("--" + option, value);  // its contents are the values
  std::string training_data;  // data_options[0]'s identity
  for (const std::string& option : data_options)
    if (vm.count(option)) {
      const std::string path = vm[option].as<std::string>();
      if (path.empty()) continue;
      // A glob (a split over several shards): the identities of the files it matches, in order.
      // A blend (io/token_blend.h): each source's files and its weight.
      const auto files_identity = [](const std::string& files) {
        std::string identity;
        try {
          for (const std::string& file : io::TokenDataset::expand(files))
            identity += (identity.empty() ? "" : "; ") + io::file_identity(file);
        } catch (const Error&) {
          identity = "missing";
        }
        return identity;
      };
      std::string identity;
      if (const std::optional<std::vector<io::BlendSource>> blend = io::parse_blend(path)) {
        for (const io::BlendSource& source : *blend)
          identity += (identity.empty() ? "blend " : " + ") + files_identity(source.path) + " x " +
                      io::blend_text({{"", source.weight}}).substr(1);
      } else {
        identity = files_identity(path);
      }
      entries.emplace_back("the file of --" + option, identity);
      if (option == data_options.front()) training_data = entries.back().second;
    }
  comm::Communicator world = comm::Communicator::world();
  const std::string differences = comm::rank_differences(entries, world);
  TESSERA_CHECK(differences.empty(), "the ranks of this job were started with different options or data (each rank",
                " needs the same command line, config file and data files): ", differences);
  return training_data;
}

int TrainOptions::split_model(int64_t heads, int64_t hidden) const {
  const int q = mesh.tp_feature_parts();
  const int hidden_parts = mesh.tp_mode == comm::TpMode::d3 ? q * q : q;
  TESSERA_CHECK(!grid() || (heads % q == 0 && hidden % hidden_parts == 0), "--tp-mode ", tp_mode, " --tp ", mesh.tp,
                ": --heads ", heads, " must divide by the grid's side ", q, " and --hidden ", hidden, " by ",
                hidden_parts);
  return q;
}

Device TrainOptions::device() const { return parse_device(device_name); }

std::string TrainOptions::gemm_note() const {
  if (device() != Device::cpu) return {};
  // the copy of tessera's own kernels (kernels/cpu/isa.h); "native" in a -DTESSERA_NATIVE=ON build
  const char* copy = kernels::cpu::isa_copies() ? kernels::cpu::isa_name(kernels::cpu::kernel_isa()) : "native";
  const std::string isa = std::string(", kernels: ") + copy + ")";
  if (train.precision == "bf16") return std::string(" (GEMMs: bf16 inputs, ") + kernels::cpu::gemm_bf16_path() + isa;
  return std::string(" (GEMMs: ") + kernels::cpu::gemm_library_name() + isa;
}

models::ActivationCheckpointing TrainOptions::checkpointing() const {
  models::ActivationCheckpointing c;
  c.every = recompute_every_k_blocks;
  if (activation_checkpointing == "full") {
    c.recompute = nn::Recompute::forward;
  } else if (activation_checkpointing == "selective") {
    c.recompute = nn::Recompute::attention_core;
  } else {
    TESSERA_CHECK(activation_checkpointing == "none", "--activation-checkpointing ", activation_checkpointing,
                  ": expected none, full or selective");
  }
  TESSERA_CHECK(c.every >= 1, "--recompute-every-k-blocks must be >= 1, got ", c.every);
  return c;
}

namespace {
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  const fs::path ca = fs::weakly_canonical(a, ec), cb = fs::weakly_canonical(b, ec);
  return ec ? fs::path(a).lexically_normal() == fs::path(b).lexically_normal() : ca == cb;
}
}  // namespace

void check_output_files(const std::vector<OptionPath>& inputs, const std::vector<OptionPath>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const OptionPath& out = outputs[i];
    if (out.path.empty()) continue;
    for (const OptionPath& in : inputs)
      TESSERA_CHECK(in.path.empty() || !same_file(in.path, out.path), out.option, " ", out.path, " is the file ",
                    in.option, " ", in.path, " reads: writing it would destroy it; give another file");
    for (size_t j = 0; j < i; ++j)
      TESSERA_CHECK(outputs[j].path.empty() || !same_file(outputs[j].path, out.path), out.option, " ", out.path,
                    " and ", outputs[j].option, " ", outputs[j].path, " are the same file: give each its own");
  }
}

void TrainOptions::check_sequence_split(int64_t seq_len) const {
  TESSERA_CHECK(seq_len % mesh.sp == 0, "--seq-len ", seq_len, " is not divisible by --sp ", mesh.sp,
                " (sequence parallelism gives each rank an equal share of the positions)");
  TESSERA_CHECK(mesh.sp == 1 || sp_mode != "zigzag" || seq_len % (2 * mesh.sp) == 0, "--seq-len ", seq_len,
                " is not divisible by 2 x --sp = ", 2 * mesh.sp, " (--sp-mode zigzag cuts each sequence into 2 x sp",
                " equal chunks, two a rank); use --sp-mode ring, or a --seq-len divisible by ", 2 * mesh.sp);
}

void TrainOptions::check_sequence_heads(int64_t heads) const {
  if (mesh.sp == 1 || sp_mode != "all_to_all") return;
  const int64_t parts = mesh.tp_feature_parts();
  if (heads % parts != 0) return;  // the tensor split's own check names it
  TESSERA_CHECK((heads / parts) % mesh.sp == 0, "--sp-mode all_to_all --sp ", mesh.sp, ": each rank's ", heads / parts,
                " heads (--heads ", heads, parts > 1 ? " over the tensor split" : "", ") do not split evenly over the ",
                mesh.sp, " sp ranks (all_to_all gives each an equal share of the heads); use --sp-mode ring, or --heads",
                " divisible by ", parts * mesh.sp);
}

ParallelSetup::ParallelSetup(const TrainOptions& options, int64_t heads, int64_t head_dim)
    : options_(options), mesh_(options.mesh), tensor_(mesh_.group(comm::Axis::tp), options.split_gather()) {
  if (options.grid()) grid_.emplace(mesh_);
  for (comm::Communicator* g : mesh_.all_groups()) {
    g->set_timeout(options.comm_timeout);
    g->set_check_collectives(options.check_collectives);
    g->set_device_backend(options.comm_backend);
  }
  // The experts' token group (nn/expert_layout.h): the ep group, and as token shards the sp group
  // (each a share of every sequence) or, under split_gather, the tp group (each a share of the rows).
  if (options.mesh.ep > 1 || options.mesh.sp > 1 || options.split_gather()) {
    comm::Communicator* shards = options.mesh.sp > 1       ? &mesh_.group(comm::Axis::sp)
                                 : options.split_gather() ? &mesh_.group(comm::Axis::tp)
                                                          : nullptr;
    experts_.emplace(mesh_.group(comm::Axis::ep), shards, options.mesh.sp > 1);
  }
  if (options.mesh.sp > 1)
    sequence_.emplace(parallel::parse_sequence_mode(options.sp_mode), mesh_.group(comm::Axis::sp),
                      heads / options.mesh.tp_feature_parts(), head_dim);
}

models::ModelLayout ParallelSetup::layout() {
  models::ModelLayout layout;
  layout.tensor = grid_ ? static_cast<const nn::TensorLayout*>(&*grid_) : &tensor_;
  if (sequence_) layout.sequence = &*sequence_;
  if (options_.train.zero_stage == 3) layout.zero3 = &mesh_.data_group();
  layout.offload_params = options_.train.offload_params;
  layout.zero3_overlap = options_.train.zero3_overlap;
  layout.pipeline = {mesh_.coord(comm::Axis::pp), options_.mesh.pp, options_.train.virtual_stages, options_.train.pp_layers};
  if (experts_) layout.experts = &*experts_;
  layout.checkpointing = options_.checkpointing();
  const optim::Precision precision = optim::parse_precision(options_.train.precision);
  layout.activations = precision == optim::Precision::bf16   ? DType::bf16
                       : precision == optim::Precision::fp16 ? DType::f16
                                                             : DType::f32;
  return layout;
}

void log_run_environment() {
  if (const char* job = std::getenv("SLURM_JOB_ID")) {
    const char* nodes = std::getenv("SLURM_JOB_NODELIST");
    const char* restart = std::getenv("SLURM_RESTART_COUNT");
    log::info("slurm job ", job, " on nodes ", nodes ? nodes : "?", " (restart ", restart ? restart : "0", ")");
  }
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  if (wait && (std::string(wait) == "PASSIVE" || std::string(wait) == "passive"))
    log::warn("OMP_WAIT_POLICY=PASSIVE: OpenMP threads sleep between the step's ~30 parallel kernels per block,"
              " which cost 2-8% of a CPU step in validation/bench/gpt_cpu.sh; unset it for speed");
}

int train_and_report(train::Workload& workload, const train::TrainConfig& tc, comm::ProcessMesh& mesh, int world_rank) {
  train::Trainer trainer(workload, tc, mesh);
  train::install_preemption_handlers();
  const train::TrainResult result = trainer.run();
  if (result.preempted) return train::kExitPreempted;
  if (result.already_finished) return 0;  // the trainer said so
  const std::string eval =
      (result.last_eval_loss ? ", eval loss " + std::to_string(*result.last_eval_loss) : std::string()) +
      (result.last_eval_accuracy ? ", eval accuracy " + std::to_string(*result.last_eval_accuracy) : std::string());
  if (world_rank == 0) {
    if (result.last_loss) log::info("done: final loss ", *result.last_loss, eval);
    else log::info("done: no step trained", eval);
  }
  return 0;
}

plan::RunLayout planned_layout(const TrainOptions& o, int batch_ranks) {
  plan::RunLayout run;
  run.micro_batch = o.train.micro_batch;
  run.micro_batches = o.train.micro_batches(batch_ranks);
  run.mesh = o.mesh;
  run.ring = !o.split_gather() && parallel::is_ring(parallel::parse_sequence_mode(o.sp_mode));
  run.zigzag = !o.split_gather() && parallel::parse_sequence_mode(o.sp_mode) == parallel::SequenceMode::zigzag;
  run.zero_stage = o.train.zero_stage;
  run.zero3_overlap = o.train.zero3_overlap;
  run.pp_schedule = o.train.pp_schedule;
  run.virtual_stages = o.train.virtual_stages;
  run.pp_layers = o.train.pp_layers;
  run.checkpointing = o.checkpointing();
  run.precision = o.train.precision;
  run.offload = o.train.adamw.offload;
  run.offload_chunk = o.train.adamw.offload_chunk;
  run.host_fraction = o.train.adamw.host_fraction;
  run.placement_chunk = o.train.adamw.placement_chunk;
  run.offload_params = o.train.offload_params;
  return run;
}

}  // namespace tessera::cli
