// gpt_train: train a GPT language model on an HDF5 token data set.
#include <omp.h>

#include <optional>

#include "apps/common/train_cli.h"
#include "comm/mpi_runtime.h"
#include "core/log.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "models/gpt/gpt.h"
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
    cli::TrainOptions o;
    models::GptConfig mc;
    std::string input, val_input;
    int64_t seq_len = 64;
    opts.add_options()
        ("input", po::value(&input)->required(), "training token data set (HDF5: /tokens, or /train/tokens)")
        ("val-input", po::value(&val_input), "validation data set (default: the /val split of --input, if any)")
        ("layers", po::value(&mc.layers)->default_value(4), "transformer blocks")
        ("hidden", po::value(&mc.hidden)->default_value(128), "hidden size")
        ("heads", po::value(&mc.heads)->default_value(4), "attention heads (must divide --hidden)")
        ("seq-len", po::value(&seq_len)->default_value(64), "tokens per sequence")
        ("dump", po::value(&o.train.dump_path), "debug: write initial parameters, batches and step-1 logits/gradients to this HDF5 file");
    o.add_to(opts, "sequences");
    po::variables_map vm;
    if (!cli::parse(argc, argv, opts, vm, "usage: gpt_train --input DATA.h5 [options]")) return 0;

    // The layout is checked on every rank before any communication.
    o.finish(mpi.world_size());
    TESSERA_CHECK(seq_len >= 1, "--seq-len must be >= 1, got ", seq_len);
    TESSERA_CHECK(seq_len % o.mesh.sp == 0, "--seq-len ", seq_len, " is not divisible by --sp ", o.mesh.sp,
                  " (sequence parallelism gives each rank an equal share of the positions)");
    train::TrainConfig& tc = o.train;
    tc.seq_len = seq_len;
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
    mc.vocab = train_data.vocab_size;
    mc.max_seq = seq_len;
    mc.validate(o.mesh.tp);

    if (mpi.world_rank() == 0)
      log::info("gpt_train: ", mpi.world_size(), " rank(s), ", o.mesh.str(), ", ", mc.layers, " layers, hidden ",
                mc.hidden, ", ", mc.heads, " heads, vocab ", mc.vocab, ", seq ", seq_len, ", global batch ",
                tc.global_batch, " (micro ", tc.micro_batch, "), ", tc.steps, " steps on ", o.device_name, " with ",
                omp_get_max_threads(), " threads");
    cli::ParallelSetup parallel(o, mc.heads, mc.hidden / mc.heads);
    comm::ProcessMesh& mesh = parallel.mesh();
    models::Gpt model(mc, o.device(), tc.seed, tc.micro_batch, seq_len, parallel.layout());
    if (mpi.world_rank() == 0) {
      log::info("parameters: ", model.model_numel());
      cli::log_slurm_job();
    }
    train::GptWorkload workload(model, train_data, val_data ? &*val_data : nullptr, tc, mesh.coord(comm::Axis::dp),
                                o.mesh.dp, mesh.group(comm::Axis::sp), mesh.group(comm::Axis::pp),
                                mesh.data_group());
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
