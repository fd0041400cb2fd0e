// The ViT's memory plan: a stage's parameters registered as models::Vit registers them (under
// planning layouts), ZeRO's shards of them, the blocks' activation formulas times the micro-batches
// in flight, the patch embedding's and the head's own buffers, grid tp's workspace, and the buffers
// around them.
#include "plan/vit_memory_plan.h"

#include <algorithm>
#include <optional>

#include "plan/gpt_activations.h"
#include "plan/planning_layouts.h"
#include "plan/stage_memory.h"

namespace tessera::plan {
namespace {

constexpr int64_t kBytes = 4;  // fp32 and int32

StageMemory plan_stage(const VitRun& run, int stage, PlannedLayouts& layouts,
                       const std::optional<parallel::PipelineSchedule>& schedule) {
  const comm::MeshShape& mesh = run.mesh;
  const models::VitConfig& vit = run.model;
  const models::PipelinePlacement placement{stage, mesh.pp, run.virtual_stages, run.pp_layers};
  const models::Vit::StageParams params =
      models::Vit::stage_params(vit, layouts.layout(placement, run.checkpointing));
  auto [m, chunks, blocks, first_stage, last_stage, data_ranks, n, shard] =
      start_stage(run, placement, vit.layers, params.store, "patch embedding");
  const int zero = run.zero_stage;
  const nn::ParamStore& store = params.store;

  // The images' shapes on this rank: b images of t tokens (its sp share), of which `patches` are
  // patches (an sp rank without the class token holds t of them: the largest share), c of the
  // residual stream's features (a grid's block of them: C / q; b is then the rank's share of the
  // micro-batch's images).
  const bool grid = mesh.tp_mode != comm::TpMode::d1;
  const int side = grid ? mesh.tp_side() : mesh.tp;
  const int64_t b = run.micro_batch, t = vit.tokens() / mesh.sp, c = vit.hidden / (grid ? side : 1);
  const int64_t pf = vit.patch_features(), patches = mesh.sp > 1 ? t : vit.patches();
  const GptActivationShape shape{vit_blocks(vit), b, vit.tokens(), side, mesh.sp, 1, false, run.ring,
                                 run.checkpointing, grid, mesh.tp_mode == comm::TpMode::d3};

  // Activations: per chunk, the micro-batches in flight; the embedding's chunk keeps its patches.
  const std::vector<int> in_flight =
      schedule ? activations_in_flight(*schedule, stage) : std::vector<int>(chunks.size(), 1);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const models::ModelChunk& ch = chunks[i];
    const std::string where = chunks.size() > 1 ? " of chunk " + std::to_string(i) : "";
    add_item(m, "activations", std::to_string(in_flight[i]) + " micro-batch(es) in flight" + where,
             in_flight[i] * (micro_batch_bytes(shape, ch.first_block, ch.end_block, false) +
                             (ch.embedding ? kBytes * b * patches * pf : 0)));
    if (schedule && schedule->split_backward)
      add_item(m, "activations", "zb: weight-gradient inputs kept until W" + where,
               in_flight[i] * deferred_weight_grad_bytes(shape, ch.first_block, ch.end_block, ch.embedding), true);
  }
  add_item(m, "activations", "checkpointed blocks' recompute buffers", recomputed_bytes(shape, blocks));
  add_item(m, "workspace", "blocks' backward scratch (and sequence-parallel attention's staging)",
           blocks_workspace_bytes(shape, blocks));
  if (first_stage)  // the images (host), every image's patches (sp), the patches' projections
    add_item(m, "workspace", "patch embedding: the images, their patches (sp) and projections",
             kBytes * (b * vit.image * vit.image * vit.channels + (mesh.sp > 1 ? b * vit.patches() * pf : 0) +
                       b * patches * c));
  if (last_stage)  // final norm and statistics, pooled rows and gradient, logits (device, host), losses, lse, labels
    add_item(m, "workspace", "head: final norm, pooled rows, logits, losses, labels",
             kBytes * (b * t * c + 2 * b * t + 2 * b * c + 2 * b * vit.classes + 4 * b));
  // Grid tp: the blocks' linear layers' SUMMA blocks (3d: gathered rows and weights), each split
  // norm's backward sums (the final norm's too); the patch embedding and the head are the stream's
  // own feature block (no grid workspace).
  add_item(m, "workspace", "grid tp: the linears' blocks, the norms' sums",
           grid_workspace_bytes(shape, blocks, false, false, false, 0) + (grid && last_stage ? kBytes * 2 * b * t : 0));

  // Buffers.
  if (zero == 1 || zero == 2) add_item(m, "buffers", "ZeRO: the updated shard, all-gathered", kBytes * shard.size());
  const int64_t held_begin = zero >= 2 ? shard.begin : 0, held_end = zero >= 2 ? shard.end : n;
  add_item(m, "buffers", "partial gradients packed for one all-reduce",
           kBytes * packed_partial_grads(store, held_begin, held_end, mesh, false));
  if (schedule) {
    // A send's copy lives until the message has left: bounded from the schedule, as for the GPTs.
    const int copies = parallel::message_copies_in_flight(*schedule, stage);
    add_item(m, "buffers", "pipeline message copies (at most " + std::to_string(copies) + " in flight)",
             kBytes * copies * b * t * c, true);
  }
  // Mixed precision's operands: an activation and the head's logits (a bound).
  add_mixed_precision(m, run, store, shard, b * t * 4 * c + (last_stage ? b * vit.classes : 0), true);
  if (zero == 3)
    add_item(m, "buffers", "transient: ZeRO-3 units gathered with gradients (the stage's worst rank)",
             kBytes * zero3_gathered(store, params.unit_first_param, data_ranks, first_stage && last_stage,
                                     run.zero3_overlap),
             true);
  return m;
}

}  // namespace

models::GptConfig vit_blocks(const models::VitConfig& vit) {
  models::GptConfig g;
  g.layers = vit.layers;
  g.hidden = vit.hidden;
  g.heads = vit.heads;
  g.ffn_hidden = vit.mlp_ratio * vit.hidden;
  g.max_seq = vit.tokens();
  g.vocab = vit.classes;
  g.tie_embeddings = false;
  return g;
}

MemoryPlan plan_memory(const VitRun& run) {
  const comm::MeshShape& mesh = run.mesh;
  TESSERA_CHECK(mesh.dp >= 1, "plan_memory: the mesh must be resolved (dp filled in)");
  TESSERA_CHECK(mesh.ep == 1, "vit_train: --ep needs mixture-of-experts layers (moe_train has them)");
  PlannedLayouts layouts(mesh, false);
  std::optional<parallel::PipelineSchedule> schedule;
  if (mesh.pp > 1)
    schedule = parallel::make_schedule(run.pp_schedule, mesh.pp, static_cast<int>(run.micro_batches),
                                       run.virtual_stages);
  MemoryPlan plan;
  for (int s = 0; s < mesh.pp; ++s) plan.stages.push_back(plan_stage(run, s, layouts, schedule));
  return plan;
}

std::string describe(const MemoryPlan& plan, const VitRun& run) { return describe(plan, run, run.tokens()); }

}  // namespace tessera::plan
