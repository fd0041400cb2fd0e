// Layouts that only say who holds what: rank 0 of groups of a given size, with no communicator
// behind them. The memory planner registers a rank's parameters under them (models::Gpt's
// stage_params) to count what that rank would hold, without a mesh; they never run a layer.
#pragma once
#include "models/model_layout.h"

namespace tessera::plan {

class PlannedTensorLayout final : public nn::TensorLayout {
 public:
  PlannedTensorLayout(int size, bool split_rows) : size_(size), split_rows_(split_rows && size > 1) {}
  int size() const override { return size_; }
  bool splits_rows() const override { return split_rows_; }

 private:
  int size_;
  bool split_rows_;
};

class PlannedSequenceLayout final : public nn::SequenceLayout {
 public:
  explicit PlannedSequenceLayout(int size) : size_(size) {}
  int size() const override { return size_; }

 private:
  int size_;
};

class PlannedExpertLayout final : public nn::ExpertLayout {
 public:
  // shards: the token shards (sp, or tp under split_gather: nn/expert_layout.h).
  PlannedExpertLayout(int size, int shards, bool each_sequence)
      : size_(size), shards_(shards), each_sequence_(each_sequence && shards > 1) {}
  int size() const override { return size_; }
  int shard_size() const override { return shards_; }
  bool shards_each_sequence() const override { return each_sequence_; }

 private:
  int size_, shards_;
  bool each_sequence_;
};

// The three, and a ModelLayout pointing at them (for pipeline stage `stage`); keep it in place.
struct PlannedLayouts {
  PlannedTensorLayout tensor;
  PlannedSequenceLayout sequence;
  PlannedExpertLayout experts;
  PlannedLayouts(int tp, bool split_rows, int sp, int ep)
      : tensor(tp, split_rows),
        sequence(sp),
        experts(ep, sp > 1 ? sp : split_rows && tp > 1 ? tp : 1, sp > 1) {}
  PlannedLayouts(const PlannedLayouts&) = delete;
  PlannedLayouts& operator=(const PlannedLayouts&) = delete;
  models::ModelLayout layout(const models::PipelinePlacement& pipeline,
                             const models::ActivationCheckpointing& checkpointing) {
    models::ModelLayout l;
    l.tensor = &tensor;
    l.sequence = &sequence;
    l.experts = &experts;
    l.pipeline = pipeline;
    l.checkpointing = checkpointing;
    return l;
  }
};

}  // namespace tessera::plan
