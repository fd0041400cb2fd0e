// Checkpoints of a training run (the schema of DESIGN.md): /params/<name>, /optim/<name>/exp_avg,
// /optim/<name>/exp_avg_sq in their global logical shapes, plus the step, the model and the
// layout as attributes. Each data-parallel rank writes its FlatShards piece of its flat order;
// under tensor parallelism each tp rank writes the pieces of its slices, mapped to their place in
// the global tensors, and tp rank 0 the replicated parameters. Loading reads what the *current*
// layout needs, so any layout resumes any checkpoint of the model.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "io/checkpoint_file.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "parallel/flat_shards.h"
#include "text/stored_tokenizer.h"

namespace tessera::train {

struct CheckpointInfo {
  int64_t step = 0;              // optimizer steps taken
  int64_t consumed_samples = 0;  // sequences (or images) seen
  uint64_t seed = 0;             // initialisation, data order and dropout all derive from it and the step
  std::string model;             // "gpt"
  std::string layout;            // the mesh and ZeRO stage it was saved from (informational)
  std::vector<std::pair<std::string, int64_t>> model_config;  // e.g. {"layers", 12}: must match to load
  std::vector<std::pair<std::string, double>> model_values;   // e.g. {"rope_theta", 10000}: must match too
  std::string precision = "fp32";   // what the run trained in
  std::string data_identity;        // io::file_identity of the training data ("": not recorded)
  std::string data_sampling;        // token windows: "random" or "epoch" ("": not recorded)
  int64_t data_epoch = -1;          // epoch sampling: the epoch of the next sample (-1: none)
  // Workload::data_state: string attributes of the data's position (a blend's data_blend,
  // data_blend_samples, data_blend_epochs); loading reads those three when present.
  std::vector<std::pair<std::string, std::string>> data_state;
  optim::LossScalerState loss_scaler;  // fp16's loss scale and its counters
  // The tokenizer of the training data (text/stored_tokenizer.h: the data set's layout), so that
  // later tools decode without being told; not recorded for data that names none.
  text::StoredTokenizerFile tokenizer;
  // Root attributes handed on from the checkpoint a run started from: the hf.* ones of a model
  // imported from Hugging Face (model_type, norm_eps, rope_theta, config...), which export-hf reads.
  struct Attr {
    std::string key;
    io::CheckpointReader::AttrType type = io::CheckpointReader::AttrType::string;
    std::string text;
    double number = 0;
    int64_t integer = 0;
  };
  std::vector<Attr> carried;
  // Likewise the byte datasets under /hf_files/ (an imported tokenizer's settings): path, bytes.
  std::vector<std::pair<std::string, std::string>> carried_files;
};

// What a checkpoint covers on this rank: the parameters, the optimizer (its states cover
// optimizer.shard() of the flat order), the dp group whose FlatShards split the writing, and every
// rank of the job (the file is opened over it).
struct CheckpointState {
  nn::ParamStore& params;
  optim::AdamW& optimizer;
  comm::Communicator& dp;
  comm::Communicator& world;
  // Who writes the copies several ranks hold: tp rank 0 the parameters replicated over tp, the
  // first replica of a tp slice (Shard::replica) the slices, ep rank 0 those replicated over ep
  // (all but the experts' tensors).
  bool tp_first = true, ep_first = true;
  bool writes(const nn::ParamSpec& s) const {
    return (s.shard.split() ? s.shard.replica == 0 : tp_first) && (s.expert || ep_first);
  }
};

// Writes <dir>/step_<N>.h5 (through a .tmp and an atomic rename); returns its path.
std::string save_checkpoint(const std::string& dir, const CheckpointInfo& info, CheckpointState& state);

// Loads a checkpoint into the state; throws naming the first mismatch (model, tensor, shape).
// Returns the info it was saved with.
CheckpointInfo load_checkpoint(const std::string& path, const CheckpointInfo& expected, CheckpointState& state);

// The parameters alone of a checkpoint of the model, saved under any layout (--init-from): the
// same checks as load_checkpoint (any difference of model, configuration or tensor is refused,
// naming it), the optimizer left as it is. Returns what the checkpoint was saved with.
CheckpointInfo load_weights(const std::string& path, const CheckpointInfo& expected, CheckpointState& state);

// The newest step_<N>.h5 in dir that opens as a complete checkpoint (rank 0 decides, every rank
// gets the answer); nullopt when there is none.
std::optional<std::string> newest_checkpoint(const std::string& dir, comm::Communicator& world);

// How many files of dir are named as checkpoints (step_<N>.h5), readable or not (rank 0 counts,
// every rank gets the answer).
int64_t checkpoint_file_count(const std::string& dir, comm::Communicator& world);

// Removes checkpoints older than `written` (the step this run just saved) beyond the newest
// `keep` including it (rank 0; keep <= 0 keeps all). Later ones are never removed.
void prune_checkpoints(const std::string& dir, int64_t written, int keep, comm::Communicator& world);

// Moves dir's checkpoints of steps after `after_step` into dir/set_aside_<UTC time>/ (rank 0), so
// that nothing this run writes replaces them and --resume auto no longer sees them; logs `why`
// with the folder. Returns the moved files' new paths (on every rank).
std::vector<std::string> set_aside_checkpoints(const std::string& dir, int64_t after_step, const std::string& why,
                                               comm::Communicator& world);
}  // namespace tessera::train
