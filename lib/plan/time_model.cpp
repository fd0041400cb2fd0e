// The time model: per-op costs of one micro-batch on each pipeline stage, the layout's collectives
// from docs/parallelism.md's tables, the schedule simulated for the bubble, and the step's sum.
#include "plan/time_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_verifier.h"
#include "plan/planning_layouts.h"
#include "plan/vit_memory_plan.h"

namespace tessera::plan {
namespace {

constexpr double kStateBytes = 4;  // bytes per fp32 master value, gradient or optimizer state copied to the host tier
constexpr double kBlockCalls = 12;  // kernels a block's forward calls (norms, GEMMs, attention, adds, activation)

// What one micro-batch costs on one stage, computing and communicating inside the layers.
struct StageCost {
  double forward = 0, backward_input = 0, backward_weight = 0;  // seconds, comm inside the layers included
  double recompute = 0;                                         // inside backward_input
  double comm = 0;                                              // the layers' communication, forward + backward
  double flops = 0;                                             // GEMMs and attention
  int64_t params = 0;                                           // the stage's flat buffer (elements)
  int64_t expert_params = 0;                                    // of which this rank's experts' (moe_train)
  int64_t moe_row_partial = 0;  // split_gather: the MoE routers' and experts' elements, summed over tp
  // Grid tp: the elements whose gradients are summed once per step over the ranks holding the same
  // stream features (rows), branch features (branch_rows) or weight block (replicas).
  int64_t grid_rows = 0, grid_branch_rows = 0, grid_replicas = 0;
  double total() const { return forward + backward_input + backward_weight; }
};

// Where world ranks sit: nodes hold consecutive ranks; the mesh puts tp innermost, then sp, ep, dp, pp.
class RankPlacement {
 public:
  RankPlacement(const comm::MeshShape& mesh, int ranks_per_node) : mesh_(mesh), per_node_(ranks_per_node) {}
  int stride(comm::Axis a) const {
    int s = 1;
    for (comm::Axis inner : {comm::Axis::tp, comm::Axis::sp, comm::Axis::ep, comm::Axis::dp}) {
      if (a == inner) return s;
      s *= size(inner);
    }
    return s;
  }
  int size(comm::Axis a) const { return mesh_.size(a); }
  // Whether a group along `a` (or dp x sp, the data group) spans nodes.
  bool across(comm::Axis a) const { return (size(a) - 1) * stride(a) + 1 > per_node_; }
  bool data_across() const {
    return (mesh_.dp - 1) * stride(comm::Axis::dp) + (mesh_.sp - 1) * stride(comm::Axis::sp) + 1 > per_node_;
  }
  bool pp_across() const { return stride(comm::Axis::pp) + 1 > per_node_; }  // neighbouring stages
  bool world_across() const { return world() > per_node_; }
  int world() const { return mesh_.pp * mesh_.dp * mesh_.ep * mesh_.sp * mesh_.tp; }

 private:
  comm::MeshShape mesh_;
  int per_node_;
};

// The shapes of one micro-batch on one rank.
// Under grid tensor parallelism tp is the grid's side q (it splits heads, features and the
// vocabulary as 1D's tp does), and `features` the residual stream's features on the rank (C/q).
struct Shapes {
  double b, t, c, heads, hd, kv, f, vocab_local, tokens, rows, features;
  int tp, sp;
  bool grid, cube;
  explicit Shapes(const GptRun& run) {
    const models::GptConfig& m = run.model;
    grid = run.mesh.tp_mode != comm::TpMode::d1;
    cube = run.mesh.tp_mode == comm::TpMode::d3;
    tp = grid ? run.mesh.tp_side() : run.mesh.tp;
    sp = run.mesh.sp;
    b = static_cast<double>(run.micro_batch);
    t = static_cast<double>(run.seq);
    c = static_cast<double>(m.hidden);
    heads = static_cast<double>(m.heads);
    hd = c / heads;
    kv = static_cast<double>(m.kv());
    f = static_cast<double>(m.mlp_hidden());
    const int64_t pad = m.pad_vocab_to * tp;
    vocab_local = static_cast<double>((m.vocab + pad - 1) / pad * pad / tp);
    tokens = b * t / sp;                                  // rows inside the tensor-parallel regions
    rows = run.split_gather ? tokens / tp : tokens;       // rows of the residual stream
    features = grid ? c / tp : c;
  }
};

// One stage's micro-batch. `terms`, when given, receives the layers' communication (calls per step:
// per micro-batch times `micro_batches`). `vit`, when given: the run is a ViT's (`run` its blocks as
// a GPT's, plan/vit_memory_plan.h): its attention sees every token (no causal mask), its first
// stage embeds patches (a GEMM) and its last pools each image and classifies it, both replicated
// over 1D tp (no tensor-parallel communication at the edges; sp sums the pooled rows; a grid splits
// them over the stream's features and sums the head's partial logits).
StageCost stage_cost(const GptRun& run, const MachineModel& machine, const RankPlacement& where, int stage,
                     PlannedLayouts& layouts, double wire, bool shared_cores, std::vector<CommTerm>* terms,
                     const models::VitConfig* vit = nullptr) {
  const Shapes s(run);
  const std::string precision = run.precision == "bf16" ? "bf16" : "f32";
  const double micro_batches = static_cast<double>(run.micro_batches);
  StageCost cost;
  double comm_f = 0, comm_b = 0;
  // A collective inside the layers: `calls` per micro-batch in forward and in backward. Broadcasts
  // and reduces (op "broadcast", "reduce": grid tp's SUMMA) are timed as a binomial tree's
  // ceil(log2 size) point-to-point messages of the whole buffer.
  const auto charge = [&](const std::string& what, const std::string& op, int size, bool across, double calls_f,
                          double calls_b, double bytes) {
    if (size <= 1 || calls_f + calls_b == 0) return;
    const bool tree = op == "broadcast" || op == "reduce";
    const double one = tree ? std::ceil(std::log2(size)) * machine.collective("send_recv", 2, across).seconds(bytes)
                            : machine.collective(op, size, across).seconds(bytes);
    comm_f += calls_f * one;
    comm_b += calls_b * one;
    if (terms) {
      const double calls = (calls_f + calls_b) * micro_batches;
      terms->push_back({what, op, size, across, calls, bytes, calls * one, calls * one, true});
    }
  };
  // A product [m, k] x [k, n]: its FLOPs at the calibrated rate (operands in cache), plus its
  // operands' and result's bytes (bf16: 2 a value) read and written once at operand_bytes_per_s (in
  // a step they come from outside the core's caches: a block's weights are read again for every
  // micro-batch).
  double gemm_s = 0, gemm_flops = 0;
  const double element_bytes = precision == "bf16" ? 2 : 4;
  const auto gemm = [&](double m, double n, double k, double times) {
    const double flops = 2 * m * n * k;
    gemm_flops += times * flops;
    gemm_s += times * (flops / machine.gemm_rate(precision, flops) +
                       machine.operand_seconds((m * k + k * n + m * n) * element_bytes));
  };
  const double norm = machine.kernel_seconds("norm"), elem = machine.kernel_seconds("elementwise");
  const int tp = s.tp, sp = s.sp;

  // Which blocks, and whether the embedding and head, are on this stage.
  const models::PipelinePlacement placement{stage, run.mesh.pp, run.virtual_stages, run.pp_layers};
  const models::ModelLayout layout = layouts.layout(placement, run.checkpointing);
  const nn::ParamStore store =
      vit ? models::Vit::stage_params(*vit, layout).store : models::Gpt::stage_params(run.model, layout).store;
  cost.params = store.numel();
  for (const nn::ParamSpec& p : store.specs()) {
    if (p.expert) cost.expert_params += p.local_shape.numel();
    if (p.partial == nn::PartialGrad::rows && (p.expert || p.name.find(".moe.router.") != std::string::npos))
      cost.moe_row_partial += p.local_shape.numel();
    const int64_t n = p.local_shape.numel();
    cost.grid_rows += p.partial == nn::PartialGrad::rows ? n : 0;
    cost.grid_branch_rows += p.partial == nn::PartialGrad::branch_rows ? n : 0;
    cost.grid_replicas += p.partial == nn::PartialGrad::replicas ? n : 0;
  }
  double blocks = 0, moe_blocks = 0, recomputed_full = 0, recomputed_core = 0, sends_f = 0, sends_b = 0;
  bool embedding = false, head = false;
  for (int c = 0; c < placement.chunks; ++c) {
    const int v = placement.virtual_stage(c);
    const auto [first, end] = models::stage_blocks(run.model.layers, placement.virtual_stages(), v, placement.stage_layers);
    for (int64_t i = first; i < end; ++i) {
      blocks += 1;
      moe_blocks += run.model.is_moe_block(i) ? 1 : 0;
      const nn::Recompute r = run.checkpointing.of_block(i);
      recomputed_full += r == nn::Recompute::forward ? 1 : 0;
      recomputed_core += r == nn::Recompute::attention_core ? 1 : 0;
    }
    embedding |= v == 0;
    head |= v == placement.virtual_stages() - 1;
    sends_f += v < placement.virtual_stages() - 1 ? 1 : 0;
    sends_b += v > 0 ? 1 : 0;
  }

  // A block's GEMMs (forward): qkv, attention output, MLP up (llama: gate and up), MLP down; a
  // mixture-of-experts block's router, its experts' MLPs over the rows routed to this rank's experts
  // (top-k of each of the group's rows, balanced over the ep ranks: rows x k) and the shared experts.
  const double dense = blocks - moe_blocks, gated = run.model.llama() ? 2 : 1;
  gemm(s.tokens, (s.heads + 2 * s.kv) * s.hd / tp, s.c, blocks);
  gemm(s.tokens, s.c, s.c / tp, blocks);
  gemm(s.tokens, s.f / tp, s.c, dense * gated);
  gemm(s.tokens, s.c, s.f / tp, dense);
  const nn::MoeConfig& moe = run.model.moe;
  const double routed = moe_blocks > 0 ? s.rows * moe.router.top_k : 0, expert_f = static_cast<double>(moe.hidden);
  const double shared_f = static_cast<double>(moe.shared_experts) * expert_f / tp;
  if (moe_blocks > 0) {
    gemm(s.rows, static_cast<double>(moe.experts), s.c, moe_blocks);
    gemm(routed, expert_f, s.c, moe_blocks * gated);
    gemm(routed, s.c, expert_f, moe_blocks);
    if (shared_f > 0) {
      gemm(s.tokens, shared_f, s.c, moe_blocks * gated);
      gemm(s.tokens, s.c, shared_f, moe_blocks);
    }
  }
  const double block_gemm_s = blocks > 0 ? gemm_s / blocks : 0, block_gemm_flops = blocks > 0 ? gemm_flops / blocks : 0;
  // Causal attention of B sequences, H/tp heads, T/sp queries: 2 T^2 hd FLOPs per head (QK^T and
  // PV over half the square), over sp. Ring: its last rank attends to the most key/value blocks,
  // (2 sp - 1) / sp times the balanced share, and every ring step waits for it; zigzag gives every
  // rank the balanced share at every step (parallel/sequence_attention.h).
  // A ViT's attention (no mask) computes the whole square: twice a causal one's, balanced over a ring.
  double attn_flops = 2 * s.b * s.t * s.t * s.hd * (s.heads / tp) / sp;
  if (vit) attn_flops *= 2;
  else if (run.ring && !run.zigzag && sp > 1) attn_flops *= (2.0 * sp - 1) / sp;
  const double attn_s = attn_flops / machine.attention_flops_per_s;
  // The other kernels: two norms, two residual adds, the activation.
  // Each kernel call also costs a fixed kernel_call_s: a block's forward makes about kBlockCalls.
  // A mixture-of-experts block activates its routed rows' (and shared experts') hidden features
  // instead; averaged over the stage's blocks.
  const double activations = blocks > 0 ? (dense * s.tokens * s.f / tp + moe_blocks * (routed * expert_f + s.tokens * shared_f)) / blocks : 0;
  const double block_elem = 2 * s.rows * s.features * norm + 2 * s.rows * s.features * elem + activations * elem +
                            kBlockCalls * machine.kernel_call_s;
  const double nc = s.tokens * s.c * wire;

  // tp (docs/parallelism.md): 1D all-reduces the attention and MLP outputs forward and the two dx
  // backward; split_gather gathers rows into both regions and reduce-scatters out, backward the
  // gathers again and the dy.
  const bool tp_across = where.across(comm::Axis::tp), sp_across = where.across(comm::Axis::sp);
  // Grid tp (parallel/tensor_grid.h; docs/parallelism.md's grid table): every linear layer
  // communicates itself. 2D/2.5D: SUMMA's q steps broadcast x's block along the grid row and W's
  // along the column (forward); backward broadcasts W's and reduces dx's partial block, broadcasts
  // x's and reduces dW's. 3D: forward all-gathers x's rows and W's pieces and reduce-scatters the
  // product's rows; backward all-gathers dy and W, reduce-scatters dx, all-gathers x, reduce-scatters
  // dW. The split norms all-reduce their row statistics over the feature ranks.
  const int q = s.tp;
  if (s.grid) {
    const bool llama = run.model.llama();
    std::vector<std::pair<double, double>> linears;  // (in, out) of a block's linear layers
    if (llama) {
      const double kv = s.kv * s.hd;
      linears = {{s.c, s.c}, {s.c, kv}, {s.c, kv}, {s.c, s.c}, {s.c, s.f}, {s.c, s.f}, {s.f, s.c}};
    } else {
      linears = {{s.c, 3 * s.c}, {s.c, s.c}, {s.c, s.f}, {s.f, s.c}};
    }
    for (const auto& [in, out] : linears) {
      const double x = s.tokens * in, w = out * in / q;  // values: the input's rows, the weight's share
      if (s.cube) {
        const double y = s.tokens * out, piece = w / q;
        charge("grid tp 3d: the linears' rows of x all-gathered", "all_gather", q, tp_across, blocks, blocks, x * wire);
        // (backward: the weights once, for dx; dW is the pieces' reduce-scatter)
        charge("grid tp 3d: the linears' weights all-gathered", "all_gather", q, tp_across, blocks, blocks, piece * wire);
        charge("grid tp 3d: the linears' output rows reduce-scattered", "reduce_scatter", q, tp_across, blocks, 0, y * wire);
        charge("grid tp 3d: the linears' dy all-gathered", "all_gather", q, tp_across, 0, blocks, y * wire);
        charge("grid tp 3d: the linears' dx reduce-scattered", "reduce_scatter", q, tp_across, 0, blocks, x * wire);
        charge("grid tp 3d: the linears' dW reduce-scattered", "reduce_scatter", q, tp_across, 0, blocks, piece * wire);
      } else {
        charge("grid tp: SUMMA's blocks of x broadcast", "broadcast", q, tp_across, q * blocks, q * blocks, x / q * wire);
        charge("grid tp: SUMMA's weight blocks broadcast", "broadcast", q, tp_across, q * blocks, q * blocks, w / q * wire);
        charge("grid tp: SUMMA's dx blocks reduced", "reduce", q, tp_across, 0, q * blocks, x / q * wire);
        charge("grid tp: SUMMA's dW blocks reduced", "reduce", q, tp_across, 0, q * blocks, w / q * wire);
      }
    }
    // Per norm: forward, LayerNorm's two row statistics (RMSNorm's one), N values each; backward
    // one all-reduce of as many values per row.
    const double sums = llama ? 1 : 2;
    charge("grid tp: each block's norms' row statistics", "all_reduce", q, tp_across, 2 * sums * blocks, 0,
           s.tokens * wire);
    charge("grid tp: each block's norms' backward sums", "all_reduce", q, tp_across, 0, 2 * blocks,
           sums * s.tokens * wire);
  } else if (!run.split_gather) {
    charge("tp: each block's all-reduces", "all_reduce", tp, tp_across, 2 * blocks, 2 * blocks, nc);
  } else {
    charge("tp split_gather: each block's all-gathers", "all_gather", tp, tp_across, 2 * blocks, 4 * blocks, nc);
    charge("tp split_gather: each block's reduce-scatters", "reduce_scatter", tp, tp_across, 2 * blocks, 2 * blocks, nc);
  }
  // sp: all_to_all moves q, k, v into head shards and the output back (backward the reverse); ring
  // passes key/value blocks (2E) up the ring, backward with their dk/dv partial sums (4E): sp - 1
  // of each on the critical path, contiguous (its last rank) and zigzag (every rank) alike.
  const double e = s.b * (s.t / sp) * (s.heads / tp) * s.hd * wire;
  if (!run.ring) {
    charge("sp all_to_all: q, k, v into head shards", "all_to_all", sp, sp_across, blocks, blocks, 3 * e);
    charge("sp all_to_all: the output back", "all_to_all", sp, sp_across, blocks, blocks, e);
  } else {
    charge("sp ring: key/value blocks", "send_recv", sp, sp_across, (sp - 1) * blocks, 0, 2 * e);
    charge("sp ring: blocks with dk/dv partial sums", "send_recv", sp, sp_across, 0, (sp - 1) * blocks, 4 * e);
  }
  // ep: each MoE block dispatches its routed rows to the experts' ranks and combines them back
  // (all-to-all), forward and again backward (their gradients).
  charge("ep: each MoE block's dispatch and combine", "all_to_all", run.mesh.ep, where.across(comm::Axis::ep),
         2 * moe_blocks, 2 * moe_blocks, routed * s.c * wire);
  // The MoE token shards (sp, or tp under split_gather: nn/expert_layout.h): forward, each MoE block
  // all-gathers the routing counts over them (k S E + 1 int32 per rank; S the rank's sequences
  // under sp, else 1) before the ep group's all-gather of their tables. The rows stay on their shard.
  if (moe_blocks > 0) {
    const int shards = sp > 1 ? sp : run.split_gather ? tp : 1;
    const double counts = 4.0 * (moe.router.top_k * (sp > 1 ? s.b : 1) * static_cast<double>(moe.experts) + 1);
    charge("MoE routing counts all-gathered over the token shards", "all_gather", shards,
           sp > 1 ? sp_across : tp_across, moe_blocks, 0, counts);
  }
  // Grid tp's vocabulary regions (parallel/tensor_grid.h): the table's feature blocks all-gathered
  // over the grid column (its vocabulary rows stay split over the q feature ranks) and its gradient
  // reduce-scattered back; the embedding's lookup reduce-scattered to the feature blocks (its dy
  // all-gathered back); the head's input all-gathered (forward and backward) and dx reduce-scattered.
  const auto grid_vocab_comm = [&](const std::string& what, bool head_region) {
    const double table = s.vocab_local * s.c * wire, rows = s.tokens * s.c * wire;
    charge(what + " (table gathered)", "all_gather", q, tp_across, 1, head_region ? 1 : 0, table);
    charge(what + " (table gradient reduce-scattered)", "reduce_scatter", q, tp_across, 0, 1, table);
    if (head_region) {
      charge(what + " (inputs gathered)", "all_gather", q, tp_across, 1, 1, rows);
      charge(what + " (dx reduce-scattered)", "reduce_scatter", q, tp_across, 0, 1, rows);
    } else {
      charge(what + " (lookup reduce-scattered)", "reduce_scatter", q, tp_across, 1, 0, rows);
      charge(what + " (dy gathered)", "all_gather", q, tp_across, 0, 1, rows);
    }
  };
  double loss_s = 0, edge_elem = 0;
  if (vit) {  // under a grid tp, on the rank's block of the stream's features (C/q)
    if (embedding) {  // this rank's patches projected, the class token and positions added
      const double patches = vit->pool == "cls" ? s.tokens - s.b / sp : s.tokens;
      gemm(patches, s.features, static_cast<double>(vit->patch_features()), 1);
      edge_elem += s.rows * s.features * elem;
    }
    if (head) {  // the final norm, the pooled rows (summed over sp), the classifier and its loss
      const double classes = static_cast<double>(vit->classes);
      edge_elem += s.rows * s.features * norm + s.rows * s.features * elem;
      gemm(s.b, classes, s.features, 1);
      loss_s = s.b * classes * machine.kernel_seconds("softmax");
      charge("sp: the pooled rows' all-reduce", "all_reduce", sp, sp_across, 1, 0, s.b * s.c * wire);
      if (s.grid) {  // the feature blocks' partial logits summed; the final norm split like a block's
        charge("grid tp: the head's partial logits all-reduced", "all_reduce", q, tp_across, 1, 0, s.b * classes * wire);
        charge("grid tp: the final norm's row statistics", "all_reduce", q, tp_across, 2, 0, s.tokens * wire);
        charge("grid tp: the final norm's backward sums", "all_reduce", q, tp_across, 0, 1, 2 * s.tokens * wire);
      }
    }
  }
  if (embedding && !vit) {
    edge_elem += s.rows * s.features * elem;
    if (s.grid) grid_vocab_comm("grid tp: the embedding", false);
    else if (!run.split_gather) charge("tp: embedding's all-reduce", "all_reduce", tp, tp_across, 1, 0, nc);
    else charge("tp split_gather: embedding", "reduce_scatter", tp, tp_across, 1, 1, nc);
  }
  if (head && !vit) {
    gemm(s.tokens, s.vocab_local, s.c, 1);  // the logits' vocabulary slice
    edge_elem += s.rows * s.features * norm;  // the final norm
    loss_s = s.tokens * s.vocab_local * machine.kernel_seconds("softmax");
    charge("tp: the loss's row statistics", "all_reduce", tp, tp_across, 3, 0, s.tokens * wire);
    if (s.grid) {
      grid_vocab_comm("grid tp: the head", true);
      const double sums = run.model.llama() ? 1 : 2;  // the final norm's, as a block's
      charge("grid tp: the final norm's row statistics", "all_reduce", tp, tp_across, sums, 0, s.tokens * wire);
      charge("grid tp: the final norm's backward sums", "all_reduce", tp, tp_across, 0, 1, sums * s.tokens * wire);
    } else if (!run.split_gather) charge("tp: the head's dx", "all_reduce", tp, tp_across, 0, 1, nc);
    else charge("tp split_gather: the head", "all_gather", tp, tp_across, 1, 2, nc);
  }
  // ZeRO-3: every unit gathered before its forward and again before its backward. Blocking
  // (--zero3-overlap off), each gather is waited for in full; overlapped, the next unit's gather
  // runs while this one computes, so the first is waited for in full and each later one only where
  // it outlasts a block's compute (backward computes about twice as long as forward). Where ranks
  // share cores (shared_cores) no core is idle to move the gather's bytes while the rank computes:
  // the copies take the CPU from computing ranks, and the gather is waited for in full, overlapped or not.
  const int data = run.mesh.dp * run.mesh.sp;
  if (run.zero_stage == 3 && data > 1) {
    const double units = blocks + (embedding ? 1 : 0) + (head ? 1 : 0);
    const double bytes = static_cast<double>(cost.params) / units * wire;
    if (!run.zero3_overlap || shared_cores) {
      charge("ZeRO-3: each unit gathered before forward and backward", "all_gather", data, where.data_across(), units,
             units, bytes);
    } else {
      const double one = machine.collective("all_gather", data, where.data_across()).seconds(bytes);
      const double unit_fwd = block_gemm_s + attn_s + block_elem;
      const double waited_f = one + (units - 1) * std::max(0.0, one - unit_fwd);
      const double waited_b = one + (units - 1) * std::max(0.0, one - 2 * unit_fwd);
      comm_f += waited_f;
      comm_b += waited_b;
      if (terms)
        terms->push_back({"ZeRO-3: each unit gathered during the one before it (forward and backward)", "all_gather",
                          data, where.data_across(), 2 * units * micro_batches, bytes,
                          2 * units * micro_batches * one, (waited_f + waited_b) * micro_batches, true});
    }
  }
  // The pipeline's messages: the residual stream's rows to the next virtual stage, its gradient back.
  if (run.mesh.pp > 1)
    charge("pp: activations forward, gradients back", "send_recv", 2, where.pp_across(), sends_f, sends_b,
           s.rows * s.features * wire);

  // Backward: the GEMMs twice (input and weight gradients), attention kAttentionBackward times, the
  // other kernels twice; recomputation reruns the checkpointed blocks' forwards first (full: the
  // block with its communication; selective: the attention core).
  const double fwd_gemm = gemm_s, elem_s = blocks * block_elem + edge_elem;
  const double block_fwd = block_gemm_s + attn_s + block_elem + (blocks > 0 ? comm_f / blocks : 0);
  cost.recompute = recomputed_full * block_fwd + recomputed_core * attn_s;
  cost.comm = comm_f + comm_b;
  cost.forward = fwd_gemm + blocks * attn_s + elem_s + loss_s + comm_f;
  cost.backward_weight = fwd_gemm;
  cost.backward_input = fwd_gemm + kAttentionBackward * blocks * attn_s + 2 * elem_s + 2 * loss_s + comm_b + cost.recompute;
  cost.flops = 3 * gemm_flops + (1 + kAttentionBackward) * blocks * attn_flops +
               recomputed_full * (block_gemm_flops + attn_flops) + recomputed_core * attn_flops;
  return cost;
}

std::string ms(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f ms", s * 1e3);
  return text;
}

}  // namespace

double StepTime::comm_exposed() const {
  double e = 0;
  for (const CommTerm& t : comm) e += t.exposed;
  return e;
}

namespace {

// The step of a GPT, or of a ViT (`vit`, with `run` its blocks as a GPT's).
StepTime predict(const GptRun& run, const MachineModel& machine, int ranks_per_node, double wire_bytes,
                 const models::VitConfig* vit) {
  TESSERA_CHECK(run.mesh.dp >= 1 && ranks_per_node >= 1, "predict_step: the mesh must be resolved");
  TESSERA_CHECK(wire_bytes > 0, "predict_step: wire_bytes must be positive, got ", wire_bytes);
  const double wire = wire_bytes;  // bytes per activation or gradient value on the wire
  const RankPlacement where(run.mesh, ranks_per_node);
  PlannedLayouts layouts(run.mesh, run.split_gather);
  const int pp = run.mesh.pp;
  const double m = static_cast<double>(run.micro_batches);
  // Ranks sharing cores (more threads on a node than cores: oversubscribed): see predict_step's
  // declaration. The calibration measured every rate with all its ranks busy at once, so each stage's
  // times below are those of a node where every rank computes.
  const double over = machine.oversubscription(ranks_per_node);
  const bool shared_cores = over > 1;
  // The share of the node's ranks wanting the cores at once (a pipeline's bubble lowers it, below).
  double computing_share = 1;
  // Each stage's micro-batch; the slowest sets the pipeline's pace, and its terms are the ones reported.
  std::vector<StageCost> stages;
  int slowest = 0;
  for (int s = 0; s < pp; ++s) {
    stages.push_back(stage_cost(run, machine, where, s, layouts, wire, shared_cores, nullptr, vit));
    if (stages.back().total() > stages[slowest].total()) slowest = s;
  }
  StepTime t;
  for (const StageCost& c : stages) {
    t.stage_forward_s.push_back(c.forward);
    t.stage_backward_s.push_back(c.backward_input + c.backward_weight);
  }
  const StageCost slow = stage_cost(run, machine, where, slowest, layouts, wire, shared_cores, &t.comm, vit);
  t.forward_s = slow.forward;
  t.backward_s = slow.backward_input + slow.backward_weight;
  t.recompute_s = m * slow.recompute;
  t.flops = m * slow.flops;
  const double per_mb = slow.total();
  t.compute_s = m * (per_mb - slow.comm);
  if (pp == 1) {
    t.pipeline_s = m * per_mb;
  } else {
    // The schedule in the verifier with each stage's times, per chunk, in integer units of 1/3000
    // of the slowest stage's micro-batch chunk (the rounding stays below 0.1%).
    const parallel::PipelineSchedule schedule =
        parallel::make_schedule(run.pp_schedule, pp, static_cast<int>(run.micro_batches), run.virtual_stages);
    const double unit = per_mb / schedule.chunks / 3000.0;
    const auto units = [&](double seconds) {
      return std::max(0, static_cast<int>(std::lround(seconds / schedule.chunks / unit)));
    };
    std::vector<parallel::StepCosts> costs;
    for (const StageCost& stage : stages) {
      parallel::StepCosts c;
      c.forward = std::max(1, units(stage.forward));
      // Where ranks share cores, a waiting rank's share already goes to the ranks that compute:
      // zero-bubble's deferred weight gradients fill no bubble there, they compete with the critical
      // path, so the backward counts whole (campaigns measured zb 1.16-1.32x its split prediction).
      if (schedule.split_backward && !shared_cores) {
        c.backward_input = std::max(1, units(stage.backward_input));
        c.backward_weight = std::max(1, units(stage.backward_weight));
      } else {  // a whole backward costs backward_input + backward_weight
        c.backward_input = std::max(1, units(stage.backward_input + stage.backward_weight));
        c.backward_weight = 0;
      }
      costs.push_back(c);
    }
    const parallel::PipelineReport report = parallel::verify_schedule(schedule, costs);
    TESSERA_CHECK(report.ok(), "predict_step: the ", run.pp_schedule, " schedule does not verify");
    t.pipeline_s = static_cast<double>(report.makespan) * unit;
    if (shared_cores) {
      // Ranks share cores: a stage idling in the bubble leaves (1 - waiting_rank_share) of its
      // share of the cores to the stages that compute, which then run faster than the all-busy
      // rates the stage times assume. The schedule keeps a fraction `busy` of the stages' time
      // slots busy, so about (busy + w (1 - busy)) x ranks want the cores at once; each computing
      // rank gets min(1, cores / that) of one, against 1 / over in the all-busy rates. The makespan
      // rescales by max(busy + w (1 - busy), 1 / over): the node's cores divided among the
      // computing and the waiting ranks, or the schedule's chain at a core per rank (1 / over).
      double work = 0;
      for (const StageCost& stage : stages) work += m * stage.total();
      const double busy = std::min(1.0, work / (pp * t.pipeline_s));
      const double w = machine.waiting_rank_share;
      computing_share = std::max(busy + w * (1 - busy), 1.0 / over);
      t.pipeline_s *= computing_share;
    }
  }
  t.oversubscription = over;
  t.waiting_rank_share = machine.waiting_rank_share;
  t.bubble_s = std::max(0.0, t.pipeline_s - m * per_mb);

  // Per step, outside the layers: the gradient reduction over the data group dp x sp, ZeRO-1/2's
  // gather of the updated shards, the gradient norm, the tied table's gradient across the pipeline.
  const int data = run.mesh.dp * run.mesh.sp;
  const double grad_bytes = static_cast<double>(slow.params) * wire;
  const auto add = [&](const std::string& what, const std::string& op, int size, bool across, double bytes) -> CommTerm* {
    if (size <= 1 || bytes <= 0) return nullptr;
    const double sec = machine.collective(op, size, across).seconds(bytes);
    t.comm.push_back({what, op, size, across, 1, bytes, sec, sec, false});
    return &t.comm.back();
  };
  if (CommTerm* g = add(run.zero_stage >= 2 ? "dp: gradients reduce-scattered" : "dp: gradients all-reduced",
                        run.zero_stage >= 2 ? "reduce_scatter" : "all_reduce", data, where.data_across(), grad_bytes)) {
    // Buckets (--bucket-mb 25) overlap the last micro-batch's backward; the last bucket cannot.
    // Where ranks share cores nothing overlaps: the reduction's copies take the CPU from backward.
    const double bucket = std::min(1.0, 25.0 * (1 << 20) / std::max(1.0, grad_bytes));
    g->exposed = shared_cores ? g->seconds : std::max(g->seconds * bucket, g->seconds - t.backward_s);
  }
  // Mixture of experts: the experts' gradients are whole over the ep group; every other parameter's
  // covers this rank's tokens only and is summed over ep too (nn/moe.h), after the data group's.
  const double shared_bytes = static_cast<double>(slow.params - slow.expert_params) * wire;
  if (CommTerm* g = add("ep: the non-expert gradients all-reduced", "all_reduce", run.mesh.ep,
                        where.across(comm::Axis::ep), shared_bytes))
    g->exposed = shared_cores ? g->seconds
                              : std::max(g->seconds * std::min(1.0, 25.0 * (1 << 20) / std::max(1.0, shared_bytes)),
                                         g->seconds - t.backward_s);
  // split_gather: each tp rank routed its share of the rows, so the MoE routers' and experts'
  // gradients are summed over tp (PartialGrad::rows), as the layer norms' are.
  add("tp split_gather: the MoE routers' and experts' gradients all-reduced", "all_reduce",
      run.split_gather && slow.moe_row_partial > 0 ? run.mesh.tp : 1, where.across(comm::Axis::tp),
      static_cast<double>(slow.moe_row_partial) * wire);
  // Grid tp (ZeroOptimizer::complete_partial_grads): the gradients of vectors summed over the ranks
  // sharing their features (2d, 2.5d: the grid's rows and layers, one all-reduce; 3d: the stream's
  // over its rows and columns, the branches' over its rows and layers), of copied weight blocks over
  // the copies (2.5d's layers; 3d's token table over the rows). Of the held shard under ZeRO-2/3.
  if (run.mesh.tp_mode != comm::TpMode::d1) {
    const comm::TpGrid grid = run.mesh.tp_grid(0);
    const bool cube = grid.cube, tp_across = where.across(comm::Axis::tp);
    const double held = run.zero_stage >= 2 ? 1.0 / data : 1.0;
    const int rows_group = cube ? grid.q * grid.q : grid.batch_parts();
    if (cube) {
      add("grid tp: the stream's vectors' gradients summed", "all_reduce", rows_group, tp_across,
          std::ceil(held * static_cast<double>(slow.grid_rows)) * wire);
      add("grid tp: the branches' vectors' gradients summed", "all_reduce", grid.batch_parts(), tp_across,
          std::ceil(held * static_cast<double>(slow.grid_branch_rows)) * wire);
    } else {
      add("grid tp: the vectors' gradients summed", "all_reduce", rows_group, tp_across,
          std::ceil(held * static_cast<double>(slow.grid_rows + slow.grid_branch_rows)) * wire);
    }
    add("grid tp: copied weight blocks' gradients summed", "all_reduce", cube ? grid.q : grid.depth, tp_across,
        std::ceil(held * static_cast<double>(slow.grid_replicas)) * wire);
  }
  if (run.zero_stage == 1 || run.zero_stage == 2)
    add("dp: updated shards all-gathered", "all_gather", data, where.data_across(), grad_bytes);
  add("the gradient norm", "all_reduce", where.world(), where.world_across(), 8);
  if (pp > 1 && run.model.tie_embeddings)
    add("pp: the tied token table's gradient (first and last stage)", "all_reduce", 2, where.across(comm::Axis::pp),
        Shapes(run).vocab_local * static_cast<double>(run.model.hidden) * wire);

  // The update: AdamW over the rank's (shard of the) parameters; offloaded states cross to the
  // host tier and back (the gradient out, the parameters back), as do ZeRO-3's offloaded shards.
  const double updated = run.zero_stage >= 1 ? std::ceil(static_cast<double>(slow.params) / data)
                                             : static_cast<double>(slow.params);
  t.optimizer_s = updated * machine.kernel_seconds("adamw");
  const double host_share = run.offload == "cpu" ? 1.0 : run.offload == "none" ? run.host_fraction : 0.0;
  t.optimizer_s += host_share * updated * 2 * kStateBytes / machine.copy_bytes_per_s;
  if (run.offload_params) t.optimizer_s += updated * 2 * kStateBytes / machine.copy_bytes_per_s;

  double outside = 0;
  int step_end_calls = 0;
  for (const CommTerm& c : t.comm)
    if (!c.in_layers) {
      outside += c.exposed;
      ++step_end_calls;
    }
  // Where ranks share cores the step waits at its first collective for the rank the scheduler
  // served least, and each step-end collective for its members to be scheduled again. The lag is
  // the uneven service of ranks computing on one core at once: calibrated with all `over` of them,
  // none with one (a pipeline whose stages take turns, one rank per core computing), linear between.
  if (shared_cores) {
    const double lag_share = std::clamp((over * computing_share - 1) / (over - 1), 0.0, 1.0);
    t.sync_s = lag_share * machine.sync_lag_s + step_end_calls * machine.sync_wake_s;
  }
  t.step_s = t.pipeline_s + t.optimizer_s + outside + t.sync_s;
  const double tokens =
      static_cast<double>(run.micro_batch) * m * run.mesh.dp * run.mesh.ep * run.mesh.tp_batch_parts() * run.seq;
  t.tokens_per_s = tokens / t.step_s;
  return t;
}

}  // namespace

StepTime predict_step(const GptRun& run, const MachineModel& machine, int ranks_per_node, double wire_bytes) {
  return predict(run, machine, ranks_per_node, wire_bytes, nullptr);
}

StepTime predict_step(const VitRun& run, const MachineModel& machine, int ranks_per_node, double wire_bytes) {
  GptRun blocks;
  static_cast<RunLayout&>(blocks) = run;
  blocks.model = vit_blocks(run.model);
  blocks.seq = run.tokens();
  return predict(blocks, machine, ranks_per_node, wire_bytes, &run.model);
}

double megatron_model_flops(const GptRun& run) {
  const models::GptConfig& m = run.model;
  const double batch = static_cast<double>(run.micro_batch) * static_cast<double>(run.micro_batches) * run.mesh.dp *
                       run.mesh.ep * run.mesh.tp_batch_parts();
  const double s = static_cast<double>(run.seq), h = static_cast<double>(m.hidden), l = static_cast<double>(m.layers);
  const double v = static_cast<double>(m.vocab);
  // Full checkpointing reruns every block's forward once more; selective or every k-th block is
  // not the paper's count, and counts the three passes only.
  bool all_recomputed = l > 0;
  for (int64_t i = 0; i < m.layers; ++i) all_recomputed &= run.checkpointing.of_block(i) == nn::Recompute::forward;
  const double passes = all_recomputed ? 4 : 3;
  return 24 * passes * batch * s * l * h * h * (1 + s / (6 * h)) + 6 * batch * s * h * v;
}

std::string describe(const StepTime& t) {
  std::ostringstream out;
  out << "predicted step: " << ms(t.step_s) << " (" << static_cast<int64_t>(std::llround(t.tokens_per_s))
      << " tokens/s)\n";
  out << "  compute: " << ms(t.compute_s) << " on the slowest stage, all micro-batches";
  if (t.recompute_s > 0) out << " (recompute " << ms(t.recompute_s) << ")";
  out << "\n  per micro-batch: forward " << ms(t.forward_s) << ", backward " << ms(t.backward_s)
      << " (the layers' communication included)\n";
  out << "  pipeline: " << ms(t.pipeline_s) << ", of which bubble " << ms(t.bubble_s) << "\n";
  if (t.stage_forward_s.size() > 1) {
    out << "  per stage and micro-batch (forward + backward):";
    for (size_t s = 0; s < t.stage_forward_s.size(); ++s) out << " " << ms(t.stage_forward_s[s] + t.stage_backward_s[s]);
    out << "\n";
  }
  out << "  optimizer: " << ms(t.optimizer_s) << "\n";
  if (t.oversubscription > 1) {
    char line[240];
    std::snprintf(line, sizeof line,
                  "  ranks share cores (%.2f threads per core): no communication overlaps compute; the bubble is"
                  " filled by the stages that compute, less the %.0f%% of a core a waiting rank keeps\n",
                  t.oversubscription, 100 * t.waiting_rank_share);
    out << line;
    if (t.sync_s > 0) out << "  step-end synchronisation (the slowest rank's lag, the collectives' wake-ups): " << ms(t.sync_s) << "\n";
  }
  for (const CommTerm& c : t.comm) {
    char line[320];
    std::snprintf(line, sizeof line, "  comm: %s: %s x %g of %.0f bytes over %d ranks%s: %s%s\n", c.what.c_str(),
                  c.op.c_str(), c.calls, c.bytes, c.group, c.across_nodes ? " across nodes" : "", ms(c.seconds).c_str(),
                  c.in_layers ? " (inside forward/backward)" : (", exposed " + ms(c.exposed)).c_str());
    out << line;
  }
  char line[128];
  std::snprintf(line, sizeof line, "  FLOPs per step on the slowest stage's rank: %.6g\n", t.flops);
  out << line;
  return out.str();
}

}  // namespace tessera::plan
