// Checkpoint save/load: mapping the flat buffers' ranges to the tensors' global flattenings.
#include "train/checkpointing.h"

#include <charconv>
#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "comm/string_exchange.h"
#include "core/log.h"
#include "io/checkpoint_file.h"
#include "quant/quantized_checkpoint.h"

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
// The checkpoints of dir, newest first: regular files named exactly as save_checkpoint names them
// (step_<N>.h5, N without leading zeros and below 10^18), so that look-alikes (step_010.h5,
// step_5.h5.bak, a folder step_7.h5, a step past int64) never take part in the choice.
std::vector<std::pair<int64_t, fs::path>> step_files(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  const std::regex pattern(R"(step_(0|[1-9][0-9]{0,17})\.h5)");
  // A folder that cannot be listed is an error, not an empty folder (which would start over).
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, pattern) && e.is_regular_file(ec)) steps.emplace_back(std::stoll(m[1]), e.path());
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// Every tensor of the model, over the whole job, in one order on every rank: the ranks' own
// tensors, rank after rank, each name once. (Pipeline stages hold different tensors, and creating
// a tensor in the file is collective.)
std::vector<std::pair<std::string, Shape>> model_tensors(const nn::ParamStore& params, comm::Communicator& world) {
  std::string mine;
  for (const nn::ParamSpec& s : params.specs()) {
    mine += s.name;
    for (int64_t d : s.global_shape.dims()) {
      mine += ' ';
      mine += std::to_string(d);
    }
    mine += "\n";
  }
  std::vector<std::pair<std::string, Shape>> all;
  std::set<std::string> seen;
  for (const std::string& rank_list : comm::all_gather_strings(mine, world)) {
    std::istringstream lines(rank_list);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string name;
      fields >> name;
      std::vector<int64_t> dims;
      for (int64_t d; fields >> d;) dims.push_back(d);
      if (seen.insert(name).second) all.emplace_back(name, Shape(dims));
    }
  }
  return all;
}

// The first rank's problem (empty: none), on every rank, so that all of them stop together.
std::string first_problem(const std::string& mine, comm::Communicator& world) {
  for (const std::string& p : comm::all_gather_strings(mine, world))
    if (!p.empty()) return p;
  return {};
}

// Empty when the file opens as a complete, unquantised checkpoint and every checksum matches (rank 0
// reads it whole); else the reason, on every rank.
std::string checkpoint_problem(const std::string& path, comm::Communicator& world) {
  std::string problem;
  if (world.rank() == 0) {
    try {
      const io::CheckpointReader r(path, MPI_COMM_NULL);
      // Refused before its tensors are read: a quantised file holds no optimizer state and no f32
      // block weights, and only inference reads it.
      if (quant::is_quantized(r))
        problem = "checkpoint " + path + " is quantised for inference (" + quant::quantization_text(r) +
                  "): use generate; a trainer resumes only from the f32 checkpoint it was made from";
      else
        r.verify();
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  return comm::broadcast_string(problem, world);
}

// A model value (a float, stored as a double) as the float's shortest decimal: 1e-05, 500000.
std::string shortest_text(double x) {
  char text[32];
  return std::string(text, std::to_chars(text, text + sizeof text, static_cast<float>(x)).ptr);
}

// The model fields (root attributes "model.<field>") the checkpoint records that differ from the
// run's, as "field: A in the checkpoint, B here" ("not recorded here" for a field this model does
// not have); empty when equal. A field the checkpoint does not record (one added since it was
// written, such as top_k) is left to the tensors' check.
std::string model_field_differences(const io::CheckpointReader& r, const CheckpointInfo& expected) {
  std::map<std::string, std::string> saved, here;
  for (const std::string& key : r.attr_keys())
    if (key.starts_with("model."))
      saved[key.substr(6)] = r.attr_type(key) == io::CheckpointReader::AttrType::int64 ? std::to_string(r.attr_int(key))
                             : r.attr_type(key) == io::CheckpointReader::AttrType::string ? r.attr_string(key)
                                                                                         : shortest_text(r.attr_double(key));
  for (const auto& [field, value] : expected.model_config) here[field] = std::to_string(value);
  for (const auto& [field, value] : expected.model_values) here[field] = shortest_text(value);
  std::set<std::string> fields;
  for (const auto& [field, value] : saved) fields.insert(field);
  for (const auto& [field, value] : here) fields.insert(field);
  std::string said;
  for (const std::string& field : fields) {
    const auto a = saved.find(field), b = here.find(field);
    if (a == saved.end() || (b != here.end() && a->second == b->second)) continue;
    said += std::string(said.empty() ? "" : "; ") + field + ": " +
            (a == saved.end() ? "not recorded" : a->second) + " in the checkpoint, " +
            (b == here.end() ? "not recorded" : b->second) + " here";
  }
  return said;
}

// The checkpoint's parameter tensors that the job's model does not have (up to three named, then a
// count); empty when there are none.
std::string unexpected_tensors(const io::CheckpointReader& r,
                               const std::vector<std::pair<std::string, Shape>>& job_tensors) {
  std::set<std::string> known;
  for (const auto& [name, shape] : job_tensors) known.insert("/params/" + name);
  std::vector<std::string> extra;
  for (const std::string& t : r.tensors())
    if (t.starts_with("/params/") && !known.count(t)) extra.push_back(t.substr(8));
  std::string said;
  for (size_t i = 0; i < extra.size() && i < 3; ++i) said += std::string(i ? ", " : "") + extra[i];
  if (extra.size() > 3) said += " and " + std::to_string(extra.size() - 3) + " more";
  return said;
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
  if (!info.data_identity.empty()) w.set_attr("data_identity", info.data_identity);
  if (!info.data_sampling.empty()) w.set_attr("data_sampling", info.data_sampling);
  if (info.data_epoch >= 0) w.set_attr("data_epoch", info.data_epoch);
  for (const auto& [key, value] : info.data_state) w.set_attr(key, value);
  for (const auto& [key, value] : info.model_config) w.set_attr("model." + key, value);
  for (const auto& [key, value] : info.model_values) w.set_attr("model." + key, value);
  w.set_attr("precision", info.precision);
  const optim::LossScalerState& ls = info.loss_scaler;
  w.set_attr("loss_scaler.scale", ls.scale);
  w.set_attr("loss_scaler.good_steps", ls.good_steps);
  w.set_attr("loss_scaler.hysteresis_left", ls.hysteresis_left);
  w.set_attr("loss_scaler.consecutive_overflows", ls.consecutive_overflows);
  w.set_attr("loss_scaler.skipped_steps", ls.skipped_steps);
  text::store_tokenizer(w, info.tokenizer);
  for (const CheckpointInfo::Attr& a : info.carried) {
    using T = io::CheckpointReader::AttrType;
    if (a.type == T::int64) w.set_attr(a.key, a.integer);
    else if (a.type == T::float64) w.set_attr(a.key, a.number);
    else w.set_attr(a.key, a.text);
  }
  for (const auto& [name, bytes] : info.carried_files) w.write_bytes(name, bytes);

  // This rank writes its FlatShards piece of every tensor; the optimizer states it holds cover
  // optimizer.shard(), which contains that piece under every ZeRO stage.
  const parallel::Range mine = parallel::FlatShards(st.params.numel(), st.dp.size()).shard(st.dp.rank());
  const parallel::Range opt = st.optimizer.shard();
  // The parameters this rank holds: all of them, or under ZeRO-3 its shard (which is `mine`).
  const bool sharded = st.params.sharded();
  const int64_t values_begin = sharded ? st.params.shard_begin() : 0;
  const Tensor values = (sharded ? st.params.shard_values() : st.params.flat_values()).to(Device::cpu);
  Tensor m = Tensor::empty({opt.size()}), v = Tensor::empty({opt.size()});  // wherever the states live
  st.optimizer.read_states(0, opt.size(), m.data<float>(), v.data<float>());
  for (const auto& [name, global_shape] : model_tensors(st.params, st.world)) {
    w.create("/params/" + name, global_shape);
    w.create("/optim/" + name + "/exp_avg", global_shape);
    w.create("/optim/" + name + "/exp_avg_sq", global_shape);
    const int i = st.params.find(name);  // -1: another pipeline stage's (this rank writes nothing)
    const nn::ParamSpec* s = i >= 0 ? &st.params.spec(i) : nullptr;
    const bool writes = s && st.writes(*s);
    const parallel::Range p = writes ? piece(*s, st.params.logical_local_shape(i).numel(), mine) : parallel::Range{0, 0};
    const std::vector<io::FlatRange> runs = s ? global_runs(*s, p) : std::vector<io::FlatRange>{};
    const int64_t flat = s ? s->offset + p.begin : 0;  // where the piece starts in the flat order
    w.write_runs("/params/" + name, runs, writes ? values.data<float>() + (flat - values_begin) : nullptr);
    w.write_runs("/optim/" + name + "/exp_avg", runs, writes ? m.data<float>() + (flat - opt.begin) : nullptr);
    w.write_runs("/optim/" + name + "/exp_avg_sq", runs, writes ? v.data<float>() + (flat - opt.begin) : nullptr);
  }
  w.commit();
  return path;
}

namespace {

// The hf.* root attributes of a checkpoint, to hand on (CheckpointInfo::carried).
std::vector<CheckpointInfo::Attr> carried_attrs(const io::CheckpointReader& r) {
  using T = io::CheckpointReader::AttrType;
  std::vector<CheckpointInfo::Attr> out;
  for (const std::string& key : r.attr_keys()) {
    if (!key.starts_with("hf.")) continue;
    CheckpointInfo::Attr a;
    a.key = key;
    a.type = r.attr_type(key);
    if (a.type == T::int64) a.integer = r.attr_int(key);
    else if (a.type == T::float64) a.number = r.attr_double(key);
    else if (a.type == T::string) a.text = r.attr_string(key);
    else continue;
    out.push_back(std::move(a));
  }
  return out;
}

// load_checkpoint and load_weights: with_optimizer also reads the AdamW moments and step count.
CheckpointInfo load(const std::string& path, const CheckpointInfo& expected, CheckpointState& st, bool with_optimizer) {
  const std::string problem = checkpoint_problem(path, st.world);
  TESSERA_CHECK(problem.empty(), with_optimizer ? "cannot resume: " : "cannot initialise from it: ", problem);
  // --init-from's file (another run's, or an import) is read by each rank alone: MPI-IO's open
  // creates and removes a lock-test file beside it, and nothing is written into its folder.
  io::CheckpointReader r(path, with_optimizer ? st.world.mpi_comm() : MPI_COMM_NULL);
  CheckpointInfo info;
  info.step = r.attr_int("step");
  info.consumed_samples = r.attr_int("consumed_samples");
  info.model = r.attr_string("model");
  info.layout = r.attr_string("layout");
  info.seed = static_cast<uint64_t>(r.attr_int("seed"));
  if (r.has_attr("data_identity")) info.data_identity = r.attr_string("data_identity");
  if (r.has_attr("data_sampling")) info.data_sampling = r.attr_string("data_sampling");
  if (r.has_attr("data_epoch")) info.data_epoch = r.attr_int("data_epoch");
  for (const char* key : {"data_blend", "data_blend_samples", "data_blend_epochs"})
    if (r.has_attr(key)) info.data_state.emplace_back(key, r.attr_string(key));
  if (r.has_attr("precision")) {  // checkpoints from before mixed precision: fp32, no scaler
    info.precision = r.attr_string("precision");
    info.loss_scaler = {r.attr_double("loss_scaler.scale"), r.attr_int("loss_scaler.good_steps"),
                        r.attr_int("loss_scaler.hysteresis_left"), r.attr_int("loss_scaler.consecutive_overflows"),
                        r.attr_int("loss_scaler.skipped_steps")};
  }
  info.tokenizer = text::read_stored_tokenizer_file(r);
  info.carried = carried_attrs(r);
  for (const std::string& name : r.byte_datasets())
    if (name.starts_with("/hf_files/")) info.carried_files.emplace_back(name, r.read_bytes(name));
  TESSERA_CHECK(info.model == expected.model, "checkpoint ", path, " holds a ", info.model, " model, not ",
                expected.model);
  // A checkpoint of another configuration never loads, not even in part: its recorded model fields
  // (every rank reads the same attributes), the tensors each rank holds (the message names the
  // first that differs, with both shapes; a pipeline stage holds some of them, and all stop on the
  // first rank's problem), and no tensor beyond the job's model.
  const std::string fields = model_field_differences(r, expected);
  std::string problem_here;
  for (int i = 0; i < st.params.size() && problem_here.empty(); ++i) {
    const nn::ParamSpec& s = st.params.spec(i);
    const std::string name = "/params/" + s.name;
    if (!r.has(name))
      problem_here = "checkpoint " + path + " is of another model: it has no tensor " + s.name;
    else if (!(r.shape(name) == s.global_shape))
      problem_here = "checkpoint " + path + " is of another model: " + s.name + " is " + r.shape(name).str() +
                     " there, " + s.global_shape.str() + " here";
  }
  const std::string tensor_problem = first_problem(problem_here, st.world);
  TESSERA_CHECK(tensor_problem.empty(), tensor_problem, fields.empty() ? "" : " (model fields: " + fields + ")");
  TESSERA_CHECK(fields.empty(), "checkpoint ", path, " is of another model configuration: ", fields);
  const std::vector<std::pair<std::string, Shape>> job_tensors = model_tensors(st.params, st.world);
  const std::string extra = unexpected_tensors(r, job_tensors);
  TESSERA_CHECK(extra.empty(), "checkpoint ", path, " is of another model: it has tensors this model does not (",
                extra, ")");
  // Parameters: every rank holds all of them, or under ZeRO-3 its shard. Optimizer states: the
  // optimizer's range.
  const bool sharded = st.params.sharded();
  const parallel::Range held = sharded ? parallel::Range{st.params.shard_begin(),
                                                         st.params.shard_begin() + st.params.shard_values().numel()}
                                       : parallel::Range{0, st.params.numel()};
  Tensor values = Tensor::zeros({held.size()});
  const parallel::Range opt = with_optimizer ? st.optimizer.shard() : parallel::Range{0, 0};
  Tensor m = Tensor::zeros({opt.size()}), v = Tensor::zeros({opt.size()});
  for (const auto& [name, global_shape] : job_tensors) {
    const int i = st.params.find(name);  // -1: another pipeline stage's (this rank reads nothing)
    if (i < 0) {
      r.read_runs("/params/" + name, {}, nullptr);
      if (!with_optimizer) continue;
      r.read_runs("/optim/" + name + "/exp_avg", {}, nullptr);
      r.read_runs("/optim/" + name + "/exp_avg_sq", {}, nullptr);
      continue;
    }
    const nn::ParamSpec& s = st.params.spec(i);
    const int64_t logical = st.params.logical_local_shape(i).numel();
    const parallel::Range h = piece(s, logical, held);
    r.read_runs("/params/" + s.name, global_runs(s, h), values.data<float>() + (s.offset + h.begin - held.begin));
    if (!with_optimizer) continue;
    const parallel::Range p = piece(s, logical, opt);
    const std::vector<io::FlatRange> runs = global_runs(s, p);
    const int64_t at = s.offset + p.begin - opt.begin;
    r.read_runs("/optim/" + s.name + "/exp_avg", runs, m.data<float>() + at);
    r.read_runs("/optim/" + s.name + "/exp_avg_sq", runs, v.data<float>() + at);
  }
  (sharded ? st.params.shard_values() : st.params.flat_values()).copy_from(values);
  st.params.values_written();  // a bf16 copy of the values before is stale now
  if (!with_optimizer) return info;
  st.optimizer.write_states(0, opt.size(), m.data<float>(), v.data<float>());
  st.optimizer.set_steps_taken(r.attr_int("optimizer_steps"));
  return info;
}

}  // namespace

CheckpointInfo load_checkpoint(const std::string& path, const CheckpointInfo& expected, CheckpointState& st) {
  return load(path, expected, st, true);
}

CheckpointInfo load_weights(const std::string& path, const CheckpointInfo& expected, CheckpointState& st) {
  return load(path, expected, st, false);
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
  found = comm::broadcast_string(found, world);
  if (found.empty()) return std::nullopt;
  return found;
}

int64_t checkpoint_file_count(const std::string& dir, comm::Communicator& world) {
  const int64_t mine = world.rank() == 0 ? static_cast<int64_t>(step_files(dir).size()) : 0;
  return world.all_reduce_max(mine);
}

void prune_checkpoints(const std::string& dir, int64_t written, int keep, comm::Communicator& world) {
  if (keep <= 0 || world.rank() != 0) return;
  int kept = 1;  // the one just written
  for (const auto& [step, path] : step_files(dir)) {
    if (step >= written) continue;  // this run's newest, and anything later: never pruned
    if (kept++ < keep) continue;
    std::error_code ec;
    fs::remove(path, ec);
    if (ec) log::warn("--keep-checkpoints: cannot remove ", path.string(), ": ", ec.message());
  }
}

std::vector<std::string> set_aside_checkpoints(const std::string& dir, int64_t after_step, const std::string& why,
                                               comm::Communicator& world) {
  std::string moved;  // rank 0's list, one a line
  if (world.rank() == 0) {
    std::vector<fs::path> files;
    for (const auto& [step, path] : step_files(dir))
      if (step > after_step) files.push_back(path);
    if (!files.empty()) {
      const std::time_t now = std::time(nullptr);
      char stamp[32];
      std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
      fs::path aside = fs::path(dir) / (std::string("set_aside_") + stamp);
      for (int i = 2; fs::exists(aside); ++i) aside = fs::path(dir) / (std::string("set_aside_") + stamp + "_" + std::to_string(i));
      fs::create_directories(aside);
      for (const fs::path& f : files) {
        fs::rename(f, aside / f.filename());
        moved += (aside / f.filename()).string() + "\n";
      }
      log::warn(why, ": moved ", files.size(), " checkpoint(s) to ", aside.string(), " (nothing is deleted)");
    }
  }
  std::vector<std::string> out;
  std::istringstream lines(comm::broadcast_string(moved, world));
  for (std::string line; std::getline(lines, line);) out.push_back(line);
  return out;
}

}  // namespace tessera::train
