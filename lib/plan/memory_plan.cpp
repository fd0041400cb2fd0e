// MemoryPlan: a stage's parameters registered under planning layouts, ZeRO's shards of them, the
// activation formulas times the micro-batches the schedule keeps in flight, and the buffers
// around them; and the dry run's report.
#include "plan/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "optim/adamw.h"
#include "parallel/flat_shards.h"
#include "parallel/pipeline_schedule.h"
#include "plan/gpt_activations.h"
#include "plan/planning_layouts.h"
#include "plan/stage_memory.h"

namespace tessera::plan {
namespace {

constexpr int64_t kBytes = 4;

// The GPT stage's items (the shared add_item).
void add(StageMemory& m, const char* category, std::string what, int64_t bytes, bool approximate = false) {
  add_item(m, category, std::move(what), bytes, approximate);
}

StageMemory plan_stage(const GptRun& run, int stage, PlannedLayouts& layouts,
                       const std::optional<parallel::PipelineSchedule>& schedule) {
  const comm::MeshShape& mesh = run.mesh;
  const models::PipelinePlacement placement{stage, mesh.pp, run.virtual_stages, run.pp_layers};
  const models::Gpt::StageParams params =
      models::Gpt::stage_params(run.model, layouts.layout(placement, run.checkpointing));
  auto [m, chunks, blocks, first_stage, last_stage, data_ranks, n, shard] =
      start_stage(run, placement, run.model.layers, params.store, "embedding");
  const int zero = run.zero_stage;
  const nn::ParamStore& store = params.store;

  // Activations: per chunk, the micro-batches in flight.
  const bool grid = mesh.tp_mode != comm::TpMode::d1;
  GptActivationShape shape{run.model, run.micro_batch, run.seq, grid ? mesh.tp_side() : mesh.tp, mesh.sp, mesh.ep,
                           run.split_gather, run.ring, run.checkpointing, grid, mesh.tp_mode == comm::TpMode::d3};
  const std::vector<int> in_flight =
      schedule ? activations_in_flight(*schedule, stage) : std::vector<int>(chunks.size(), 1);
  for (size_t c = 0; c < chunks.size(); ++c) {
    const models::ModelChunk& ch = chunks[c];
    const std::string where = chunks.size() > 1 ? " of chunk " + std::to_string(c) : "";
    add(m, "activations", std::to_string(in_flight[c]) + " micro-batch(es) in flight" + where,
        in_flight[c] * micro_batch_bytes(shape, ch.first_block, ch.end_block, ch.embedding));
    if (schedule && schedule->split_backward)
      add(m, "activations", "zb: weight-gradient inputs kept until W" + where,
          in_flight[c] * deferred_weight_grad_bytes(shape, ch.first_block, ch.end_block, ch.embedding), true);
  }
  add(m, "activations", "checkpointed blocks' recompute buffers", recomputed_bytes(shape, blocks));
  const nn::ParamStore& table_store = first_stage ? store : params.mirror;
  const int tokens_id = table_store.find("embed.tokens.weight");
  const int64_t table = tokens_id < 0 ? 0 : table_store.spec(tokens_id).local_shape.numel();
  const int head_id = store.find("head.weight");  // an untied head's table (Llama)
  const int64_t head_rows = head_id >= 0 ? store.spec(head_id).local_shape[0]
                            : tokens_id < 0 ? 0 : table_store.spec(tokens_id).local_shape[0];
  const bool tied = run.model.tie_embeddings;
  add(m, "workspace", "backward scratch, batch, head's logits and loss rows",
      workspace_bytes(shape, blocks, last_stage, head_rows));
  add(m, "workspace", "grid tp: vocabulary regions' tables, staging, the linears' blocks, the norms' sums",
      grid_workspace_bytes(shape, blocks, first_stage, last_stage, run.model.tie_embeddings, head_rows));
  if (run.zigzag && mesh.sp > 1) {  // models::Gpt's row positions; the learned table's rows looked up by them
    // (nn::Embedding's document_rows_, on tp rank 0: the one adding the positions under 1D tp)
    const int64_t looked_up = first_stage && !run.model.llama() ? run.model.hidden : 0;
    add(m, "workspace", "zigzag: each row's position (and its learned position's row)",
        kBytes * shape.tokens() * (1 + looked_up));
  }

  // Buffers.
  if (zero == 1 || zero == 2) add(m, "buffers", "ZeRO: the updated shard, all-gathered", kBytes * shard.size());
  const int64_t held_begin = zero >= 2 ? shard.begin : 0, held_end = zero >= 2 ? shard.end : n;
  const int64_t partial = packed_partial_grads(store, held_begin, held_end, mesh, run.split_gather);
  add(m, "buffers", "partial gradients packed for one all-reduce", kBytes * partial);
  int64_t tied_add = 0;  // transient: the mirror's gradient, added to the held part of the table
  if (mesh.pp > 1) {
    if (tied && (first_stage || last_stage)) add(m, "buffers", "tied token table's message buffer", kBytes * table);
    if (last_stage && !first_stage)
      add(m, "buffers", "tied token table's mirror (values, gradients)", kBytes * 2 * params.mirror.numel());
    // A send's copy lives until the message has left, which depends on when the peer receives:
    // bounded from the schedule (message_copies_in_flight).
    const int copies = schedule ? parallel::message_copies_in_flight(*schedule, stage) : 0;
    add(m, "buffers", "pipeline message copies (at most " + std::to_string(copies) + " in flight)",
        kBytes * copies * shape.rows() * shape.features(), true);
    if (tied && first_stage) tied_add = std::max<int64_t>(0, std::min(held_end, table) - held_begin);
  }
  // Mixed precision's operands: at most the logits' gradient (rows x the table's rows) and an
  // activation beside it.
  add_mixed_precision(m, run, store, shard, shape.rows() * ((last_stage ? head_rows : 0) + 4 * run.model.hidden),
                      false);
  // The transients come at different moments of a step: the larger counts.
  const int64_t gathered = zero == 3 ? zero3_gathered(params.store, params.unit_first_param, data_ranks, first_stage && last_stage, run.zero3_overlap) : 0;
  if (gathered >= tied_add) {
    add(m, "buffers", "transient: ZeRO-3 units gathered with gradients (the stage's worst rank)", kBytes * gathered,
        true);
  } else {
    add(m, "buffers", "transient: the tied table's gradient from the last stage", kBytes * tied_add);
  }
  return m;
}

std::string mib(int64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f", static_cast<double>(bytes) / (1 << 20));
  return s;
}

}  // namespace

// Micro-batches each chunk of `stage` holds activations for at once, as PipelineRunner takes and
// frees them: a micro-batch's slot is taken by its forward or earlier, when the compute step
// before its recv_fwd posts that receive into the slot's input (so the message arrives during
// compute); it is free after the micro-batch's last step on the stage (its backward, the send of its
// input gradient right after it, or its W under a split backward). Gpt keeps one pool per chunk.
std::vector<int> activations_in_flight(const parallel::PipelineSchedule& schedule, int stage) {
  using parallel::PipelineOp;
  const std::vector<parallel::PipelineInstruction>& program = schedule.programs.at(stage);
  std::vector<int> live(schedule.chunks, 0), peak(schedule.chunks, 0);
  std::set<std::pair<int, int>> held;  // (chunk, micro-batch)
  const auto take = [&](const parallel::PipelineInstruction& in) {
    if (held.insert({in.chunk, in.micro_batch}).second) peak[in.chunk] = std::max(peak[in.chunk], ++live[in.chunk]);
  };
  for (size_t i = 0; i < program.size(); ++i) {
    const parallel::PipelineInstruction& in = program[i];
    if (parallel::is_compute(in.op)) {  // posts the next receive; a recv_fwd's lands in its slot
      const size_t j = parallel::next_receive(program, i);
      if (j < program.size() && program[j].op == PipelineOp::recv_fwd) take(program[j]);
    }
    if (in.op == PipelineOp::recv_fwd || in.op == PipelineOp::forward) take(in);
    if (parallel::releases_activations(schedule, program, i) && held.erase({in.chunk, in.micro_batch}))
      --live[in.chunk];
  }
  return peak;
}

StageStart start_stage(const RunLayout& run, const models::PipelinePlacement& placement, int64_t layers,
                       const nn::ParamStore& store, const char* embedding) {
  StageStart s;
  s.chunks = models::model_chunks(layers, placement);
  for (const models::ModelChunk& ch : s.chunks)
    for (int64_t i = ch.first_block; i < ch.end_block; ++i) s.blocks.push_back(i);
  s.first_stage = s.chunks.front().embedding;
  s.last_stage = s.chunks.back().head;
  s.memory.stage = placement.stage;
  s.memory.holds = "blocks " + std::to_string(s.blocks.front()) + "-" + std::to_string(s.blocks.back()) +
                   (s.first_stage ? ", " + std::string(embedding) : "") + (s.last_stage ? ", head" : "");
  s.data_ranks = run.mesh.dp * run.mesh.sp;
  s.n = store.numel();
  s.shard = parallel::FlatShards(s.n, s.data_ranks).shard(0);  // the largest
  add_state(s.memory, run.zero_stage, s.n, s.shard, run);
  return s;
}

void add_mixed_precision(StageMemory& m, const RunLayout& run, const nn::ParamStore& store, parallel::Range shard,
                         int64_t operands, bool approximate) {
  if (run.precision == "fp32") return;
  const int zero = run.zero_stage;
  const int64_t n = store.numel(), held = zero == 3 ? shard.size() : n;
  const int64_t rounded = run.precision == "bf16" && zero != 3
      ? params_within(store, 0, n, [](const nn::ParamSpec& s) { return !s.rounded_on_read; })
      : held;
  add_item(m, "buffers", "mixed precision: fp32 master of the held weights rounded in place", kBytes * rounded);
  if (run.precision != "bf16") return;
  if (zero != 3) add_item(m, "buffers", "mixed precision: the held weights' bf16 copy for the GEMMs", 2 * held);
  add_item(m, "buffers", "mixed precision: bf16 GEMM operands (logits' gradient, an activation)", 2 * operands,
           approximate);
}

// Adds an item when it is not empty.
void add_item(StageMemory& m, const char* category, std::string what, int64_t bytes, bool approximate) {
  if (bytes > 0) m.items.push_back({category, std::move(what), bytes, approximate});
}

// Parameters, gradients, optimizer states: ZeroOptimizer::state_bytes() term by term, with the
// largest shard of the flat order (n elements) over the data group.
void add_state(StageMemory& m, int zero, int64_t n, parallel::Range shard, const RunLayout& run) {
  const int64_t states = zero == 0 ? n : shard.size();
  if (zero == 3 && run.offload_params) {
    add_item(m, "host tier", "--offload-params: 1/dp shard of the parameters and their gradients", kBytes * 2 * shard.size());
  } else {
    add_item(m, "parameters", zero == 3 ? "1/dp shard of the stage's flat buffer" : "the stage's flat buffer",
        kBytes * (zero == 3 ? shard.size() : n));
    add_item(m, "gradients", zero == 3 ? "1/dp shard" : zero == 2 ? "flat buffer + reduced 1/dp shard" : "flat buffer",
        kBytes * (zero == 3 ? shard.size() : zero == 2 ? n + shard.size() : n));
  }
  if (run.offload == "nvme") {  // in a scratch file, streamed through two buffers of both moments
    add_item(m, "optimizer states", "AdamW moments: in a scratch file under --offload-dir", 0);
    add_item(m, "buffers", "--offload nvme: two streaming buffers of both moments",
        kBytes * 2 * 2 * std::min(run.offload_chunk, std::max<int64_t>(states, 1)));
  } else {
    optim::AdamWConfig placement;
    placement.offload = run.offload;
    placement.host_fraction = run.host_fraction;
    placement.placement_chunk = run.placement_chunk;
    const int64_t on_device = placement.device_elements(states);
    add_item(m, "optimizer states", zero == 0 ? "AdamW moments" : "AdamW moments of the 1/dp shard",
        kBytes * 2 * on_device);
    add_item(m, "host tier", "AdamW moments offloaded (--offload cpu, --offload-optim-frac)", kBytes * 2 * (states - on_device));
  }
}

// ZeRO-3: the most a rank of the stage holds gathered at once (parallel/sharded_params.h).
// Blocking (--zero3-overlap off): a unit with its gradient buffer and its reduce-scattered part;
// without a pipeline the embedding (the tied head's table) stays gathered from its forward to its
// backward as the other units come and go. Overlapped: the buffers are pooled by unit size and
// kept, at most two of each role per size (the unit in use and the next one's gather in flight;
// a gradient buffer and the one whose reduce-scatter is in flight): a bound over the sizes.
int64_t zero3_gathered(const nn::ParamStore& store, const std::vector<int>& first, int data_ranks,
                       bool embedding_stays, bool overlap) {
  std::vector<parallel::Range> units;
  for (size_t u = 0; u < first.size(); ++u)
    units.push_back(
        {store.spec(first[u]).offset, u + 1 < first.size() ? store.spec(first[u + 1]).offset : store.numel()});
  const parallel::FlatShards shards(store.numel(), data_ranks);
  int64_t worst = 0;
  for (int r = 0; r < shards.parts(); ++r) {
    const parallel::Range shard = shards.shard(r);
    int64_t peak = 0;
    std::map<int64_t, int64_t> pooled;  // overlapped: unit size -> its largest reduced part
    for (size_t u = 0; u < units.size(); ++u) {
      const int64_t mine =
          std::max<int64_t>(0, std::min(units[u].end, shard.end) - std::max(units[u].begin, shard.begin));
      peak = std::max(peak, (embedding_stays && u == 0 ? 0 : 2 * units[u].size()) + mine);
      pooled[units[u].size()] = std::max(pooled[units[u].size()], mine);
    }
    if (overlap && shards.parts() > 1) {  // one rank takes the blocking path
      int64_t pools = 0;
      for (const auto& [size, reduced] : pooled) pools += 2 * (2 * size + reduced);
      worst = std::max(worst, pools);
      continue;
    }
    worst = std::max(worst, peak + (embedding_stays ? 2 * units.front().size() : 0));
  }
  return worst;
}

// ZeroOptimizer::complete_partial_grads: one packed all-reduce per group of ranks, the packed
// buffer grown to the largest group's (freed first). Gradients summed over tp (split rows; Llama's
// k and v where the kv heads are replicated over tp) or ep once reduced; under a grid, over the
// ranks holding the stream's rows and the branches' rows (one group under 2d and 2.5d, two under
// 3d) and over the copies of a weight block (2.5d's layers, 3d's table).
int64_t packed_partial_grads(const nn::ParamStore& store, int64_t begin, int64_t end, const comm::MeshShape& mesh,
                             bool split_rows) {
  using nn::PartialGrad;
  const auto within = [&](auto pick) { return params_within(store, begin, end, pick); };
  int64_t partial = 0;
  if (mesh.tp_mode != comm::TpMode::d1) {
    const int64_t rows = within([](const nn::ParamSpec& p) { return p.partial == PartialGrad::rows; });
    const int64_t branch = within([](const nn::ParamSpec& p) { return p.partial == PartialGrad::branch_rows; });
    const int64_t replicas = within([](const nn::ParamSpec& p) { return p.partial == PartialGrad::replicas; });
    const bool cube = mesh.tp_mode == comm::TpMode::d3;
    const bool copies = cube || mesh.tp_mode == comm::TpMode::d25;
    partial = std::max(cube ? std::max(rows, branch) : rows + branch, copies ? replicas : 0);
  } else if (split_rows || mesh.tp > 1) {
    partial = within([](const nn::ParamSpec& p) { return p.partial != PartialGrad::complete; });
  }
  if (mesh.ep > 1) partial = within([](const nn::ParamSpec& p) { return !p.expert; });
  return partial;
}

int64_t StageMemory::total() const {
  int64_t t = 0;
  for (const MemoryItem& i : items)
    if (i.category != "host tier") t += i.bytes;
  return t;
}

int64_t StageMemory::category_bytes(const std::string& category) const {
  int64_t t = 0;
  for (const MemoryItem& i : items)
    if (i.category == category) t += i.bytes;
  return t;
}

int64_t StageMemory::state_bytes() const {
  return category_bytes("parameters") + category_bytes("gradients") + category_bytes("optimizer states");
}

int64_t MemoryPlan::peak() const {
  int64_t p = 0;
  for (const StageMemory& s : stages) p = std::max(p, s.total());
  return p;
}

int64_t MemoryPlan::host_tier() const {
  int64_t h = 0;
  for (const StageMemory& s : stages) h = std::max(h, s.host_tier());
  return h;
}

MemoryPlan plan_memory(const GptRun& run) {
  const comm::MeshShape& mesh = run.mesh;
  TESSERA_CHECK(mesh.dp >= 1, "plan_memory: the mesh must be resolved (dp filled in)");
  PlannedLayouts layouts(mesh, run.split_gather);
  std::optional<parallel::PipelineSchedule> schedule;
  if (mesh.pp > 1)
    schedule = parallel::make_schedule(run.pp_schedule, mesh.pp, static_cast<int>(run.micro_batches),
                                       run.virtual_stages);
  MemoryPlan plan;
  for (int s = 0; s < mesh.pp; ++s) plan.stages.push_back(plan_stage(run, s, layouts, schedule));
  return plan;
}

Placement placement_for(GptRun run, int64_t limit) {
  run.offload = "none";
  const auto planned = [&](int64_t k, int64_t chunks) {
    run.host_fraction = static_cast<double>(k) / static_cast<double>(chunks);
    return Placement{run.host_fraction, plan_memory(run)};
  };
  Placement none = planned(0, 1);
  if (none.plan.peak() <= limit) return none;
  Placement fitting = planned(1, 1);  // every chunk on the host tier
  if (fitting.plan.peak() > limit)
    fail("--device-memory-limit ", limit, " bytes: even with every optimizer state on the host tier the plan",
         " needs ", fitting.plan.peak(), " bytes per rank on the device (", fitting.plan.peak() - limit,
         " too many); use ZeRO-3 (with --offload-params), more ranks, activation checkpointing or a smaller",
         " micro-batch (gpt_train --dry-run shows where the bytes go)");
  // Chunks of the largest shard: its two moments, placement_chunk floats each per chunk.
  const int64_t chunk_bytes = 2 * run.placement_chunk * static_cast<int64_t>(sizeof(float));
  const int64_t chunks = std::max<int64_t>(1, (fitting.plan.host_tier() + chunk_bytes - 1) / chunk_bytes);
  int64_t low = 0, high = chunks;  // the plan with `high` chunks fits, with `low` it does not
  while (high - low > 1) {
    const int64_t mid = (low + high) / 2;
    Placement p = planned(mid, chunks);
    if (p.plan.peak() <= limit) {
      high = mid;
      fitting = std::move(p);
    } else {
      low = mid;
    }
  }
  return fitting;
}

std::string describe(const MemoryPlan& plan, const GptRun& run) { return describe(plan, run, run.seq); }

std::string describe(const MemoryPlan& plan, const RunLayout& run, int64_t tokens) {
  std::ostringstream out;
  const nn::Recompute r = run.checkpointing.recompute;
  out << "memory plan per rank (" << run.mesh.str() << ", ZeRO-" << run.zero_stage << ", micro-batch "
      << run.micro_batch << " x " << tokens << " tokens, activation checkpointing "
      << (r == nn::Recompute::forward ? "full" : r == nn::Recompute::attention_core ? "selective" : "none");
  if (run.checkpointing.enabled()) out << " every " << run.checkpointing.every << " block(s)";
  out << ", " << run.precision << ")\n";
  bool approximate = false;
  for (const StageMemory& s : plan.stages) {
    out << "\n" << (plan.stages.size() > 1 ? "pipeline stage " + std::to_string(s.stage) + ": " : "") << s.holds
        << "\n";
    for (const MemoryItem& i : s.items) {
      char line[200];
      std::snprintf(line, sizeof line, "  %-17s %14lld bytes %10s MiB  %s%s\n", i.category.c_str(),
                    static_cast<long long>(i.bytes), mib(i.bytes).c_str(), i.what.c_str(),
                    i.approximate ? " (approximate)" : "");
      out << line;
      approximate |= i.approximate;
    }
    char line[160];
    std::snprintf(line, sizeof line, "  %-17s %14lld bytes %10s MiB  (state %lld bytes)\n", "total",
                  static_cast<long long>(s.total()), mib(s.total()).c_str(), static_cast<long long>(s.state_bytes()));
    out << line;
  }
  out << "\npredicted peak per rank: " << plan.peak() << " bytes (" << mib(plan.peak()) << " MiB)\n";
  const int64_t host = plan.host_tier();
  if (host > 0) out << "host tier per rank (not in the peak): " << host << " bytes (" << mib(host) << " MiB)\n";
  out << "counted: what tessera's tracked allocator holds (tensors); not MPI's, HDF5's or the C++ runtime's own"
         " memory, nor the data set\n";
  if (approximate)
    out << "approximate items are bounds or typical counts: they depend on message timing or on which unit"
           " is gathered at the peak\n";
  return out.str();
}

}  // namespace tessera::plan
