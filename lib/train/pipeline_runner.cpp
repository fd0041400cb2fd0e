// PipelineRunner: one stage's program, instruction by instruction.
#include "train/pipeline_runner.h"

#include <algorithm>

#include "core/timer.h"
#include "parallel/pipeline_verifier.h"

namespace tessera::train {

using parallel::PipelineInstruction;
using parallel::PipelineOp;

PipelineRunner::PipelineRunner(PipelineStage& stage, comm::Communicator& pp, parallel::PipelineSchedule schedule)
    : stage_(stage), pp_(pp), schedule_(std::move(schedule)), program_(schedule_.programs.at(pp.rank())) {
  TESSERA_CHECK(schedule_.stages == pp.size(), "pipeline schedule for ", schedule_.stages, " stages on ", pp.size());
  TESSERA_CHECK(schedule_.chunks == stage.chunks(), "pipeline schedule with ", schedule_.chunks,
                " chunks per stage for a stage of ", stage.chunks());
  TESSERA_CHECK(2 * schedule_.chunks * schedule_.micro_batches < 32000, "pipeline: ", schedule_.micro_batches,
                " micro-batches x ", schedule_.chunks, " chunks exceed the message tags MPI guarantees");
  parallel::check_schedule(schedule_);
  copies_bound_ = parallel::message_copies_in_flight(schedule_, pp.rank());
}

int PipelineRunner::tag(const Key& k) const {
  return 1 + k.direction + 2 * (k.chunk + schedule_.chunks * k.micro);
}

int PipelineRunner::peer_rank(const PipelineInstruction& in) const {
  return parallel::peer(schedule_, pp_.rank(), in)->stage;
}

// A received message's key names the receiving chunk; a sent one's the peer's.
void PipelineRunner::post_receive(const PipelineInstruction& in) {
  const bool forward = in.op == PipelineOp::recv_fwd;
  const Key key{forward ? 0 : 1, in.micro_batch, in.chunk};
  if (receives_.count(key)) return;
  Tensor& into = forward ? stage_.chunk_input(in.chunk, in.micro_batch) : stage_.chunk_grad(in.chunk, in.micro_batch);
  receives_.emplace(key, pp_.irecv(into, peer_rank(in), tag(key)));
}

void PipelineRunner::send(const PipelineInstruction& in) {
  const bool forward = in.op == PipelineOp::send_fwd;
  const parallel::StageChunk to = *parallel::peer(schedule_, pp_.rank(), in);
  const Key key{forward ? 0 : 1, in.micro_batch, to.chunk};
  const Tensor& from = forward ? stage_.chunk_output(in.chunk, in.micro_batch)
                               : stage_.chunk_grad(in.chunk, in.micro_batch);
  // A copy, so the micro-batch's buffers can be recycled before the message has left.
  // The schedule bounds the copies in flight: all are made at the first send (one more only where
  // a send the bound counts as complete has not reported so yet), so later steps allocate nothing.
  if (spare_buffers_.empty() || spare_buffers_.back().numel() != from.numel()) {
    const int more = std::max(1, copies_bound_ - copies_made_);
    for (int k = 0; k < more; ++k) spare_buffers_.push_back(Tensor::empty(from.shape()));
    copies_made_ += more;
  }
  Tensor buffer = std::move(spare_buffers_.back());
  spare_buffers_.pop_back();
  buffer.copy_from(from);
  sends_.push_back({pp_.isend(buffer, to.stage, tag(key)), buffer});
}

void PipelineRunner::reap_sends(bool all) {
  for (size_t i = 0; i < sends_.size();) {
    if (all) sends_[i].handle.wait();
    if (all || sends_[i].handle.test()) {
      spare_buffers_.push_back(std::move(sends_[i].buffer));
      sends_.erase(sends_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

double PipelineRunner::train_step(int64_t step, float grad_scale, parallel::GradSync* sync) {
  const int last_micro = schedule_.micro_batches - 1;
  const std::string where = "step " + std::to_string(step) + ", pipeline stage " + std::to_string(pp_.rank()) + ": ";
  double loss = 0.0;
  // Posts the receive of the first receiving instruction after i, so it arrives during compute.
  auto post_next_receive = [&](size_t i) {
    const size_t j = parallel::next_receive(program_, i);
    if (j < program_.size()) post_receive(program_[j]);
  };
  for (size_t i = 0; i < program_.size(); ++i) {
    const PipelineInstruction& in = program_[i];
    pp_.set_context(where + schedule_.describe(in));
    parallel::GradSync* final_sync = in.micro_batch == last_micro ? sync : nullptr;
    const double t0 = trace_ ? trace_->now() : 0.0;
    switch (in.op) {
      case PipelineOp::recv_fwd:
      case PipelineOp::recv_bwd: {
        post_receive(in);
        const Key key{in.op == PipelineOp::recv_fwd ? 0 : 1, in.micro_batch, in.chunk};
        auto it = receives_.find(key);
        it->second.wait();
        receives_.erase(it);
        break;
      }
      case PipelineOp::send_fwd:
      case PipelineOp::send_bwd:
        send(in);
        break;
      case PipelineOp::forward:
        post_next_receive(i);
        loss += stage_.forward(step, in.chunk, in.micro_batch, grad_scale, final_sync);
        break;
      case PipelineOp::backward:
        post_next_receive(i);
        if (schedule_.split_backward) {
          stage_.backward_input(in.chunk, in.micro_batch);
        } else {
          stage_.backward(in.chunk, in.micro_batch, final_sync);
        }
        break;
      case PipelineOp::backward_w:
        post_next_receive(i);
        stage_.backward_weights(in.chunk, in.micro_batch, final_sync);
        break;
    }
    if (trace_) trace_->add(schedule_.describe(in), parallel::is_compute(in.op) ? "compute" : "comm", t0, trace_->now());
    // A micro-batch's activations are free after its last step on this stage.
    if (parallel::releases_activations(schedule_, program_, i)) stage_.release(in.chunk, in.micro_batch);
    reap_sends(false);
  }
  reap_sends(true);
  TESSERA_CHECK(receives_.empty(), "pipeline stage ", pp_.rank(), ": step ", step, " ended with receives pending");
  return loss;
}

double PipelineRunner::evaluate(int64_t batches) {
  const int stage = pp_.rank(), p = schedule_.stages, chunks = schedule_.chunks;
  double loss = 0.0;
  // Blocking messages in batch order: MPI keeps the order between two ranks on one tag, so the
  // tag names only the receiving chunk and any number of batches fits.
  for (int64_t b = 0; b < batches; ++b)
    for (int c = 0; c < chunks; ++c) {
      const int v = c * p + stage, last = p * chunks - 1;
      const int micro = static_cast<int>(b);
      pp_.set_context("evaluation, pipeline stage " + std::to_string(stage) + ", micro-batch " + std::to_string(b));
      if (v > 0) pp_.recv(stage_.chunk_input(c, micro), (v - 1) % p, tag({0, 0, c}));
      loss += stage_.evaluate(b, c);
      if (v < last) pp_.send(stage_.chunk_output(c, micro), (v + 1) % p, tag({0, 0, (v + 1) / p}));
      stage_.release(c, micro);
    }
  return pp_.all_reduce_sum(loss);
}

}  // namespace tessera::train
