// The pieces of a pipeline stage's memory plan that every model shares (plan/memory_plan.cpp
// defines them; the GPT and ViT planners assemble their stages from them): the parameters,
// gradients and optimizer states of a flat buffer under ZeRO and offload, the micro-batches a
// schedule keeps in flight, ZeRO-3's gathered units, and the items' bookkeeping.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

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

// Micro-batches each chunk of `stage` holds activations for at once.
std::vector<int> activations_in_flight(const parallel::PipelineSchedule& schedule, int stage);

// ZeRO-3: the most a rank of the stage holds gathered at once (parallel/sharded_params.h), in
// elements; `unit_first_param`: each unit's first parameter in `store`.
int64_t zero3_gathered(const nn::ParamStore& store, const std::vector<int>& unit_first_param, int data_ranks,
                       bool embedding_stays, bool overlap);

// Elements of the parameters `pick` selects inside the flat range [begin, end).
template <typename Pick>
int64_t params_within(const nn::ParamStore& store, int64_t begin, int64_t end, Pick pick) {
  int64_t n = 0;
  for (const nn::ParamSpec& s : store.specs())
    if (pick(s)) n += std::max<int64_t>(0, std::min(end, s.offset + s.local_shape.numel()) - std::max(begin, s.offset));
  return n;
}

}  // namespace tessera::plan
