// The pieces of a pipeline stage's memory plan that every model shares (plan/memory_plan.cpp
// defines them; the GPT and ViT planners assemble their stages from them): the parameters,
// gradients and optimizer states of a flat buffer under ZeRO and offload, mixed precision's buffers,
// the micro-batches a schedule keeps in flight, ZeRO-3's gathered units, the items' bookkeeping, and
// the start every stage's plan shares (start_stage).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "models/model_chunks.h"
#include "nn/param_store.h"
#include "parallel/flat_shards.h"
#include "parallel/pipeline_schedule.h"
#include "plan/memory_plan.h"

namespace tessera::plan {

// Adds an item when it is not empty.
void add_item(StageMemory& m, const char* category, std::string what, int64_t bytes, bool approximate = false);

// Parameters, gradients, optimizer states: ZeroOptimizer::state_bytes() term by term, with the
// largest shard of the flat order (n elements) over the data group.
void add_state(StageMemory& m, int zero, int64_t n, parallel::Range shard, const RunLayout& run);

// The start of a stage's plan, the same for every block model: the chunks the stage runs and their
// blocks, its StageMemory (`holds`: "blocks 0-1, <embedding>, head", the first stage's embedding
// named by the caller) with its parameters, gradients and optimizer states (add_state) over the data
// group (dp x sp ranks) as the flat buffer of `store` shards them.
struct StageStart {
  StageMemory memory;
  std::vector<models::ModelChunk> chunks;
  std::vector<int64_t> blocks;  // every chunk's, in chunk order
  bool first_stage = false, last_stage = false;
  int data_ranks = 1;
  int64_t n = 0;          // elements of the stage's flat buffer
  parallel::Range shard;  // its largest 1/data_ranks shard
};
StageStart start_stage(const RunLayout& run, const models::PipelinePlacement& placement, int64_t layers,
                       const nn::ParamStore& store, const char* embedding);

// Mixed precision (--precision other than fp32): the fp32 master of the held weights rounded in
// place (bf16 without ZeRO-3: only those not rounded on read, optim/mixed_precision.h); under bf16
// the held weights' bf16 copy for the GEMMs (not under ZeRO-3, whose GEMMs read gathered units) and
// the GEMM operands without a copy, rounded into buffers kept for the run: `operands` elements, the
// model's bound (`approximate` when it is one).
void add_mixed_precision(StageMemory& m, const RunLayout& run, const nn::ParamStore& store, parallel::Range shard,
                         int64_t operands, bool approximate);

// Micro-batches each chunk of `stage` holds activations for at once.
std::vector<int> activations_in_flight(const parallel::PipelineSchedule& schedule, int stage);

// ZeRO-3: the most a rank of the stage holds gathered at once (parallel/sharded_params.h), in
// elements; `unit_first_param`: each unit's first parameter in `store`.
int64_t zero3_gathered(const nn::ParamStore& store, const std::vector<int>& unit_first_param, int data_ranks,
                       bool embedding_stays, bool overlap);

// Elements of the largest packed all-reduce of partial gradients (ZeroOptimizer::complete_partial_grads)
// among the held flat range [begin, end) of `store`, under the mesh's tp mode (split_rows: --sp-mode
// split_gather) and ep.
int64_t packed_partial_grads(const nn::ParamStore& store, int64_t begin, int64_t end, const comm::MeshShape& mesh,
                             bool split_rows);

// Elements of the parameters `pick` selects inside the flat range [begin, end).
template <typename Pick>
int64_t params_within(const nn::ParamStore& store, int64_t begin, int64_t end, Pick pick) {
  int64_t n = 0;
  for (const nn::ParamSpec& s : store.specs())
    if (pick(s)) n += std::max<int64_t>(0, std::min(end, s.offset + s.local_shape.numel()) - std::max(begin, s.offset));
  return n;
}

}  // namespace tessera::plan
