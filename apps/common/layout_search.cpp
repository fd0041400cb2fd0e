// The layout search: enumeration, each layout checked by the trainer's option checks and planned,
// the ranking, and the rejections counted by reason.
#include "apps/common/layout_search.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <sstream>

#include "apps/common/gpt_app.h"
#include "apps/common/gpt_model_options.h"
#include "apps/common/train_cli.h"
#include "apps/common/vit_model_options.h"
#include "core/error.h"
#include "models/model_layout.h"

namespace tessera::cli {
namespace {

// gpt_train's (moe_train's) model and data options, so that the trainer's flags parse here as they do there.
struct GptModelOptionsAndData {
  GptModelOptions shape;
  MoeModelOptions experts;
  std::string input, val_input, dump;
  void add_to(OptionSections& opts, bool moe) {
    shape.add_to(opts);
    if (moe) experts.add_to(opts, shape.config);
    opts.section(kData).add_options()
        ("input", po::value(&input), "")
        ("val-input", po::value(&val_input), "");
    opts.section(kDebugging).add_options()("dump", po::value(&dump), "");
  }
};

// One parse of the trainer's flags (and a layout's), as gpt_train parses them.
struct ParsedTrainer {
  OptionSections opts;
  TrainOptions o;
  GptModelOptionsAndData model;
  po::variables_map vm;
  ParsedTrainer(const std::vector<std::string>& args, bool moe) {
    model.add_to(opts, moe);
    o.add_to(opts, "sequences", moe ? TrainOptions::App::moe : TrainOptions::App::gpt);
    const char* name = moe ? "moe_train" : "gpt_train";
    std::vector<std::string> tokens = {name};
    tokens.insert(tokens.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& t : tokens) argv.push_back(t.data());
    parse(static_cast<int>(argv.size()), argv.data(), opts, vm, {name, "", ""}, TrainOptions::renamed());
    model.shape.resolve_arch();
  }
};

// One parse of vit_train's flags (and a layout's), as vit_train parses them (its --layout and
// --machine are taken out before a search).
struct ParsedVit {
  OptionSections opts;
  TrainOptions o;
  VitModelOptions model;
  po::variables_map vm;
  explicit ParsedVit(const std::vector<std::string>& args) {
    model.add_to(opts);
    o.add_to(opts, "images", TrainOptions::App::vit);
    std::vector<std::string> tokens = {"vit_train"};
    tokens.insert(tokens.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& t : tokens) argv.push_back(t.data());
    std::vector<RenamedOption> renamed = TrainOptions::renamed();
    renamed.push_back({"data", "input"});
    parse(static_cast<int>(argv.size()), argv.data(), opts, vm, {"vit_train", "", ""}, renamed);
  }
};

// vit_train's plan of one layout: its checks of the options, the model and the layout, then the
// memory plan and the step time.
LayoutChoice evaluate_vit_layout(const SearchInput& input, const plan::MachineModel& machine,
                                 const std::vector<std::string>& layout_args) {
  std::vector<std::string> args = input.trainer_args;
  args.insert(args.end(), layout_args.begin(), layout_args.end());
  ParsedVit p(args);
  TrainOptions& o = p.o;
  o.finish(input.ranks, p.vm);  // the trainer's own checks of the layout and the batch
  models::VitConfig& mc = p.model.config;
  if (input.image > 0) {
    mc.image = input.image;
    mc.channels = input.channels;
    mc.classes = input.classes;
  } else {
    read_image_geometry(p.model.input, mc);
  }
  p.model.check_layout(o);
  o.train.validate(o.mesh.dp * o.mesh.tp_batch_parts());
  LayoutChoice c;
  c.args = layout_args;
  c.vit = true;
  c.vit_run = planned_vit_run(o, mc);
  c.memory = plan::plan_memory(c.vit_run);
  c.time = plan::predict_step(c.vit_run, machine, input.ranks_per_node, input.wire_bytes);
  return c;
}

std::vector<int> divisors(int64_t n) {
  std::vector<int> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(static_cast<int>(i));
  return d;
}

// A rejection's reason without its numbers, so that like rejections count together.
std::string reason_of(const std::string& message) {
  std::string r;
  for (size_t i = 0; i < message.size() && r.size() < 160; ++i) {
    if (std::isdigit(static_cast<unsigned char>(message[i]))) {
      if (r.empty() || r.back() != 'N') r += 'N';
      while (i + 1 < message.size() && (std::isdigit(static_cast<unsigned char>(message[i + 1])) || message[i + 1] == '.'))
        ++i;
    } else {
      r += message[i];
    }
  }
  return r;
}

// A tensor-parallel mode a tp size fits: 1d, or a grid (q^2: 2d; d q^2 with d > 1: 2.5d at depth
// d; q^3: 3d), with the flags that choose it and the grid's shares of the batch.
struct TpChoice {
  std::vector<std::string> flags;  // "--tp-mode", "2.5d", "--tp-depth", "2"; none for 1d
  int batch_parts = 1;
  bool grid() const { return !flags.empty(); }
};

std::vector<TpChoice> tp_choices(int tp) {
  std::vector<TpChoice> choices = {{}};
  for (int q = 2; q * q <= tp; ++q) {
    if (q * q == tp) choices.push_back({{"--tp-mode", "2d"}, q});
    if (tp % (q * q) == 0 && tp / (q * q) > 1)
      choices.push_back({{"--tp-mode", "2.5d", "--tp-depth", std::to_string(tp / (q * q))}, tp / q});
    if (q * q * q == tp) choices.push_back({{"--tp-mode", "3d"}, q * q});
  }
  return choices;
}

}  // namespace

const std::vector<std::string>& layout_options() {
  static const std::vector<std::string> names = {
      "dp", "tp", "tp-mode", "tp-depth", "pp", "ep", "pp-schedule", "virtual-stages", "pp-layers", "sp", "sp-mode", "zero", "micro-batch",
      "activation-checkpointing", "recompute-every-k-blocks", "offload", "offload-params", "offload-optim-frac",
      "placement"};
  return names;
}

std::string LayoutChoice::memory_text() const {
  return vit ? plan::describe(memory, vit_run) : plan::describe(memory, run);
}

std::string SearchResult::rejected_text() const {
  std::string text;
  for (const auto& [reason, count] : rejected) text += (text.empty() ? "" : "; ") + std::to_string(count) + " x " + reason;
  return text;
}

std::string LayoutChoice::args_text() const {
  std::string text;
  for (const std::string& a : args) text += (text.empty() ? "" : " ") + a;
  return text;
}

LayoutChoice evaluate_layout(const SearchInput& input, const plan::MachineModel& machine,
                             const std::vector<std::string>& layout_args) {
  if (input.vit) return evaluate_vit_layout(input, machine, layout_args);
  std::vector<std::string> args = input.trainer_args;
  args.insert(args.end(), layout_args.begin(), layout_args.end());
  ParsedTrainer p(args, input.moe);
  TrainOptions& o = p.o;
  models::GptConfig& mc = p.model.shape.config;
  const int64_t seq = p.model.shape.seq_len;
  p.model.shape.check_llama_options(p.vm);
  o.finish(input.ranks, p.vm);  // the trainer's own checks of the layout and the batch
  TESSERA_CHECK(seq >= 1, "--seq-len must be >= 1, got ", seq);
  o.check_sequence_split(seq);
  o.check_sequence_heads(mc.heads);
  TESSERA_CHECK(!p.model.input.empty() || input.vocab > 0, "give --input DATA.h5 (its vocab_size) or --vocab N");
  if (input.moe) p.model.experts.finish(mc, o);  // moe_train's own checks of the experts and the layout
  else TESSERA_CHECK(o.mesh.ep == 1, "gpt_train: --ep ", o.mesh.ep, " needs mixture-of-experts layers: use moe_train");
  mc.vocab = input.vocab > 0 ? input.vocab : vocab_size_of(p.model.input);
  mc.max_seq = seq;
  mc.validate(o.split_model(mc.heads, mc.hidden));
  TESSERA_CHECK(mc.layers >= o.mesh.pp * o.train.virtual_stages, "--pp ", o.mesh.pp, " x --virtual-stages ",
                o.train.virtual_stages, ": more pipeline stages than the ", mc.layers, " blocks");
  LayoutChoice c;
  c.args = layout_args;
  c.run = planned_run(o, mc, seq);
  c.memory = plan::plan_memory(c.run);
  c.time = plan::predict_step(c.run, machine, input.ranks_per_node, input.wire_bytes);
  return c;
}

SearchResult search_layouts(const SearchInput& given, const plan::MachineModel& machine) {
  SearchInput input = given;
  TESSERA_CHECK(input.ranks >= 1, "--ranks must be >= 1, got ", input.ranks);
  TESSERA_CHECK(input.device_memory > 0, "--device-memory must be > 0 bytes");
  for (const std::string& a : input.trainer_args)
    for (const std::string& name : layout_options())
      TESSERA_CHECK(a != "--" + name && a.rfind("--" + name + "=", 0) != 0, "--", name,
                    " is a layout choice: the search makes it (leave it out, or use --explain to plan one layout)");
  // The model's size and the batch, from the trainer's flags alone; the data set's header read once.
  int64_t layers = 0, global_batch = 0;
  if (input.vit) {
    const ParsedVit base(input.trainer_args);
    layers = base.model.config.layers;
    global_batch = base.o.train.global_batch;
    if (input.image == 0) {
      models::VitConfig geometry;
      read_image_geometry(base.model.input, geometry);
      input.image = geometry.image;
      input.channels = geometry.channels;
      input.classes = geometry.classes;
    }
  } else {
    const ParsedTrainer base(input.trainer_args, input.moe);
    layers = base.model.shape.config.layers;
    global_batch = base.o.train.global_batch;
    if (input.vocab == 0 && !base.model.input.empty()) input.vocab = vocab_size_of(base.model.input);  // read once
  }
  TESSERA_CHECK(layers >= 1 && global_batch >= 1, "--layers and --global-batch must be >= 1");

  SearchResult result;
  const auto reject = [&](const std::string& reason) { ++result.rejected[reason]; };
  const int n = input.ranks;
  for (int pp : divisors(n)) {
    for (int tp : divisors(n / pp))
    for (const TpChoice& tp_mode : tp_choices(tp)) {
      // Grid tp: gpt_train's and vit_train's, without sp or ep (TrainOptions::finish refuses them).
      // moe_train's experts route whole token rows: its model refuses a grid, and so every such
      // layout is rejected by its own check (the planner registers the model's parameters).
      // moe_train: ep as well as sp (its token group is ep x the token shards: nn/expert_layout.h).
      for (int sp : tp_mode.grid() ? std::vector<int>{1} : divisors(n / pp / tp))
      for (int ep : input.moe ? divisors(n / pp / tp / sp) : std::vector<int>{1}) {
        std::vector<std::string> sp_modes = sp > 1 ? std::vector<std::string>{"all_to_all", "ring"}
                                                   : std::vector<std::string>{""};
        if (sp == 1 && tp > 1 && !input.vit && !tp_mode.grid()) sp_modes.push_back("split_gather");
        // zigzag: the ring balanced under the causal mask (gpt_train; the time model gives it the balanced share).
        if (sp > 1 && !input.moe && !input.vit) sp_modes.push_back("zigzag");
        const int dp = n / pp / tp / sp / ep;
        // ep ranks, and a tp grid's rows and layers, split the batch like dp ranks.
        const int batch_ranks = dp * ep * tp_mode.batch_parts;
        std::vector<int> micro = global_batch % batch_ranks == 0 ? divisors(global_batch / batch_ranks) : std::vector<int>{1};
        // Blocks per stage: even, or (one chunk per stage) one block moved off the last stage (the
        // head's) to the first, or off the first (the embedding's) to the last (--pp-layers).
        std::vector<std::string> stage_splits = {""};
        if (pp > 1 && layers >= pp) {
          std::vector<int64_t> even;
          for (int v = 0; v < pp; ++v) {
            const auto [first, end] = models::stage_blocks(layers, pp, v);
            even.push_back(end - first);
          }
          for (int from : {pp - 1, 0}) {
            std::vector<int64_t> counts = even;
            const int to = from == 0 ? pp - 1 : 0;
            if (counts[from] < 2) continue;
            --counts[from];
            ++counts[to];
            std::string text;
            for (int64_t c : counts) text += (text.empty() ? "" : ",") + std::to_string(c);
            stage_splits.push_back(text);
          }
        }
        std::vector<std::pair<std::string, int>> schedules = {{"", 1}};
        if (pp > 1) {
          schedules = {{"gpipe", 1}, {"1f1b", 1}, {"zb", 1}};
          for (int v = 2; v <= 4 && pp * v <= layers; ++v) schedules.push_back({"interleaved", v});
        }
        for (const std::string& sp_mode : sp_modes)
          for (int zero = 0; zero <= 3; ++zero)
            for (int mb : micro)
              for (const auto& [schedule, v] : schedules)
                for (const std::string& split : stage_splits)
                for (const char* ckpt : {"none", "full", "selective"})
                  for (const char* offload : {"none", "cpu", "params"}) {
                    if (std::string(offload) == "params" && zero != 3) continue;  // ZeRO-3's alone
                    if (!split.empty() && v > 1) continue;  // uneven splits: one chunk per stage only
                    ++result.enumerated;
                    if (zero > 0 && dp * sp == 1) {
                      reject("ZeRO over a data group of one rank: the same layout as --zero 0");
                      continue;
                    }
                    if (pp > layers) {
                      reject("more pipeline stages than blocks");
                      continue;
                    }
                    std::vector<std::string> a = {"--dp", std::to_string(dp), "--tp", std::to_string(tp)};
                    a.insert(a.end(), tp_mode.flags.begin(), tp_mode.flags.end());
                    a.insert(a.end(), {"--pp", std::to_string(pp)});
                    if (input.moe) a.insert(a.end(), {"--ep", std::to_string(ep)});
                    a.insert(a.end(), {"--sp", std::to_string(sp)});
                    if (!sp_mode.empty()) a.insert(a.end(), {"--sp-mode", sp_mode});
                    if (!schedule.empty()) a.insert(a.end(), {"--pp-schedule", schedule});
                    if (v > 1) a.insert(a.end(), {"--virtual-stages", std::to_string(v)});
                    if (!split.empty()) a.insert(a.end(), {"--pp-layers", split});
                    a.insert(a.end(), {"--zero", std::to_string(zero), "--micro-batch", std::to_string(mb)});
                    if (std::string(ckpt) != "none") a.insert(a.end(), {"--activation-checkpointing", ckpt});
                    if (std::string(offload) == "cpu") a.insert(a.end(), {"--offload", "cpu"});
                    if (std::string(offload) == "params") a.push_back("--offload-params");
                    LayoutChoice c;
                    try {
                      c = evaluate_layout(input, machine, a);
                    } catch (const std::exception& e) {
                      reject(reason_of(e.what()));
                      continue;
                    }
                    if (c.peak() > input.device_memory) {
                      reject("planned peak above --device-memory");
                      if (result.smallest_peak < 0 || c.peak() < result.smallest_peak) {
                        result.smallest_peak = c.peak();
                        result.smallest_args = c.args;
                      }
                      continue;
                    }
                    result.ranked.push_back(std::move(c));
                  }
      }
    }
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(), [](const LayoutChoice& a, const LayoutChoice& b) {
    if (a.time.step_s != b.time.step_s) return a.time.step_s < b.time.step_s;
    return a.peak() < b.peak();
  });
  return result;
}

}  // namespace tessera::cli
