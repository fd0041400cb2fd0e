// Layouts that only say who holds what: rank 0 of groups of a given size (under grid tensor
// parallelism, tp rank 0 of the grid: parallel::GridShards), with no communicator behind them. The memory planner registers a rank's parameters under them (models::Gpt's
// stage_params) to count what that rank would hold, without a mesh; they never run a layer.
#pragma once
#include <optional>

#include "comm/process_mesh.h"
#include "models/model_layout.h"
#include "parallel/tensor_grid.h"

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
  std::optional<parallel::GridShards> grid;  // --tp-mode 2d, 2.5d, 3d: the tensor layout in place of `tensor`
  PlannedLayouts(int tp, bool split_rows, int sp, int ep)
      : tensor(tp, split_rows),
        sequence(sp),
        experts(ep, sp > 1 ? sp : split_rows && tp > 1 ? tp : 1, sp > 1) {}
  // The mesh's layouts (its tp mode's).
  PlannedLayouts(const comm::MeshShape& mesh, bool split_rows) : PlannedLayouts(mesh.tp, split_rows, mesh.sp, mesh.ep) {
    if (mesh.tp_mode != comm::TpMode::d1) grid.emplace(mesh.tp_grid(0));
  }
  PlannedLayouts(const PlannedLayouts&) = delete;
  PlannedLayouts& operator=(const PlannedLayouts&) = delete;
  models::ModelLayout layout(const models::PipelinePlacement& pipeline,
                             const models::ActivationCheckpointing& checkpointing) {
    models::ModelLayout l;
    l.tensor = grid ? static_cast<const nn::TensorLayout*>(&*grid) : &tensor;
    l.sequence = &sequence;
    l.experts = &experts;
    l.pipeline = pipeline;
    l.checkpointing = checkpointing;
    return l;
  }
};

}  // namespace tessera::plan
