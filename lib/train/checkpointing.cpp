// Checkpoint save/load: mapping the flat buffers' ranges to the tensors' global flattenings.
#include "train/checkpointing.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "core/log.h"
#include "io/checkpoint_file.h"

namespace tessera::train {
namespace fs = std::filesystem;
namespace {

// The part of a parameter inside flat range r, as [begin, end) of its logical local flattening
// (a prefix of its local elements: padding only ever trails).
parallel::Range piece(const nn::ParamSpec& s, int64_t logical, parallel::Range r) {
  const int64_t begin = std::clamp(r.begin - s.offset, int64_t{0}, logical);
  const int64_t end = std::clamp(r.end - s.offset, int64_t{0}, logical);
  return {begin, std::max(begin, end)};
}

// Where that piece lies in the global tensor's flattening.
std::vector<io::FlatRange> global_runs(const nn::ParamSpec& s, parallel::Range piece) {
  std::vector<io::FlatRange> runs;
  for (const nn::Run& r : nn::logical_runs(s, piece.begin, piece.end))
    runs.push_back({r.global_begin, r.global_begin + r.length});
  return runs;
}

std::string step_name(int64_t step) { return "step_" + std::to_string(step) + ".h5"; }

// The step_<N>.h5 files of dir, newest first.
std::vector<std::pair<int64_t, fs::path>> step_files(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> steps;
  if (!fs::is_directory(dir)) return steps;
  const std::regex pattern(R"(step_(\d+)\.h5)");
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, pattern)) steps.emplace_back(std::stoll(m[1]), e.path());
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// Rank 0's string, on every rank.
std::string broadcast_string(std::string s, comm::Communicator& world) {
  Tensor length = Tensor::empty({1}, DType::i32);
  length.data<int32_t>()[0] = static_cast<int32_t>(s.size());
  world.broadcast(length, 0);
  Tensor bytes = Tensor::zeros({length.data<int32_t>()[0]}, DType::u8);
  std::copy(s.begin(), s.end(), bytes.data<uint8_t>());
  world.broadcast(bytes, 0);
  return {reinterpret_cast<const char*>(bytes.data<uint8_t>()), static_cast<size_t>(bytes.numel())};
}

// Empty when the file opens as a complete checkpoint and every checksum matches (rank 0 reads it
// whole); else the reason, on every rank.
std::string checkpoint_problem(const std::string& path, comm::Communicator& world) {
  std::string problem;
  if (world.rank() == 0) {
    try {
      io::CheckpointReader(path, MPI_COMM_NULL).verify();
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  return broadcast_string(problem, world);
}

}  // namespace

std::string save_checkpoint(const std::string& dir, const CheckpointInfo& info, CheckpointState& st) {
  if (st.world.rank() == 0) fs::create_directories(dir);
  st.world.barrier();
  const std::string path = (fs::path(dir) / step_name(info.step)).string();
  io::CheckpointWriter w(path, st.world.mpi_comm());
  w.set_attr("step", info.step);
  w.set_attr("consumed_samples", info.consumed_samples);
  w.set_attr("model", info.model);
  w.set_attr("layout", info.layout);
  w.set_attr("optimizer_steps", st.optimizer.steps_taken());
  w.set_attr("seed", static_cast<int64_t>(info.seed));
  for (const auto& [key, value] : info.model_config) w.set_attr("model." + key, value);

  // This rank writes its FlatShards piece of every tensor; the optimizer states it holds cover
  // optimizer.shard(), which contains that piece under every ZeRO stage.
  const parallel::Range mine = parallel::FlatShards(st.params.numel(), st.dp.size()).shard(st.dp.rank());
  const parallel::Range opt = st.optimizer.shard();
  // The parameters this rank holds: all of them, or under ZeRO-3 its shard (which is `mine`).
  const bool sharded = st.params.sharded();
  const int64_t values_begin = sharded ? st.params.shard_begin() : 0;
  const Tensor values = (sharded ? st.params.shard_values() : st.params.flat_values()).to(Device::cpu);
  const Tensor m = st.optimizer.exp_avg().to(Device::cpu), v = st.optimizer.exp_avg_sq().to(Device::cpu);
  for (int i = 0; i < st.params.size(); ++i) {
    const nn::ParamSpec& s = st.params.spec(i);
    const Shape shape = st.params.logical_local_shape(i);
    const bool writes = s.shard.split() || st.writes_replicated;
    const parallel::Range p = writes ? piece(s, shape.numel(), mine) : parallel::Range{0, 0};
    const std::vector<io::FlatRange> runs = global_runs(s, p);
    const int64_t flat = s.offset + p.begin;  // where the piece starts in the flat order
    w.create("/params/" + s.name, s.global_shape);
    w.write_runs("/params/" + s.name, runs, values.data<float>() + (flat - values_begin));
    w.create("/optim/" + s.name + "/exp_avg", s.global_shape);
    w.write_runs("/optim/" + s.name + "/exp_avg", runs, m.data<float>() + (flat - opt.begin));
    w.create("/optim/" + s.name + "/exp_avg_sq", s.global_shape);
    w.write_runs("/optim/" + s.name + "/exp_avg_sq", runs, v.data<float>() + (flat - opt.begin));
  }
  w.commit();
  return path;
}

CheckpointInfo load_checkpoint(const std::string& path, const CheckpointInfo& expected, CheckpointState& st) {
  const std::string problem = checkpoint_problem(path, st.world);
  TESSERA_CHECK(problem.empty(), "cannot resume: ", problem);
  io::CheckpointReader r(path, st.world.mpi_comm());
  CheckpointInfo info;
  info.step = r.attr_int("step");
  info.consumed_samples = r.attr_int("consumed_samples");
  info.model = r.attr_string("model");
  info.layout = r.attr_string("layout");
  TESSERA_CHECK(info.model == expected.model, "checkpoint ", path, " holds a ", info.model, " model, not ",
                expected.model);
  // The tensors first: the message names the first that differs, with both shapes.
  for (int i = 0; i < st.params.size(); ++i) {
    const nn::ParamSpec& s = st.params.spec(i);
    const std::string name = "/params/" + s.name;
    TESSERA_CHECK(r.has(name), "checkpoint ", path, " is of another model: it has no tensor ", s.name);
    TESSERA_CHECK(r.shape(name) == s.global_shape, "checkpoint ", path, " is of another model: ", s.name, " is ",
                  r.shape(name).str(), " there, ", s.global_shape.str(), " here");
  }
  for (const auto& [key, value] : expected.model_config) {
    TESSERA_CHECK(r.has_attr("model." + key), "checkpoint ", path, " does not record model.", key);
    const int64_t saved = r.attr_int("model." + key);
    TESSERA_CHECK(saved == value, "checkpoint ", path, " is of another model: ", key, " ", saved, " there, ", value,
                  " here");
  }

  // Parameters: every rank holds all of them, or under ZeRO-3 its shard. Optimizer states: the
  // optimizer's range.
  const bool sharded = st.params.sharded();
  const parallel::Range held = sharded ? parallel::Range{st.params.shard_begin(),
                                                         st.params.shard_begin() + st.params.shard_values().numel()}
                                       : parallel::Range{0, st.params.numel()};
  Tensor values = Tensor::zeros({held.size()});
  const parallel::Range opt = st.optimizer.shard();
  Tensor m = Tensor::zeros({opt.size()}), v = Tensor::zeros({opt.size()});
  for (int i = 0; i < st.params.size(); ++i) {
    const nn::ParamSpec& s = st.params.spec(i);
    const int64_t logical = st.params.logical_local_shape(i).numel();
    const parallel::Range h = piece(s, logical, held);
    r.read_runs("/params/" + s.name, global_runs(s, h), values.data<float>() + (s.offset + h.begin - held.begin));
    const parallel::Range p = piece(s, logical, opt);
    const std::vector<io::FlatRange> runs = global_runs(s, p);
    const int64_t at = s.offset + p.begin - opt.begin;
    r.read_runs("/optim/" + s.name + "/exp_avg", runs, m.data<float>() + at);
    r.read_runs("/optim/" + s.name + "/exp_avg_sq", runs, v.data<float>() + at);
  }
  (sharded ? st.params.shard_values() : st.params.flat_values()).copy_from(values);
  st.optimizer.exp_avg().copy_from(m);
  st.optimizer.exp_avg_sq().copy_from(v);
  st.optimizer.set_steps_taken(r.attr_int("optimizer_steps"));
  return info;
}

std::optional<std::string> newest_checkpoint(const std::string& dir, comm::Communicator& world) {
  // Rank 0 looks; the answer (a path or nothing) is broadcast.
  std::string found;
  if (world.rank() == 0) {
    for (const auto& [step, path] : step_files(dir)) {
      try {
        io::CheckpointReader(path.string(), MPI_COMM_NULL).verify();
        found = path.string();
        break;
      } catch (const Error& e) {
        log::warn("skipping checkpoint ", path.string(), ": ", e.what());
      }
    }
  }
  found = broadcast_string(found, world);
  if (found.empty()) return std::nullopt;
  return found;
}

void prune_checkpoints(const std::string& dir, int keep, comm::Communicator& world) {
  if (keep <= 0 || world.rank() != 0) return;
  const auto steps = step_files(dir);
  for (size_t i = static_cast<size_t>(keep); i < steps.size(); ++i) fs::remove(steps[i].second);
}

}  // namespace tessera::train
