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
  explicit PlannedExpertLayout(int size) : size_(size) {}
  int size() const override { return size_; }

 private:
  int size_;
};

// The three, and a ModelLayout pointing at them (for pipeline stage `stage`); keep it in place.
struct PlannedLayouts {
  PlannedTensorLayout tensor;
  PlannedSequenceLayout sequence;
  PlannedExpertLayout experts;
  PlannedLayouts(int tp, bool split_rows, int sp, int ep) : tensor(tp, split_rows), sequence(sp), experts(ep) {}
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
