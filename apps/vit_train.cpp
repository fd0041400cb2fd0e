// vit_train: train a vision transformer classifier on an HDF5 image data set (data_prep cifar10
// or synth-images), with the same parallel, checkpoint and reliability options as gpt_train;
// --dry-run prints the run's plan and its memory per rank; --layout auto trains with the layout
// search's choice.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "apps/common/auto_layout.h"
#include "apps/common/train_cli.h"
#include "apps/common/vit_model_options.h"
#include "comm/mpi_runtime.h"
#include "core/log.h"
#include "io/image_dataset.h"
#include "io/loader_throughput.h"
#include "models/vit/vit.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_verifier.h"
#include "plan/vit_memory_plan.h"
#include "train/preemption.h"
#include "train/vit_workload.h"

using namespace tessera;
namespace po = boost::program_options;

namespace {

// --dry-run: the run as the options lay it out (mesh, batch split, pipeline schedule with its
// simulated bubble, the model and its parameter count) without training, then the memory plan per
// rank (plan/vit_memory_plan.h), as gpt_train's dry run prints it.
std::string describe_plan(const cli::TrainOptions& o, const models::VitConfig& mc, const io::ImageDataset& images,
                          int64_t steps_per_epoch) {
  const train::TrainConfig& tc = o.train;
  const comm::MeshShape& m = o.mesh;
  const int batch_ranks = m.dp * m.tp_batch_parts();
  const int64_t micro = tc.micro_batches(batch_ranks);
  const int64_t patches = (mc.image / mc.patch) * (mc.image / mc.patch);
  const int64_t tokens = patches + (mc.pool == "cls" ? 1 : 0);
  // The whole model's parameters, counted by building it once on this process (one rank's layout).
  const int64_t params = models::Vit(mc, Device::cpu, tc.seed, 1).model_numel();
  std::ostringstream out;
  out << "vit_train plan (dry run: nothing is trained)\n"
      << "layout: " << m.str() << ", " << m.pp * m.dp * m.ep * m.sp * m.tp << " rank(s), tp-mode " << o.tp_mode
      << ", ZeRO-" << tc.zero_stage << ", " << tc.precision << ", activation checkpointing "
      << o.activation_checkpointing << "\n"
      << "model: " << mc.layers << " layers, hidden " << mc.hidden << ", " << mc.heads << " heads, patch " << mc.patch
      << ", MLP ratio " << mc.mlp_ratio << ", " << tokens << " tokens per image (pool " << mc.pool << "), "
      << mc.classes << " classes, " << mc.image << "x" << mc.image << "x" << mc.channels << " images\n"
      << "parameters: " << params << " (whole model; fp32 weights, gradients and AdamW moments: " << 16 * params
      << " bytes before any split)\n"
      << "batch: " << tc.global_batch << " images per step over " << batch_ranks << " batch rank(s): " << micro
      << " micro-batch(es) of " << tc.micro_batch << " per rank\n"
      << "steps: " << tc.steps << " (" << images.size() << " training images, " << steps_per_epoch
      << " steps per epoch)\n";
  if (m.pp > 1) {
    const parallel::PipelineSchedule schedule =
        parallel::make_schedule(tc.pp_schedule, m.pp, static_cast<int>(micro), tc.virtual_stages);
    const parallel::PipelineReport r = parallel::verify_schedule(schedule);
    char line[200];
    std::snprintf(line, sizeof line, "pipeline: %s over %d stages, %lld micro-batches, bubble fraction %.4f (simulated)\n",
                  schedule.name.c_str(), schedule.stages, static_cast<long long>(micro), r.bubble_fraction);
    out << line;
  }
  const plan::VitRun run = cli::planned_vit_run(o, mc);
  out << "\n" << plan::describe(plan::plan_memory(run), run);
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiRuntime mpi(&argc, &argv);
  if (mpi.world_size() > 1) log::set_rank(mpi.world_rank());
  const int code = cli::run_main([&] {
    // --layout auto: the search's fastest layout in place of it, on every rank alike.
    const cli::ResolvedArgv resolved(argc, argv, false, true, mpi.world_rank() == 0);
    const int run_argc = resolved.argc();
    char** run_argv = resolved.argv();
    cli::OptionSections opts;
    cli::TrainOptions o;
    cli::VitModelOptions model_options;
    models::VitConfig& mc = model_options.config;
    const std::string& data = model_options.input;
    const double& epochs = model_options.epochs;
    const double& eval_every_epochs = model_options.eval_every_epochs;
    io::ImageAugment& augment = model_options.augment;
    const int64_t& benchmark_loader = model_options.benchmark_loader;
    model_options.add_to(opts);
    o.add_to(opts, "images", cli::TrainOptions::App::vit);
    std::string layout_choice, machine_file;
    opts.section(cli::kLayout).add_options()
        ("layout", po::value(&layout_choice)->default_value("manual")->value_name("manual|auto"), "manual (the layout flags as given) or auto: every rank runs parallel_plan's search over the job's ranks and trains with the fastest layout that fits in --device-memory-limit (else the node's available memory), printed at start-up; layout flags beside it are refused")
        ("machine", po::value(&machine_file)->value_name("machine.json"), "--layout auto: parallel_plan calibrate's file (without it, a short calibration runs first)");
    po::variables_map vm;
    const cli::HelpText help{
        "vit_train",
        "usage: vit_train --input IMAGES.h5 [options]\n\nTrains a vision transformer classifier on an HDF5 image data set (data_prep cifar10 or\n"
        "synth-images), on one rank or under mpirun; the whole test set is evaluated (eval_loss, eval_acc).\n"
        "Options may also come from --config FILE.ini (keys are the long names).",
        "  mpirun -np 2 vit_train --config inputs/vit_tiny.ini --input synth.h5 --tp 2 --steps 20 --metrics vit.jsonl"};
    std::vector<cli::RenamedOption> renamed = cli::TrainOptions::renamed();
    renamed.push_back({"data", "input"});
    if (!cli::parse(run_argc, run_argv, opts, vm, help, renamed)) return 0;
    const std::string data_identity = cli::check_ranks_started_alike(vm, {"input"});
    o.train.options = cli::option_values(vm);
    augment.flip = !model_options.no_flip;

    // A dry run plans for the layout the options give (any number of ranks, from one process) when
    // --dp is set, as gpt_train's does.
    const comm::MeshShape& m = o.mesh;
    o.finish(o.dry_run && m.dp > 0 ? m.pp * m.dp * m.ep * m.sp * m.tp : mpi.world_size(), vm);
    // What --layout auto leaves here: manual (it was replaced by the chosen flags), or a bad value.
    TESSERA_CHECK(layout_choice == "manual" || layout_choice == "auto", "--layout ", layout_choice,
                  ": expected manual or auto");
    TESSERA_CHECK(!vm.count("machine"), "--machine ", machine_file, " is --layout auto's machine file: it takes",
                  " --layout auto");
    TESSERA_CHECK(epochs >= 0, "--epochs must be >= 0 (0: use --steps), got ", epochs);
    TESSERA_CHECK(eval_every_epochs >= 0, "--eval-every-epochs must be >= 0 (0: use --eval-every), got ",
                  eval_every_epochs);
    // Each pair sets one thing: the one given wins only when the other is left out.
    TESSERA_CHECK(epochs == 0 || !cli::given(vm, "steps"), "--epochs ", epochs, " and --steps ", o.train.steps,
                  " both set the run's length: give one (--epochs 0 keeps --steps)");
    TESSERA_CHECK(eval_every_epochs == 0 || !cli::given(vm, "eval-every"), "--eval-every-epochs ", eval_every_epochs,
                  " and --eval-every ", o.train.eval_every, " both set when to evaluate: give one",
                  " (--eval-every-epochs 0 keeps --eval-every)");
    TESSERA_CHECK(!cli::given(vm, "eval-batches"), "vit_train evaluates the whole test set: --eval-batches is",
                  " gpt_train's and moe_train's");
    TESSERA_CHECK(augment.pad >= 0, "--crop-pad must be >= 0, got ", augment.pad);
    TESSERA_CHECK(benchmark_loader >= 0, "--benchmark-loader must be >= 0 (0: train), got ", benchmark_loader);
    cli::check_output_files({{"--input", data}, {"--resume", o.train.resume == "none" || o.train.resume == "auto"
                                                                ? std::string()
                                                                : o.train.resume}},
                            {{"--metrics", o.train.metrics_path}, {"--trace", o.train.trace_path}});
    train::TrainConfig& tc = o.train;
    auto train_set = std::make_shared<const io::ImageDataset>(io::ImageDataset::open(data, "train"));
    auto test_set = std::make_shared<const io::ImageDataset>(io::ImageDataset::open(data, "test"));
    io::check_same_images(*train_set, *test_set);
    TESSERA_CHECK(train_set->height == train_set->width, "vit_train: images must be square, got ", train_set->height,
                  " x ", train_set->width);
    TESSERA_CHECK(augment.pad < train_set->height, "--crop-pad ", augment.pad, " must be less than the image side ",
                  train_set->height, " (a crop from the padded image must keep some of the image)");
    mc.image = train_set->height;
    mc.channels = train_set->channels;
    mc.classes = train_set->num_classes();
    model_options.check_layout(o);  // the modes ViT takes, the model, sp against the tokens, pp against the blocks
    const int64_t steps_per_epoch = std::max<int64_t>(1, train_set->size() / tc.global_batch);
    TESSERA_CHECK(epochs * static_cast<double>(steps_per_epoch) <= 1e15, "--epochs ", epochs, " gives more than 1e15",
                  " steps (", steps_per_epoch, " per epoch)");
    if (epochs > 0) tc.steps = static_cast<int64_t>(std::ceil(epochs * static_cast<double>(steps_per_epoch)));
    TESSERA_CHECK(eval_every_epochs * static_cast<double>(steps_per_epoch) <= 1e15, "--eval-every-epochs ",
                  eval_every_epochs, " gives more than 1e15 steps (", steps_per_epoch, " per epoch)");
    if (eval_every_epochs > 0)
      tc.eval_every = std::max<int64_t>(1, std::llround(eval_every_epochs * static_cast<double>(steps_per_epoch)));
    tc.validate(o.mesh.dp * o.mesh.tp_batch_parts());
    TESSERA_CHECK(o.mesh.ep == 1, "vit_train: --ep needs mixture-of-experts layers (moe_train has them)");
    if (o.dry_run) {
      if (mpi.world_rank() == 0) std::cout << describe_plan(o, mc, *train_set, steps_per_epoch);
      return 0;
    }
    if (benchmark_loader > 0) {
      const io::ImageLoader loader(train_set, tc.global_batch, tc.seed, io::channel_stats(*train_set), augment);
      const double rate = io::loader_images_per_second(loader, tc.global_batch, benchmark_loader);
      if (mpi.world_rank() == 0)
        log::info("loader: ", rate, " images/s (", benchmark_loader, " batches of ", tc.global_batch, ", crop pad ",
                  augment.pad, augment.flip ? ", flip" : "", ")");
      return 0;
    }

    if (mpi.world_rank() == 0)
      log::info("vit_train: ", mpi.world_size(), " rank(s), ", o.mesh.str(), ", ", mc.layers, " layers, hidden ",
                mc.hidden, ", ", mc.heads, " heads, patch ", mc.patch, ", ", mc.classes, " classes, ",
                train_set->size(), " training images (", steps_per_epoch, " steps per epoch), global batch ",
                tc.global_batch, " (micro ", tc.micro_batch, "), ", tc.steps, " steps on ", o.device_name, " with ",
                omp_get_max_threads(), " threads", o.gemm_note());
    cli::ParallelSetup parallel(o, mc.heads, mc.hidden / mc.heads);
    comm::ProcessMesh& mesh = parallel.mesh();
    models::Vit model(mc, o.device(), tc.seed, tc.micro_batch, parallel.layout());
    if (mpi.world_rank() == 0) {
      log::info("parameters: ", model.model_numel());
      cli::log_run_environment();
    }
    train::VitWorkload workload(model, train_set, test_set, tc, mesh.group(comm::Axis::dp), mesh.grid_rows(),
                                mesh.group(comm::Axis::pp), mesh.data_group(), augment);
    tc.data_identity = data_identity;  // the run's identity, recorded in its checkpoints
    return cli::train_and_report(workload, tc, mesh, mpi.world_rank());
  });
  if (code != 0 && code != train::kExitPreempted && mpi.world_size() > 1) comm::abort_job(code);
  return code;
}
