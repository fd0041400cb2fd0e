// PipelineRunner: executes this stage's program of a verified pipeline schedule
// (parallel/pipeline_schedule.h) on a PipelineStage. Activations go forward and their gradients
// back over the pipeline group with non-blocking point-to-point messages: each receive is posted
// one compute step ahead of the instruction that needs it (so it arrives while the stage
// computes), each send returns at once and completes in the background (its buffer is a copy for
// gradients, so the micro-batch's activations can be recycled right away). Messages are tagged by
// (direction, micro-batch, chunk), so any order of arrival is matched correctly.
// Per micro-batch and chunk boundary: one message of B x T x C floats forward and one back.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/pipeline_schedule.h"
#include "train/pipeline_stage.h"
#include "train/run_trace.h"

namespace tessera::train {

class PipelineRunner {
 public:
  // The schedule is checked (verify_schedule) here: a program that could deadlock or misroute a
  // message is refused with its reason before any message is sent.
  PipelineRunner(PipelineStage& stage, comm::Communicator& pp, parallel::PipelineSchedule schedule);

  const parallel::PipelineSchedule& schedule() const { return schedule_; }
  // One step's micro-batches through this stage's program; returns the sum of this rank's
  // micro-batch losses (non-zero on the last stage only). Gradients are final (and, with a
  // GradSync, reducing) when it returns.
  double train_step(int64_t step, float grad_scale, parallel::GradSync* sync);
  // `batches` validation micro-batches forward through every stage; returns the sum of their
  // losses on every rank of the pipeline group.
  double evaluate(int64_t batches);
  void set_trace(RunTrace* trace) { trace_ = trace; }

 private:
  struct Key {
    int direction, micro, chunk;  // direction 0: activation, 1: gradient
    bool operator<(const Key& o) const {
      return std::tie(direction, micro, chunk) < std::tie(o.direction, o.micro, o.chunk);
    }
  };
  int tag(const Key& k) const;
  int peer_rank(const parallel::PipelineInstruction& in) const;
  void post_receive(const parallel::PipelineInstruction& in);
  void send(const parallel::PipelineInstruction& in);
  void reap_sends(bool all);  // completes finished sends (all: waits for every one)

  PipelineStage& stage_;
  comm::Communicator& pp_;
  parallel::PipelineSchedule schedule_;
  const std::vector<parallel::PipelineInstruction>& program_;
  std::map<Key, comm::CommHandle> receives_;
  struct Outgoing {
    comm::CommHandle handle;
    Tensor buffer;
  };
  std::vector<Outgoing> sends_;
  std::vector<Tensor> spare_buffers_;  // completed sends' buffers, for reuse
  int copies_bound_ = 0;  // parallel::message_copies_in_flight for this stage
  int copies_made_ = 0;
  RunTrace* trace_ = nullptr;
};

}  // namespace tessera::train
