// TiedWeights: a parameter that two pipeline stages use, held (trained, checkpointed) by the
// first and mirrored on the last: GPT's token table, which the last stage's LM head reads.
// Communication per step, over the pipeline group between the first and last stage's ranks of
// the same data and tensor coordinates: the mirror's gradient (all-reduced over the data group
// first) goes to the first stage, which adds it to its reduced gradients before the norm and the
// update; the updated table comes back after the optimizer step. 2 x the table's local bytes.
#pragma once
#include "comm/communicator.h"
#include "nn/param_store.h"
#include "parallel/param_units.h"

namespace tessera::parallel {

class TiedWeights {
 public:
  // On the first stage: store and param (its id), units/unit to gather it under ZeRO-3; mirror
  // null. On the last: mirror and param (the id in the mirror). Other stages: neither (no-ops).
  TiedWeights(nn::ParamStore* store, ParamUnits* units, size_t unit, nn::ParamStore* mirror, int param,
              comm::Communicator& pp, comm::Communicator& data);

  void zero_mirror_grad();
  // After the data-parallel reduction: held (from flat offset begin) are the reduced gradients
  // the first stage's rank holds (all, or its ZeRO-2/3 shard).
  void add_mirror_grads(Tensor held, int64_t begin);
  // After the optimizer step.
  void copy_to_mirror();
  Tensor mirror_values() { return last() ? mirror_->value(param_) : Tensor(); }  // undefined off the last stage
  nn::ParamStore* mirror_store() { return mirror_; }                              // null off the last stage

 private:
  bool first() const { return store_ != nullptr; }
  bool last() const { return mirror_ != nullptr; }

  nn::ParamStore* store_;
  ParamUnits* units_;
  size_t unit_;
  nn::ParamStore* mirror_;
  int param_;
  comm::Communicator& pp_;
  comm::Communicator& data_;
  Tensor buffer_;  // the table's local size, on the host
};

}  // namespace tessera::parallel
