// gpt_train and moe_train: train a GPT language model (dense, or with mixture-of-experts layers)
// on an HDF5 token data set.
#include "apps/common/gpt_app.h"

#include <omp.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include "apps/common/auto_layout.h"
#include "apps/common/gpt_model_options.h"
#include "apps/common/init_from.h"
#include "apps/common/train_cli.h"
#include "comm/mpi_runtime.h"
#include "core/allocator.h"
#include "core/log.h"
#include "io/hdf5_file.h"
#include "io/loader_throughput.h"
#include "io/token_loader.h"
#include "io/token_blend.h"
#include "io/token_dataset.h"
#include "models/gpt/gpt.h"
#include "text/stored_tokenizer.h"
#include "plan/memory_plan.h"
#include "train/gpt_workload.h"
#include "train/preemption.h"

namespace tessera::cli {
namespace po = boost::program_options;

// The training data's vocabulary size alone (all --dry-run reads of it): the vocab_size attribute
// on /train or on the root, where TokenDataset looks.
int64_t vocab_size_of(const std::string& path) {
  const io::H5File file = io::H5File::open_read(io::TokenDataset::expand(path).front());
  for (const char* holder : {"/train", "/"})
    if (file.has(holder) && file.has_attr(holder, "vocab_size")) return file.attr_int(holder, "vocab_size");
  fail(path, ": missing attribute vocab_size (looked on /train and /)");
}

// What the memory planner needs of the run (plan/memory_plan.h).
plan::GptRun planned_run(const TrainOptions& o, const models::GptConfig& model, int64_t seq) {
  plan::GptRun run;
  // The batch splits over dp x ep x the tp grid's batch shares (TrainOptions::finish).
  static_cast<plan::RunLayout&>(run) = planned_layout(o, o.mesh.dp * o.mesh.ep * o.mesh.tp_batch_parts());
  run.model = model;
  run.seq = seq;
  run.split_gather = o.split_gather();
  return run;
}

namespace {

// A model that cannot fit in this node's memory is refused before anything is allocated: the
// planner's bytes per rank (the same as --dry-run's) times the node's ranks, against what the host
// has available. CPU runs.
void check_fits_in_memory(const plan::GptRun& run, const std::string& input) {
  const plan::MemoryPlan plan = plan::plan_memory(run);
  const int64_t per_rank = plan.peak() + plan.host_tier(), ranks = comm::node_local_size();
  const int64_t available = available_host_bytes();
  const double needed = static_cast<double>(per_rank) * static_cast<double>(ranks);
  TESSERA_CHECK(available < 0 || needed <= static_cast<double>(available), "the model does not fit in this node's",
                " memory: ", per_rank, " bytes per rank as planned (--dry-run shows where) x ", ranks,
                " rank(s) on this node, more than the ", available, " bytes available (vocab_size ", run.model.vocab,
                " from ", input, ", ", run.model.layers, " layers, hidden ", run.model.hidden, ")");
}

}  // namespace

int gpt_app_main(int argc, char** argv, GptApp app) {
  comm::MpiRuntime mpi(&argc, &argv);
  if (mpi.world_size() > 1) log::set_rank(mpi.world_rank());
  const int code = run_main([&] {
    const bool moe = app == GptApp::moe;
    // --layout auto: the search's fastest layout in place of it, on every rank alike.
    const ResolvedArgv resolved(argc, argv, moe, false, mpi.world_rank() == 0);
    const int run_argc = resolved.argc();
    char** run_argv = resolved.argv();
    OptionSections opts;
    TrainOptions o;
    const char* name = moe ? "moe_train" : "gpt_train";
    GptModelOptions model_options;
    models::GptConfig& mc = model_options.config;
    std::string& arch = model_options.arch;
    int64_t& seq_len = model_options.seq_len;
    std::string input, val_input;
    int64_t benchmark_loader = 0;
    MoeModelOptions moe_options;
    model_options.add_to(opts);
    if (moe) moe_options.add_to(opts, mc);
    opts.section(kData).add_options()
        ("input", po::value(&input)->required()->value_name("DATA.h5"), "training token data set (HDF5: /tokens, or /train/tokens; 'dir/shard_*.h5' for shards), or a blend of several by weight: 'a.h5:0.7,b.h5:0.3' or @blend.txt (a 'PATH WEIGHT' a line)")
        ("val-input", po::value(&val_input)->value_name("DATA.h5"), "validation data set (default: the /val split of --input, if any)")
        ("document-mask", po::bool_switch(&o.train.document_mask), "keep attention inside each document of a packed window (causal and block-diagonal, by the data set's /doc_offsets, which data_prep writes) and restart positions (learned or rotary) at 0 at each document's first token; CPU only (no CUDA kernel yet); a data set without /doc_offsets is refused")
        ("benchmark-loader", po::value(&benchmark_loader)->default_value(0)->value_name("N"), "benchmark (N > 0): each rank reads its share of N global batches of training rows (as dp ranks, on the loader's background thread, no model), prints tokens/s per rank and exits");
    o.add_to(opts, "sequences", moe ? TrainOptions::App::moe : TrainOptions::App::gpt);
    opts.section(kCheckpoints).add_options()
        ("init-from", po::value(&o.train.init_from)->value_name("FILE.h5"), "start from this checkpoint's weights (any layout's; ckpt_tool import-hf makes one from a Hugging Face model) with a fresh optimizer at step 1: fine-tuning. The model options come from it (one given that contradicts it is refused); a gpt2 position table longer than --seq-len is used in part. Not with --resume FILE, nor with --resume auto once --checkpoint-dir holds checkpoints");
    std::string layout_choice, machine_file;
    (moe ? opts.foreign() : opts.section(kLayout)).add_options()
        ("layout", po::value(&layout_choice)->default_value("manual")->value_name("manual|auto"), "manual (the layout flags as given) or auto: every rank runs parallel_plan's search over the job's ranks and trains with the fastest layout that fits in --device-memory-limit (else the node's available memory), printed at start-up; layout flags beside it are refused")
        ("machine", po::value(&machine_file)->value_name("machine.json"), "--layout auto: parallel_plan calibrate's file (without it, a short calibration runs first)");
    opts.section(kDebugging).add_options()
        ("dump", po::value(&o.train.dump_path)->value_name("FILE.h5"), "write initial parameters, batches and step-1 logits/gradients to this HDF5 file");
    const bool& dry_run = o.dry_run;
    po::variables_map vm;
    const std::string tool = name;
    const HelpText help{
        tool,
        "usage: " + tool + " --input DATA.h5 [options]\n\nTrains a GPT language model" +
            (moe ? std::string(" with mixture-of-experts layers") : std::string()) +
            " on an HDF5 token data set (data_prep text|synth), on one rank or under mpirun.\n"
            "Options may also come from --config FILE.ini (keys are the long names).",
        moe ? "  mpirun -np 4 moe_train --config inputs/moe_tiny.ini --input data.h5 --ep 2 --steps 20 --metrics moe.jsonl"
            : "  mpirun -np 4 gpt_train --config inputs/gpt_tiny.ini --input data.h5 --tp 2 --zero 1 --steps 20 --metrics m.jsonl"};
    if (!parse(run_argc, run_argv, opts, vm, help, TrainOptions::renamed())) return 0;
    const std::string data_identity = check_ranks_started_alike(vm, {"input", "val-input"});
    // A blend of data sets by weight (io/token_blend.h), else one data set as always.
    const std::optional<std::vector<io::BlendSource>> blend = io::parse_blend(input);
    const std::string first_input = blend ? blend->front().path : input;
    model_options.resolve_arch();
    std::optional<InitFromModel> init;  // --init-from's model, which the options then describe
    if (!o.train.init_from.empty()) {
      TESSERA_CHECK(std::filesystem::is_regular_file(o.train.init_from), "--init-from ", o.train.init_from,
                    ": no such checkpoint file");
      init = take_model_from_checkpoint(o.train.init_from, moe, vm, mc, arch, moe_options.router_norm, seq_len);
    }
    model_options.check_llama_options(vm);
    o.train.options = option_values(vm);
    // What --layout auto leaves here: manual (it was replaced by the chosen flags), or a bad value.
    TESSERA_CHECK(layout_choice == "manual" || layout_choice == "auto", "--layout ", layout_choice,
                  ": expected manual or auto");
    TESSERA_CHECK(!vm.count("machine"), "--machine ", machine_file, " is --layout auto's machine file: it takes",
                  " --layout auto");

    // The layout is checked on every rank before any communication. A dry run plans for the
    // layout the options give (any number of ranks, from one process) when --dp is set.
    const comm::MeshShape& m = o.mesh;
    o.finish(dry_run && m.dp > 0 ? m.pp * m.dp * m.ep * m.sp * m.tp : mpi.world_size(), vm);
    TESSERA_CHECK(seq_len >= 1, "--seq-len must be >= 1, got ", seq_len);
    std::vector<OptionPath> read_files;  // --input's files: a blend's every source
    for (const io::BlendSource& source : blend ? *blend : std::vector<io::BlendSource>{{input, 1}})
      read_files.push_back({"--input", source.path});
    read_files.insert(read_files.end(), {{"--val-input", val_input}, {"--init-from", o.train.init_from},
                        {"--resume", o.train.resume == "none" || o.train.resume == "auto" ? "" : o.train.resume}});
    check_output_files(read_files,
                       {{"--metrics", o.train.metrics_path}, {"--trace", o.train.trace_path}, {"--dump", o.train.dump_path}});
    if (moe) {
      moe_options.finish(mc, o);
    } else {
      TESSERA_CHECK(o.mesh.ep == 1, "gpt_train: --ep ", o.mesh.ep, " needs mixture-of-experts layers: use moe_train");
      TESSERA_CHECK(!mc.llama() || o.device() == Device::cpu, "gpt_train --arch llama --device cuda: the Llama",
                    " layers (RMSNorm, rotary positions, SwiGLU) have no CUDA kernels yet; run on cpu");
    }
    TESSERA_CHECK(!o.train.document_mask || o.device() == Device::cpu, name, " --document-mask --device cuda: document",
                  " masking has no CUDA attention kernel yet; run it on the CPU (--device cpu)");
    o.check_sequence_split(seq_len);
    o.check_sequence_heads(mc.heads);
    train::TrainConfig& tc = o.train;
    tc.seq_len = seq_len;
    if (dry_run || o.auto_placement()) {
      mc.vocab = init ? init->vocab : vocab_size_of(first_input);
      mc.max_seq = init && init->positions > 0 ? init->positions : seq_len;
      mc.validate(o.split_model(mc.heads, mc.hidden));
    }
    if (o.auto_placement()) {  // before the dry run, which then shows the placement chosen
      const plan::Placement placed = plan::placement_for(planned_run(o, mc, seq_len), tc.device_memory_limit);
      tc.adamw.host_fraction = placed.host_fraction;
      if (mpi.world_rank() == 0)
        log::info("--placement auto: ", placed.plan.host_tier(), " bytes per rank on",
                  " the host tier (--offload-optim-frac ", tc.adamw.host_fraction, "), planned device peak ",
                  placed.plan.peak(), " bytes within --device-memory-limit ", tc.device_memory_limit);
    }
    if (dry_run) {
      const plan::GptRun run = planned_run(o, mc, seq_len);
      if (mpi.world_rank() == 0) std::cout << plan::describe(plan::plan_memory(run), run);
      return 0;
    }
    // A blend's sources are opened and checked (one vocabulary, one tokenizer) before any collective.
    std::vector<io::TokenDataset> blend_data;
    if (blend)
      for (const io::BlendSource& source : *blend) blend_data.push_back(io::TokenDataset::open(source.path, "train"));
    io::TokenDataset train_data = blend ? blend_data.front() : io::TokenDataset::open(input, "train");
    if (tc.document_mask) {  // where the document starts lie (none read yet), before the loaders copy the data sets
      for (io::TokenDataset& d : blend_data) d.load_documents();
      train_data.load_documents();
    }
    const io::Sampling sampling = io::parse_sampling(tc.sampling);
    const io::TokenLoader train_loader =
        blend ? io::TokenLoader(*blend, blend_data, seq_len, tc.global_batch, tc.seed, sampling)
              : io::TokenLoader(train_data, seq_len, tc.global_batch, tc.seed, sampling);
    TESSERA_CHECK(benchmark_loader >= 0, "--benchmark-loader must be >= 0 (0: train), got ", benchmark_loader);
    if (benchmark_loader > 0) {
      // Every rank a dp rank: rows [rank x G / world, ...) of each global batch, streamed.
      const int world = mpi.world_size(), rank = mpi.world_rank();
      TESSERA_CHECK(tc.global_batch % world == 0, "--benchmark-loader: --global-batch ", tc.global_batch,
                    " must divide by the ", world, " ranks");
      const io::TokenLoader& loader = train_loader;
      const int64_t rows = tc.global_batch / world;
      const double rate = io::loader_tokens_per_second(loader, rank * rows, rows, benchmark_loader);
      comm::Communicator all = comm::Communicator::world();
      const double slowest = -all.all_reduce_max(-rate), fastest = all.all_reduce_max(rate);
      if (rank == 0)
        std::cout << "loader: " << slowest << " tokens/s on the slowest rank, " << fastest << " on the fastest (" << world
                  << " ranks, " << rows << " rows of " << seq_len + 1 << " tokens a step, " << benchmark_loader
                  << " steps, --sampling " << tc.sampling << ", " << train_data.size() << " tokens in " << input
                  << ")\n";
      return 0;
    }
    std::optional<io::TokenDataset> val_data;
    if (!val_input.empty()) {
      val_data = io::TokenDataset::open(val_input, "val");
    } else if (!blend && io::TokenDataset::has_split(input, "val")) {  // a blend's comes from --val-input
      val_data = io::TokenDataset::open(input, "val");
    }
    if (val_data && tc.document_mask) val_data->load_documents();
    TESSERA_CHECK(tc.eval_every == 0 || val_data, "--eval-every needs validation data: pass --val-input or use a",
                  blend ? " file with a /val split (a blend takes its validation data from --val-input)" : " file with a /val split");
    if (val_data)
      TESSERA_CHECK(val_data->vocab_size == train_data.vocab_size, "validation vocab_size ", val_data->vocab_size,
                    " differs from training vocab_size ", train_data.vocab_size);
    mc.vocab = train_data.vocab_size;
    mc.max_seq = seq_len;
    if (init) {  // the checkpoint's vocabulary and position table (a longer one is used in part)
      TESSERA_CHECK(init->vocab >= train_data.vocab_size, "--init-from ", o.train.init_from, ": its model's vocabulary (",
                    init->vocab, " ids) is smaller than the training data's vocab_size ", train_data.vocab_size, " (",
                    input, "): ids past ", init->vocab - 1, " would have no embedding");
      mc.vocab = init->vocab;
      if (init->positions > 0) mc.max_seq = init->positions;
    }
    // The data's tokenizer travels into every checkpoint (text/stored_tokenizer.h), where it decodes
    // ids: bytes, SentencePiece or byte-level BPE (synthetic ids have no text, and a checkpoint that
    // names a tokenizer is one generate decodes with).
    tc.tokenizer = text::read_stored_tokenizer_file(io::H5File::open_read(io::TokenDataset::expand(first_input).front()));
    if (!tc.tokenizer.recorded()) tc.tokenizer.kind = train_data.tokenizer;
    if (!text::decodes(tc.tokenizer.kind)) tc.tokenizer = {};
    mc.validate(o.split_model(mc.heads, mc.hidden));
    if (o.device() == Device::cpu) check_fits_in_memory(planned_run(o, mc, seq_len), first_input);

    if (mpi.world_rank() == 0)
      log::info(name, ": ", mpi.world_size(), " rank(s), ", o.mesh.str(), ", ", models::arch_name(mc.arch), ", ",
                mc.layers, " layers, hidden ", mc.hidden, ", ", mc.heads, " heads",
                mc.llama() ? " (" + std::to_string(mc.kv()) + " kv), ffn " + std::to_string(mc.mlp_hidden()) : "",
                ", vocab ", mc.vocab, ", seq ", seq_len, ", global batch ",
                tc.global_batch, " (micro ", tc.micro_batch, "), ", tc.steps, " steps on ", o.device_name, " with ",
                omp_get_max_threads(), " threads", o.gemm_note(),
                moe ? ", " + std::to_string(mc.moe.experts) + " experts (top-" + std::to_string(mc.moe.router.top_k) +
                          ") every " + std::to_string(mc.moe_every) + " blocks" +
                          (mc.moe.shared_experts > 0 ? ", " + std::to_string(mc.moe.shared_experts) + " shared" : "") +
                          ", gates " + nn::router_norm_name(mc.moe.router.norm)
                    : std::string());
    if (blend && mpi.world_rank() == 0)
      for (int64_t k = 0; k < train_loader.sources(); ++k)
        log::info("blend source ", k, " (blend_tokens.", k, " in the metrics): ", blend_data[static_cast<size_t>(k)].path,
                  ", weight ", (*blend)[static_cast<size_t>(k)].weight, ", ", blend_data[static_cast<size_t>(k)].size(),
                  " tokens");
    if (train_loader.has_mask() && mpi.world_rank() == 0)
      log::info("loss mask: the loss averages over the targets the data's loss_mask marks (docs/data.md)",
                val_data && val_data->has_mask() ? ", in evaluation too" : "");
    ParallelSetup parallel(o, mc.heads, mc.hidden / mc.heads);
    comm::ProcessMesh& mesh = parallel.mesh();
    models::Gpt model(mc, o.device(), tc.seed, tc.micro_batch, seq_len, parallel.layout());
    if (mpi.world_rank() == 0) {
      log::info("parameters: ", model.model_numel());
      log_run_environment();
    }
    train::GptWorkload workload(model, train_loader, val_data ? &*val_data : nullptr, tc, mesh);
    tc.data_identity = data_identity;  // the run's identity, recorded in its checkpoints
    return train_and_report(workload, tc, mesh, mpi.world_rank());
  });
  // A failing rank ends the whole job: no peer is left waiting in a collective.
  if (code != 0 && code != train::kExitPreempted && mpi.world_size() > 1) comm::abort_job(code);
  return code;
}

}  // namespace tessera::cli
