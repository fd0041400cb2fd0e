// PipelineStage: what a workload provides to run as one stage of a pipeline: its model chunks'
// forward and backward per micro-batch, and the activation buffers the runner
// (train/pipeline_runner.h) receives into and sends from. Each (chunk, micro-batch) in flight has
// its own buffers until release().
#pragma once
#include "core/tensor.h"
#include "parallel/grad_sync.h"

namespace tessera::train {

class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  virtual int chunks() const = 0;
  virtual Tensor& chunk_input(int chunk, int micro) = 0;   // the previous virtual stage's output
  virtual Tensor& chunk_output(int chunk, int micro) = 0;  // to the next virtual stage
  virtual Tensor& chunk_grad(int chunk, int micro) = 0;    // d(output) before backward, d(input) after
  // Training: micro-batch `micro` of this data-parallel rank's slice of the step's batch; the last
  // virtual stage returns its loss share (and has run the head's backward), the others 0.
  virtual float forward(int64_t step, int chunk, int micro, float grad_scale, parallel::GradSync* sync) = 0;
  virtual void backward(int chunk, int micro, parallel::GradSync* sync) = 0;
  // Zero-bubble schedules split backward: backward_input computes the input gradients (B),
  // backward_weights later the weight gradients (W), then reduces them. A stage that cannot split
  // runs its whole backward as B (W is then empty).
  virtual void backward_input(int chunk, int micro) { backward(chunk, micro, nullptr); }
  virtual void backward_weights(int chunk, int micro, parallel::GradSync* sync) { (void)chunk, (void)micro, (void)sync; }
  // Evaluation: validation micro-batch `batch`, forward only; the last virtual stage returns its loss.
  virtual float evaluate(int64_t batch, int chunk) = 0;
  virtual void release(int chunk, int micro) = 0;
};

// The PipelineStage calls a model (models::Gpt, models::Vit) answers itself: its chunks'
// activation buffers, backward (whole, or split into B and W) and release. A workload derives
// from it and adds forward and evaluate, which need its data.
template <typename Model>
class ModelStage : public PipelineStage {
 public:
  explicit ModelStage(Model& model) : staged_(model) {}
  int chunks() const override { return staged_.chunks(); }
  Tensor& chunk_input(int chunk, int micro) override { return staged_.chunk_input(chunk, micro); }
  Tensor& chunk_output(int chunk, int micro) override { return staged_.chunk_output(chunk, micro); }
  Tensor& chunk_grad(int chunk, int micro) override { return staged_.chunk_grad(chunk, micro); }
  void backward(int chunk, int micro, parallel::GradSync* sync) override { staged_.backward_chunk(chunk, micro, sync); }
  void backward_input(int chunk, int micro) override { staged_.backward_chunk(chunk, micro, nullptr, true); }
  void backward_weights(int chunk, int micro, parallel::GradSync* sync) override {
    staged_.backward_weights_chunk(chunk, micro, sync);
  }
  void release(int chunk, int micro) override { staged_.release(chunk, micro); }

 private:
  Model& staged_;
};

}  // namespace tessera::train
