// Trainer: the step loop, evaluation and metrics.
#include "train/trainer.h"

#include <cmath>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/log.h"
#include "core/test_hooks.h"
#include "core/timer.h"
#include "io/checkpoint_file.h"
#include "io/hdf5_file.h"
#include "kernels/kernel_timing.h"
#include "kernels/ops.h"
#include "kernels/peak_flops.h"
#include "comm/string_exchange.h"
#include "optim/grad_clip.h"
#include "train/pipeline_runner.h"
#include "train/run_trace.h"
#include "train/metrics.h"
#include "train/preemption.h"
#include "train/version.h"
#include "train/progress.h"

namespace tessera::train {

namespace {
// fp32 and bf16 train unscaled: a static loss scale of 1.
optim::LossScalerConfig unit_loss_scale() {
  optim::LossScalerConfig c;
  c.initial_scale = c.min_scale = 1.0;
  c.dynamic = false;
  return c;
}

// The step of a checkpoint, read by rank 0 before anything is loaded from it; -1 when it cannot be
// read (loading it then says why).
int64_t checkpoint_step(const std::string& path, comm::Communicator& world) {
  int64_t step = std::numeric_limits<int64_t>::min();
  if (world.rank() == 0) {
    try {
      step = io::CheckpointReader(path, MPI_COMM_NULL).attr_int("step");
    } catch (const Error&) {
      step = -1;
    }
  }
  return world.all_reduce_max(step);
}

// This process's peak resident memory (VmHWM of /proc/self/status) in bytes; -1 where unknown.
int64_t peak_resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:   1234 kB"
  return -1;
}

// A CPU step's time split as metric names and milliseconds (kernels/kernel_timing.h).
// A step's job-wide figures, in one max and one sum all-reduce: whether any rank was asked to stop
// (preemption), the largest rank's resident memory, and the workload's metrics (each summed or
// maxed over the job, in the workload's order).
struct StepFigures {
  bool preempted = false;
  int64_t rss_peak_bytes = 0;
  std::vector<std::pair<std::string, double>> metrics;
};

StepFigures reduce_step_figures(comm::Communicator& world, bool preempt, int64_t rss_bytes,
                                const std::vector<Workload::StepMetric>& metrics) {
  std::vector<double> maxima{preempt ? 1.0 : 0.0, static_cast<double>(rss_bytes)}, sums;
  for (const Workload::StepMetric& m : metrics) (m.max ? maxima : sums).push_back(m.value);
  world.all_reduce_max(std::span<double>(maxima));
  world.all_reduce_sum(std::span<double>(sums));
  StepFigures figures{maxima[0] != 0, static_cast<int64_t>(maxima[1]), {}};
  size_t next_max = 2, next_sum = 0;
  for (const Workload::StepMetric& m : metrics)
    figures.metrics.emplace_back(m.name, m.max ? maxima[next_max++] : sums[next_sum++]);
  return figures;
}

std::vector<std::pair<std::string, double>> time_split(const kernels::KernelTimes& times) {
  using kernels::KernelKind;
  return {{"gemm_ms", times.of(KernelKind::gemm)},
          {"attention_ms", times.of(KernelKind::attention)},
          {"optimizer_ms", times.of(KernelKind::optimizer)},
          {"other_kernels_ms", times.of(KernelKind::other)},
          {"data_ms", times.of(KernelKind::data)}};
}
}  // namespace

// Every option of the run, checked before anything is built: each message names the option, its
// value and what is allowed. Floating values must also be finite (the command line refuses "nan"
// and "inf" as it parses; these checks hold for configs built in code too).
void TrainConfig::validate(int dp) const {
  TESSERA_CHECK(steps >= 0, "--steps must be >= 0, got ", steps);
  TESSERA_CHECK(global_batch >= 1, "--global-batch must be >= 1, got ", global_batch);
  TESSERA_CHECK(micro_batch >= 1, "--micro-batch must be >= 1, got ", micro_batch);
  TESSERA_CHECK(global_batch % (micro_batch * dp) == 0, "--global-batch ", global_batch,
                " is not a multiple of --micro-batch ", micro_batch, " x dp ", dp, " = ", micro_batch * dp,
                " (each data-parallel rank runs whole micro-batches of the same size)");
  TESSERA_CHECK(lr > 0 && std::isfinite(lr), "--lr must be positive and finite, got ", lr);
  TESSERA_CHECK(min_lr >= 0 && min_lr <= lr, "--min-lr must be in [0, --lr ", lr, "], got ", min_lr);
  TESSERA_CHECK(warmup >= 0, "--warmup must be >= 0, got ", warmup);  // past --steps: warm-up all along
  TESSERA_CHECK(adamw.weight_decay >= 0 && std::isfinite(adamw.weight_decay),
                "--weight-decay must be >= 0 and finite, got ", adamw.weight_decay);
  TESSERA_CHECK(adamw.beta1 >= 0 && adamw.beta1 < 1, "--beta1 must be in [0, 1), got ", adamw.beta1);
  TESSERA_CHECK(adamw.beta2 >= 0 && adamw.beta2 < 1, "--beta2 must be in [0, 1), got ", adamw.beta2);
  TESSERA_CHECK(grad_clip >= 0 && std::isfinite(grad_clip), "--grad-clip must be >= 0 and finite (0: off), got ",
                grad_clip);
  TESSERA_CHECK(zero_stage >= 0 && zero_stage <= 3, "--zero ", zero_stage, ": the stages are 0, 1, 2 and 3");
  // The bucket's bytes must fit an int64 (and a bucket past 1 TiB is one bucket anyway).
  TESSERA_CHECK(bucket_mb > 0 && bucket_mb <= 1 << 20, "--bucket-mb must be in (0, 1048576] (MiB), got ", bucket_mb);
  TESSERA_CHECK(eval_every >= 0, "--eval-every must be >= 0 (0: never), got ", eval_every);
  TESSERA_CHECK(eval_batches >= 1, "--eval-batches must be >= 1, got ", eval_batches);
  TESSERA_CHECK(log_every >= 1, "--log-every must be >= 1, got ", log_every);
  TESSERA_CHECK(peak_tflops >= 0 && std::isfinite(peak_tflops),
                "--peak-tflops must be >= 0 and finite (0: measured), got ", peak_tflops);
  TESSERA_CHECK(checkpoint_every >= 0, "--checkpoint-every must be >= 0 (0: only at the end), got ", checkpoint_every);
  TESSERA_CHECK(keep_checkpoints >= 0, "--keep-checkpoints must be >= 0 (0: all), got ", keep_checkpoints);
  // Options that mean something only with a checkpoint folder.
  TESSERA_CHECK(checkpoint_every == 0 || !checkpoint_dir.empty(), "--checkpoint-every ", checkpoint_every,
                " needs --checkpoint-dir (where the checkpoints go)");
  TESSERA_CHECK(keep_checkpoints == 0 || !checkpoint_dir.empty(), "--keep-checkpoints ", keep_checkpoints,
                " needs --checkpoint-dir (whose checkpoints it prunes)");
  TESSERA_CHECK(!resume.empty(), "--resume must be none, auto or a checkpoint file, got ''");
  TESSERA_CHECK(init_from.empty() || resume == "none" || resume == "auto", "--init-from ", init_from, " and --resume ",
                resume, " both name the weights to start from: --init-from starts a new run (fresh optimizer, step",
                " 0), --resume continues one; give one of them");
  if (!init_from.empty()) {
    std::error_code ec;
    TESSERA_CHECK(std::filesystem::is_regular_file(init_from, ec), "--init-from ", init_from,
                  ": no such checkpoint file");
  }
  TESSERA_CHECK(resume != "auto" || !checkpoint_dir.empty(), "--resume auto needs --checkpoint-dir");
  if (resume != "none" && resume != "auto") {
    std::error_code ec;
    TESSERA_CHECK(std::filesystem::exists(resume, ec), "--resume ", resume,
                  ": no such file (expected none, auto or a checkpoint file)");
    TESSERA_CHECK(!std::filesystem::is_directory(resume, ec), "--resume ", resume, " is a directory: give a",
                  " checkpoint file in it, or --resume auto --checkpoint-dir ", resume);
  }
  TESSERA_CHECK(on_nan == "stop" || on_nan == "skip", "--on-nan must be stop or skip, got '", on_nan, "'");
  optim::parse_precision(precision);
  // fp16's loss scaler, by its options' names (LossScalerConfig::validate checks the rest).
  TESSERA_CHECK(loss_scaler.initial_scale > 0 && std::isfinite(loss_scaler.initial_scale),
                "--loss-scale must be positive and finite, got ", loss_scaler.initial_scale);
  TESSERA_CHECK(loss_scaler.min_scale > 0 && loss_scaler.min_scale <= loss_scaler.initial_scale,
                "--min-loss-scale must be in (0, --loss-scale ", loss_scaler.initial_scale, "], got ",
                loss_scaler.min_scale);
  TESSERA_CHECK(loss_scaler.growth_interval >= 1, "--loss-scale-window must be >= 1, got ",
                loss_scaler.growth_interval);
  TESSERA_CHECK(loss_scaler.hysteresis >= 1, "--hysteresis must be >= 1, got ", loss_scaler.hysteresis);
  loss_scaler.validate();
}

Trainer::Trainer(Workload& work, const TrainConfig& config, comm::ProcessMesh& mesh)
    : work_(work),
      config_(config),
      mesh_(mesh),
      world_(mesh.world()),
      dp_(mesh.group(comm::Axis::dp)),
      data_(mesh.data_group()),
      tp_(mesh.group(comm::Axis::tp)),
      pp_(mesh.group(comm::Axis::pp)),
      ep_(mesh.group(comm::Axis::ep)),
      batch_ranks_(mesh.batch_ranks()),
      grad_sync_(config.zero_stage < 3 ? std::make_unique<parallel::GradSync>(
                                             work.params(), data_, config.zero_stage,
                                             static_cast<int64_t>(config.bucket_mb * (1 << 20)))
                                       : nullptr),
      optimizer_(work.params(), config.zero_stage, grad_sync_.get(), data_, config.adamw, &tp_, &pp_, &ep_),
      schedule_{config.lr, config.min_lr, config.warmup, config.steps},
      precision_(work.params(), optim::parse_precision(config.precision), work.tied_weights()),
      scaler_(precision_.precision() == optim::Precision::fp16 ? config.loss_scaler : unit_loss_scale()) {
  config.validate(batch_ranks_);
  if (const auto grid = mesh.partial_gradient_groups())
    optimizer_.set_partial_groups(grid.stream_rows, grid.branch_rows, grid.block_copies);
}

float Trainer::train_step(int64_t step) {
  if (!grads_zero_) {
    const kernels::KernelTimer timer(kernels::KernelKind::optimizer, "zero_grads");
    work_.params().zero_grads();
  }
  grads_zero_ = false;
  // The batch splits over dp x ep x the tp grid's rows; each rank's loss is its share of its (dp x sp x ep x grid) group's
  // micro-batch mean, so the shares add up over sp and ep, and dp averages.
  const int64_t n_micro = config_.micro_batches(batch_ranks_);
  // fp16: the loss is scaled (its gradients by the loss scale) so that small gradients survive.
  const float grad_scale = static_cast<float>(scaler_.scale()) / static_cast<float>(n_micro * dp_.size());
  precision_.round_weights();  // bf16/fp16: the step's forward and backward see rounded weights
  double loss = 0.0;
  if (PipelineRunner* pipeline = work_.pipeline()) {
    // Every micro-batch through this stage's program; buckets reduce during the last backwards.
    set_context("step " + std::to_string(step));
    parallel::TiedWeights& tied = *work_.tied_weights();
    tied.zero_mirror_grad();
    if (grad_sync_) grad_sync_->begin();
    loss = pipeline->train_step(step, grad_scale, grad_sync_.get());
    if (grad_sync_) grad_sync_->finish();
    int64_t begin = 0;
    const Tensor held = optimizer_.held_gradients(begin);  // sets begin: not in the same call's arguments
    tied.add_mirror_grads(held, begin);
  } else {
    for (int64_t m = 0; m < n_micro; ++m) {
      set_context("step " + std::to_string(step) + ", micro-batch " + std::to_string(m + 1));
      const bool last = m == n_micro - 1;  // earlier micro-batches accumulate locally
      parallel::GradSync* sync = last ? grad_sync_.get() : nullptr;
      if (sync) sync->begin();
      loss += work_.train_micro_batch(step, m, grad_scale, sync);
    }
    if (grad_sync_) grad_sync_->finish();  // every bucket reduced over dp
  }
  precision_.restore_weights();  // the fp32 master values, for the update and checkpoints
  optimizer_.complete_partial_grads();
  int64_t held_begin = 0;
  held_squares_ =
      precision_.round_gradients(optimizer_.held_gradients(held_begin), optimizer_.norm_share_is_held_sum());
  // Each rank's loss is its share of its micro-batches' mean (all of it without sp); on a
  // pipeline only the last stage's ranks hold it.
  loss = mesh_.sum_batch_shares(loss, true);
  return static_cast<float>(loss / static_cast<double>(n_micro * dp_.size()));
}

double Trainer::update(int64_t step, float loss, double lr, TrainResult& result, Progress& progress) {
  const bool root = world_.rank() == 0;
  const double loss_scale = scaler_.scale();
  if (fp16()) {
    // An overflow anywhere skips the step on every rank of every axis (one all-reduce over the job).
    int64_t begin = 0;
    const bool overflow = optim::overflow_anywhere(optim::any_nonfinite(optimizer_.held_gradients(begin)), world_);
    if (scaler_.update(overflow)) {  // throws when the scale would fall below its minimum
      ++result.skipped_steps;
      if (root)
        progress.message("step " + std::to_string(step) + ": fp16 gradients overflow at loss scale " +
                         std::to_string(loss_scale) + "; step skipped, loss scale now " +
                         std::to_string(scaler_.scale()));
      return std::numeric_limits<double>::quiet_NaN();
    }
  }
  const double norm = optimizer_.grad_norm(std::exchange(held_squares_, std::nullopt)) / loss_scale;
  // Numerical guard: loss and norm are the same on every rank (all-reduced), so every rank
  // takes the same branch.
  if (!std::isfinite(loss) || !std::isfinite(norm)) {
    const std::string param = first_nonfinite_gradient();
    const std::string what = "step " + std::to_string(step) + ": loss " + std::to_string(loss) +
                             ", gradient norm " + std::to_string(norm) + " is not finite" +
                             (param.empty() ? std::string() : "; first non-finite gradient: " + param);
    if (config_.on_nan == "stop") {
      std::optional<std::string> last;
      if (!config_.checkpoint_dir.empty()) last = newest_checkpoint(config_.checkpoint_dir, world_);
      fail(what, "; last good checkpoint: ", last ? *last : std::string("none"),
           " (lower --lr, raise --warmup, or --on-nan skip)");
    }
    ++result.skipped_steps;
    if (root) progress.message(what + "; step skipped (--on-nan skip)");
    return norm;
  }
  grads_zero_ = optimizer_.step(static_cast<float>(lr),
                                optim::clip_factor(norm, config_.grad_clip) / static_cast<float>(loss_scale));
  if (parallel::TiedWeights* tied = work_.tied_weights()) tied->copy_to_mirror();
  return norm;
}

void Trainer::set_context(const std::string& context) {
  for (comm::Communicator* g : mesh_.all_groups()) g->set_context(context);
}

TrainResult Trainer::run() {
  const Device device = work_.params().device();
  // MFU against the device's peak for the run's GEMM inputs (bf16 or fp32), or --peak-tflops; not
  // reported where the peak is unknown (a GPU outside kernels/peak_flops.h's table).
  const std::optional<double> peak_tflops =
      config_.peak_tflops > 0 ? std::optional<double>(config_.peak_tflops)
                              : kernels::peak_tflops(device, precision_.precision() == optim::Precision::bf16);
  const double flops_per_sample = work_.flops_per_sample();
  const int64_t units_per_step = config_.global_batch * work_.units_per_sample();
  const std::string rate_key = work_.unit() + "_per_s";
  const bool root = world_.rank() == 0;
  TESSERA_CHECK(config_.dump_path.empty() || (world_.size() == 1 && config_.zero_stage < 3),
                "--dump runs on one rank without ZeRO-3");

  TrainResult result;
  check_checkpoint_dir();
  if (!config_.checkpoint_dir.empty()) folder_lock_ = FolderLock(config_.checkpoint_dir, world_);
  // --init-from with --resume auto: a folder already holding checkpoints is a run to continue, not
  // one to start over from other weights (checked before anything is read or moved).
  if (!config_.init_from.empty() && config_.resume == "auto") {
    const int64_t earlier = checkpoint_file_count(config_.checkpoint_dir, world_);
    TESSERA_CHECK(earlier == 0, "--init-from ", config_.init_from, " starts a new run, but --checkpoint-dir ",
                  config_.checkpoint_dir, " holds ", earlier, " checkpoint(s) that --resume auto would continue: ",
                  "drop --init-from to continue that run, or pass another --checkpoint-dir to start a new one");
  }
  // The weights come first: --overwrite may then move the folder's checkpoints aside, the source among them.
  if (!config_.init_from.empty()) init_from();
  const std::optional<std::string> from = resume_source();
  // A job whose checkpoint is of its last step has nothing to do: it writes nothing at all.
  const bool finished = from && checkpoint_step(*from, world_) == config_.steps;
  // A fresh run starts its metrics file before anything else is written (a file holding another
  // run's lines is refused).
  MetricsWriter metrics = from ? MetricsWriter() : open_metrics(std::nullopt, {});
  if (!config_.dump_path.empty() && !finished) work_.dump_initial(config_.dump_path);
  const CheckpointInfo resumed = from ? resume(*from) : CheckpointInfo{};
  if (finished) {
    if (root)
      log::warn("already finished at step ", resumed.step, "; nothing to do (", *from, " is of the last step, --steps ",
                config_.steps, ")");
    result.already_finished = true;
    return result;
  }
  if (from) {
    metrics = open_metrics(from, resumed);
    // This run writes the steps after the one resumed: later checkpoints in the folder (the newer
    // ones --resume auto found damaged, or those after an explicit --resume FILE) are moved aside,
    // never replaced.
    if (!config_.checkpoint_dir.empty())
      set_aside_checkpoints(config_.checkpoint_dir, resumed.step,
                            "resumed from step " + std::to_string(resumed.step) + ", with later checkpoints in " +
                                config_.checkpoint_dir,
                            world_);
  }
  const int64_t first_step = resumed.step + 1;
  Progress progress(config_.steps, config_.log_every, first_step);
  if (parallel::TiedWeights* tied = work_.tied_weights()) tied->copy_to_mirror();  // a resumed table
  std::unique_ptr<RunTrace> trace;
  if (!config_.trace_path.empty()) {
    trace = std::make_unique<RunTrace>(world_);
    if (PipelineRunner* pipeline = work_.pipeline()) pipeline->set_trace(trace.get());
  }
  // TESSERA_OP_PROFILE=1: each op's time over the steps after the first (which holds one-time
  // set-up), printed by rank 0 at the end (kernels/op_profile.h).
  const bool profile_ops = kernels::op_profile_enabled();
  kernels::OpProfile op_profile;
  work_.start(first_step);
  const TestHooks& faults = test_hooks();  // the fault tests' injections
  for (int64_t step = first_step; step <= config_.steps; ++step) {
    if (step == faults.kill.at && world_.rank() == faults.kill.rank) std::raise(SIGKILL);
    if (step == faults.signal.at && world_.rank() == faults.signal.rank) std::raise(faults.signal_number);
    reset_peak_memory(device);
    const int64_t allocations_before = memory_stats(device).allocations;
    const auto [comm_bytes_before, comm_ms_before] = comm_totals();
    kernels::take_kernel_times();  // the step's own kernels from here (not the last evaluation's)
    Timer timer;
    const double trace_start = trace ? trace->now() : 0.0;
    const float loss = train_step(step);
    if (step == 1 && !config_.dump_path.empty()) work_.dump_first_step(config_.dump_path);
    if (step == faults.nan_step) poison_gradient();
    const double loss_scale = scaler_.scale();  // this step's
    const double lr = schedule_.at(step);
    const double norm = update(step, loss, lr, result, progress);
    // Preemption: every rank learns whether any rank was signalled (with the metrics' figures).
    const StepFigures figures =
        reduce_step_figures(world_, preemption_requested(), peak_resident_bytes(), work_.step_metrics());
    result.preempted = figures.preempted;
    ops::synchronize(device);  // the step's queued kernels (the optimizer's) count in its time
    const double ms = timer.millis();
    const auto [comm_bytes, comm_ms] = comm_totals();
    const kernels::KernelTimes kernel_times =
        kernels::take_kernel_times(profile_ops && step > first_step ? &op_profile : nullptr);

    const double samples_per_s = static_cast<double>(config_.global_batch) / (ms / 1e3);
    const double units_per_s = static_cast<double>(units_per_step) / (ms / 1e3);
    const double tflops = samples_per_s * flops_per_sample / 1e12;
    JsonLine line;
    line.add("step", step).add("loss", static_cast<double>(loss)).add("lr", lr).add("grad_norm", norm)
        .add("step_ms", ms).add(rate_key, units_per_s).add("tflops", tflops);
    if (peak_tflops) line.add("mfu", tflops / (*peak_tflops * world_.size()));
    line.add("peak_mem_bytes", memory_stats(device).peak_bytes)
        .add("comm_bytes", comm_bytes - comm_bytes_before)
        .add("comm_ms", comm_ms - comm_ms_before)
        .add("state_bytes", optimizer_.state_bytes())
        .add("allocations", memory_stats(device).allocations - allocations_before)
        .add("loss_scale", loss_scale)
        .add("skipped_steps", result.skipped_steps)
        .add("rss_peak_bytes", figures.rss_peak_bytes);  // the largest rank's
    // The step's time split: CPU kernels timed on the host, CUDA ops on the device (events).
    const auto split = time_split(kernel_times);
    for (const auto& [key, value] : split) line.add(key, value);
    if (trace) {
      trace->add("step " + std::to_string(step), "step", trace_start, trace->now());
      auto counters = split;
      counters.emplace_back("comm_ms", comm_ms - comm_ms_before);
      trace->add_counters("step time split (ms)", trace_start, std::move(counters));
    }
    if (const MemoryStats host = host_tier_stats(); host.allocations > 0)  // something was offloaded there
      line.add("host_peak_bytes", host.peak_bytes).add("host_state_bytes", optimizer_.host_state_bytes());
    for (const auto& [name, value] : figures.metrics) line.add(name, value);
    metrics.write(line);
    check_device_memory(step, device);
    result.last_loss = loss;
    char summary[160];
    std::snprintf(summary, sizeof summary, "loss %.4f | lr %.2e | grad_norm %.3f | %.0f ms | %.0f %s/s", loss, lr,
                  norm, ms, units_per_s, work_.unit() == "tokens" ? "tok" : "samples");
    if (root) progress.step(step, summary);

    const bool eval_now = work_.can_evaluate() && config_.eval_every > 0 &&
                          (step % config_.eval_every == 0 || step == config_.steps);
    if (eval_now) {
      const Workload::Evaluation eval = work_.evaluate();
      result.last_eval_loss = static_cast<float>(eval.loss);
      JsonLine eval_line;
      eval_line.add("step", step).add("eval_loss", eval.loss);
      std::string said = "step " + std::to_string(step) + " eval_loss " + std::to_string(eval.loss);
      if (eval.accuracy) {
        result.last_eval_accuracy = static_cast<float>(*eval.accuracy);
        eval_line.add("eval_acc", *eval.accuracy);
        said += " eval_acc " + std::to_string(*eval.accuracy);
      }
      metrics.write(eval_line);
      if (root) progress.message(said);
    }
    const bool save_now = !config_.checkpoint_dir.empty() &&
                          ((config_.checkpoint_every > 0 && step % config_.checkpoint_every == 0) ||
                           step == config_.steps || result.preempted);
    if (save_now) {
      save(step);
      if (root) progress.message("saved checkpoint of step " + std::to_string(step));
    }
    if (result.preempted) {
      if (root) progress.message("preempted at step " + std::to_string(step) + ": stopping (resume with --resume auto)");
      break;
    }
  }
  progress.finish();
  metrics.close();  // a failed last write stops the run here, naming the file
  if (profile_ops && root) std::fputs(kernels::format_op_profile(op_profile).c_str(), stderr);
  if (trace) {
    if (PipelineRunner* pipeline = work_.pipeline()) pipeline->set_trace(nullptr);
    trace->write(config_.trace_path, world_);
    if (root) log::info("trace: ", config_.trace_path, " (open in https://ui.perfetto.dev)");
  }
  if (!config_.dump_path.empty()) {  // the parameters after the last step
    io::H5File f = io::H5File::open_rw(config_.dump_path);
    nn::ParamStore& store = work_.params();
    for (int i = 0; i < store.size(); ++i) f.write("/final/" + store.spec(i).name, store.logical_copy(store.value(i), i));
  }
  return result;
}

// Every rank writes its part of each checkpoint: each one probes the folder (rank 0 makes it
// first), so a rank that cannot write there (another node's mount, a path that is a file on its
// node) is found before step 1, named with its reason.
void Trainer::check_checkpoint_dir() {
  if (config_.checkpoint_dir.empty()) return;
  const std::filesystem::path dir(config_.checkpoint_dir);
  std::error_code ec;
  if (world_.rank() == 0) std::filesystem::create_directories(dir, ec);
  world_.barrier();
  std::string problem;
  const std::filesystem::path probe = dir / (".tessera_write_probe." + std::to_string(world_.rank()));
  if (ec) {
    problem = ec.message();
  } else if (!std::filesystem::is_directory(dir, ec)) {
    problem = "not a directory";
  } else if (FILE* f = std::fopen(probe.c_str(), "w")) {
    std::fclose(f);
    std::filesystem::remove(probe, ec);
  } else {
    problem = std::strerror(errno);
  }
  const double failed = world_.all_reduce_sum(problem.empty() ? 0.0 : 1.0);
  if (failed == 0.0) return;
  std::string said;  // the failing ranks, with their reasons
  const std::vector<std::string> problems = comm::all_gather_strings(problem, world_);
  for (int r = 0; r < world_.size(); ++r)
    if (!problems[static_cast<size_t>(r)].empty())
      said += (said.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + problems[static_cast<size_t>(r)];
  fail("cannot write checkpoints to --checkpoint-dir ", config_.checkpoint_dir, " (", said, ")");
}

void Trainer::check_device_memory(int64_t step, Device device) {
  const int64_t limit = config_.device_memory_limit;
  if (limit <= 0) return;
  const int64_t mine = memory_stats(device).peak_bytes;
  const int64_t worst = world_.all_reduce_max(mine);  // every rank stops together, or none
  TESSERA_CHECK(worst <= limit, "step ", step, ": the device tier's peak reached ", worst, " bytes on a rank (this ",
                "rank: ", mine, "), over --device-memory-limit ", limit, "; offload more (--placement auto, ",
                "--offload-optim-frac, --offload cpu|nvme, --zero 3 --offload-params) or use activation checkpointing (gpt_train ",
                "--dry-run shows where the bytes go)");
}

std::string Trainer::first_nonfinite_gradient() {
  nn::ParamStore& store = work_.params();
  int64_t held_begin = 0;
  const Tensor held = optimizer_.held_gradients(held_begin);
  std::string first;
  for (int i = 0; i < store.size() && first.empty(); ++i) {
    const nn::ParamSpec& s = store.spec(i);
    const int64_t b = std::max(s.offset, held_begin);
    const int64_t e = std::min(s.offset + s.local_shape.numel(), held_begin + held.numel());
    if (b < e && !std::isfinite(ops::sum_squares(held.slice(b - held_begin, {e - b})))) first = s.name;
  }
  // The first over the job in model order: pipeline stages are the outermost mesh axis, and each
  // rank's parameters are in model order.
  for (const std::string& name : comm::all_gather_strings(first, world_))
    if (!name.empty()) return name;
  return {};
}

void Trainer::poison_gradient() {
  held_squares_.reset();  // the norm reads the poisoned gradients
  nn::ParamStore& store = work_.params();
  const int id = store.find("blocks.0.mlp.fc.weight");
  if (id < 0) return;
  const int64_t at = store.spec(id).offset;
  int64_t begin = 0;
  Tensor grads = optimizer_.held_gradients(begin);
  if (at < begin || at >= begin + grads.numel()) return;  // another rank's shard holds it
  Tensor nan = Tensor::empty({1});
  nan.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  Tensor cell = grads.slice(at - begin, {1});
  cell.copy_from(nan);
}

CheckpointInfo Trainer::checkpoint_info(int64_t step) const {
  CheckpointInfo info;
  info.step = step;
  info.consumed_samples = step * config_.global_batch;
  info.seed = config_.seed;
  info.data_identity = config_.data_identity;
  info.data_sampling = work_.data_sampling();
  info.data_epoch = work_.data_epoch(info.consumed_samples);
  info.data_state = work_.data_state(step);
  info.model = work_.model_name();
  info.layout = mesh_.shape().str() + " zero=" + std::to_string(config_.zero_stage);
  info.model_config = work_.model_config();
  info.model_values = work_.model_values();
  info.precision = config_.precision;
  info.loss_scaler = scaler_.state();
  info.tokenizer = config_.tokenizer;
  info.carried = carried_;
  info.carried_files = carried_files_;
  return info;
}

CheckpointState Trainer::checkpoint_state() {
  return {work_.params(), optimizer_.adamw(), data_, world_, tp_.rank() == 0, ep_.rank() == 0};
}

std::pair<int64_t, double> Trainer::comm_totals() const {
  int64_t bytes = 0;
  double ms = 0;
  for (const comm::Communicator* g : std::as_const(mesh_).all_groups()) {
    bytes += g->stats().total_bytes();
    ms += g->stats().total_ms();
  }
  return {bytes, ms};
}

void Trainer::save(int64_t step) {
  CheckpointState state = checkpoint_state();
  save_checkpoint(config_.checkpoint_dir, checkpoint_info(step), state);
  prune_checkpoints(config_.checkpoint_dir, step, config_.keep_checkpoints, world_);
}

std::optional<std::string> Trainer::resume_source() {
  std::optional<std::string> path;
  if (config_.resume == "auto") {
    path = newest_checkpoint(config_.checkpoint_dir, world_);
    // Checkpoints that all fail to load (each named above with its reason) are not started over.
    if (!path) {
      const int64_t damaged = checkpoint_file_count(config_.checkpoint_dir, world_);
      TESSERA_CHECK(damaged == 0, "--resume auto: none of the ", damaged, " checkpoint(s) in ", config_.checkpoint_dir,
                    " can be loaded (the reasons are above); not starting over on top of them: repair or move them,",
                    " or pass another --checkpoint-dir");
      if (world_.rank() == 0) log::info("--resume auto: no checkpoint in ", config_.checkpoint_dir, ", starting fresh");
    }
  } else if (config_.resume != "none") {
    path = config_.resume;
  }
  // A run that does not continue the folder's own checkpoints (a fresh one, or one resumed from a
  // file elsewhere) into a folder of checkpoints: an earlier run's, to continue or to set aside, so
  // that nothing this run writes or prunes touches them.
  if (config_.checkpoint_dir.empty() || config_.resume == "auto") return path;
  std::error_code ec;  // rank 0's view of where the file lies, on every rank (one decision)
  const bool from_folder =
      world_.all_reduce_max(int64_t{world_.rank() == 0 && path &&
                                    std::filesystem::equivalent(std::filesystem::path(*path).parent_path(),
                                                                config_.checkpoint_dir, ec)}) != 0;
  if (!from_folder) {
    const int64_t earlier = checkpoint_file_count(config_.checkpoint_dir, world_);
    TESSERA_CHECK(earlier == 0 || config_.overwrite, "--checkpoint-dir ", config_.checkpoint_dir, " holds ", earlier,
                  " checkpoint(s) of an earlier run: continue it with --resume auto, or start over with --overwrite",
                  " (which moves them into a set_aside_<time> folder there)");
    if (earlier > 0) set_aside_checkpoints(config_.checkpoint_dir, -1, "--overwrite: a run not continuing them", world_);
  }
  return path;
}

void Trainer::check_tokenizer(const std::string& path, const CheckpointInfo& info) const {
  const text::StoredTokenizerFile& here = config_.tokenizer;
  if (!info.tokenizer.recorded() || !here.recorded() || info.tokenizer.same_as(here)) return;
  fail("checkpoint ", path, " was trained on ids of tokenizer ", info.tokenizer.describe(),
       ", but the training data's tokenizer is ", here.describe(),
       ": the same ids would mean other text (tokenize the data with the checkpoint's tokenizer)");
}

void Trainer::init_from() {
  CheckpointState state = checkpoint_state();
  const CheckpointInfo info = load_weights(config_.init_from, checkpoint_info(0), state);
  check_tokenizer(config_.init_from, info);
  carried_ = info.carried;
  carried_files_ = info.carried_files;
  if (world_.rank() == 0)
    log::info("--init-from ", config_.init_from, ": weights of step ", info.step, " (saved under ", info.layout,
              "), fresh optimizer, starting at step 1");
}

CheckpointInfo Trainer::resume(const std::string& path) {
  CheckpointState state = checkpoint_state();
  const CheckpointInfo info = load_checkpoint(path, checkpoint_info(0), state);
  check_tokenizer(path, info);
  carried_ = info.carried;
  carried_files_ = info.carried_files;
  // An imported model's norm epsilon and rotary base (hf.*, handed on by every run since): the
  // model fields do not hold them, so a run that computes with others is refused here.
  for (const auto& [key, value] : work_.model_values())
    for (const CheckpointInfo::Attr& a : info.carried)
      if (a.key == "hf." + key && a.type == io::CheckpointReader::AttrType::float64 &&
          static_cast<float>(a.number) != static_cast<float>(value))
        fail("checkpoint ", path, " records ", key, " ", static_cast<float>(a.number), " (", a.key,
             "), but this run computes with ", static_cast<float>(value), ": pass --",
             key == "norm_eps" ? "norm-eps " : "rope-theta ", static_cast<float>(a.number));
  // The run's identity beyond the model (which load_checkpoint compares): its seed and training
  // data. --resume auto continues only the same run; an explicit --resume FILE may change them.
  std::string differs;
  if (info.seed != config_.seed)
    differs = "seed " + std::to_string(info.seed) + " there, " + std::to_string(config_.seed) + " here";
  if (!info.data_identity.empty() && info.data_identity != config_.data_identity)
    differs += (differs.empty() ? "" : "; ") + std::string("training data of ") + info.data_identity + " there, " +
               config_.data_identity + " here";
  const std::string sampling = work_.data_sampling();
  if (!info.data_sampling.empty() && info.data_sampling != sampling)
    differs += (differs.empty() ? "" : "; ") + std::string("--sampling ") + info.data_sampling + " there, " + sampling +
               " here";
  // A blend's position (its samples per source, each source's epoch) as this run computes it there
  // (data_blend, the sources as named, is informational: the data identity compares the files).
  for (const auto& [key, value] : work_.data_state(info.step))
    for (const auto& [saved_key, saved] : info.data_state)
      if (saved_key == key && key != "data_blend" && saved != value)
        differs += (differs.empty() ? "" : "; ") + key + " " + saved + " there, " + value + " here";
  TESSERA_CHECK(differs.empty() || config_.resume != "auto", "--resume auto: ", path, " belongs to another run (",
                differs, "): pass another --checkpoint-dir, or --resume ", path, " to continue from it deliberately");
  if (!differs.empty() && world_.rank() == 0) log::warn("resuming ", path, " of another run: ", differs);
  TESSERA_CHECK(info.step <= config_.steps, "checkpoint ", path, " is of step ", info.step, ", past --steps ",
                config_.steps);
  if (fp16() && info.precision == "fp16") scaler_.restore(info.loss_scaler);  // else a fresh scale
  if (world_.rank() == 0 && info.step < config_.steps)
    log::info("resumed from ", path, " (step ", info.step, ", saved under ", info.layout, ")");
  return info;
}

MetricsWriter Trainer::open_metrics(const std::optional<std::string>& checkpoint, const CheckpointInfo& resumed) {
  // Rank 0's alone, with no collective: a failure throws there and ends the job as a failed write
  // does later (the app aborts it), and the collectives before step 1 stay those of the run.
  if (world_.rank() != 0 || config_.metrics_path.empty()) return {};
  MetricsWriter metrics;
  JsonLine record;
  if (checkpoint) {
    std::string dropped;
    metrics = MetricsWriter::resume(config_.metrics_path, resumed.step, dropped);
    if (!dropped.empty()) log::warn(dropped);
    record.add("step", resumed.step).add("checkpoint", *checkpoint).add("saved_layout", resumed.layout);
  } else {
    metrics = MetricsWriter::start(config_.metrics_path, config_.overwrite);
  }
  add_run_fields(record);
  metrics.write(JsonLine().add(checkpoint ? "resume" : "run", record));
  return metrics;
}

void Trainer::add_run_fields(JsonLine& line) const {
  JsonLine model_config;
  for (const auto& [name, value] : work_.model_config()) model_config.add(name, value);
  line.add("version", kVersion)
      .add("commit", kCommit)
      .add("world_size", world_.size())
      .add("layout", checkpoint_info(0).layout)
      .add("model", work_.model_name())
      .add("model_config", model_config)
      .add("steps", config_.steps)
      .add("global_batch", config_.global_batch)
      .add("micro_batch", config_.micro_batch)
      .add("options", config_.options);
}

}  // namespace tessera::train
