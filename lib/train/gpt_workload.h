// GptWorkload: a Gpt (dense or mixture-of-experts) and its token data for the Trainer. The batch
// the TokenLoader cuts by (seed, step) splits over dp x ep: micro-batch m of data-parallel rank d
// is the contiguous rows [(d x micro-batches + m) x ep x B, ...), of which ep rank e takes the
// e-th B, so an ep group's micro-batch is what one rank with micro-batch ep x B would see.
// Evaluation runs the validation set's first global batches, each split over the ranks and into
// micro-batches as a training batch is, and reduces over every axis that splits it (dp x sp, ep,
// the tp grid's rows, pp): the eval loss is the mean over the same windows under every layout.
// A data set with a loss mask (io/token_dataset.h) is averaged over its counted targets only: each
// micro-batch divides its counted losses by the global batch's count / (dp x micro-batches), the
// count read from the global batch's mask on every rank (no collective), so the shares add up to
// sum / count under every layout; a global batch with nothing counted trains with loss 0 and no
// gradient. Evaluation does the same over all its batches when the validation data has a mask.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "comm/process_mesh.h"
#include "io/token_dataset.h"
#include "io/token_loader.h"
#include "io/token_prefetcher.h"
#include "models/gpt/gpt.h"
#include "train/train_config.h"
#include "train/pipeline_runner.h"
#include "train/workload.h"

namespace tessera::train {

class GptWorkload final : public Workload, private ModelStage<models::Gpt> {
 public:
  // pp, data: the pipeline group (its size and the model's chunks pick the schedule of
  // config.pp_schedule) and the data group (dp x sp) the tied table's gradient is summed over.
  GptWorkload(models::Gpt& model, const io::TokenDataset& train_data, const io::TokenDataset* val_data,
              const TrainConfig& config, comm::ProcessMesh& mesh);
  // Training rows from a loader made by the caller (a blend of several data sets: io/token_blend.h).
  GptWorkload(models::Gpt& model, io::TokenLoader train_loader, const io::TokenDataset* val_data,
              const TrainConfig& config, comm::ProcessMesh& mesh);
  ~GptWorkload() override;

  nn::ParamStore& params() override { return model_.params(); }
  void start(int64_t first_step) override;
  std::string data_sampling() const override { return io::sampling_name(train_loader_.sampling()); }
  int64_t data_epoch(int64_t consumed_samples) const override;
  std::vector<std::pair<std::string, std::string>> data_state(int64_t step) const override;
  float train_micro_batch(int64_t step, int64_t micro, float grad_scale, parallel::GradSync* sync) override;
  bool can_evaluate() const override { return val_loader_.has_value(); }
  Evaluation evaluate() override;
  std::string unit() const override { return "tokens"; }
  int64_t units_per_sample() const override { return config_.seq_len; }
  double flops_per_sample() const override { return model_.flops_per_token() * static_cast<double>(config_.seq_len); }
  std::string model_name() const override;
  std::vector<StepMetric> step_metrics() override;
  std::vector<std::pair<std::string, int64_t>> model_config() const override;
  std::vector<std::pair<std::string, double>> model_values() const override;
  PipelineRunner* pipeline() override { return runner_.get(); }
  void set_trace(TraceSink* trace) override { model_.units().set_trace(trace); }
  parallel::TiedWeights* tied_weights() override { return tied_.get(); }
  void dump_initial(const std::string& path) override;
  void dump_first_step(const std::string& path) override;

 private:
  // PipelineStage (ModelStage answers the rest): the model's chunks with this rank's token rows.
  float forward(int64_t step, int chunk, int micro, float grad_scale, parallel::GradSync* sync) override;
  float evaluate(int64_t index, int chunk) override;

  models::Gpt& model_;
  TrainConfig config_;
  int64_t first_row(int64_t micro) const;  // of this rank's rows of micro-batch `micro` of a global batch
  void load_train_rows(int64_t step, int64_t micro);  // into rows_, timed as the step's data
  // This rank's rows of every micro-batch of a (0-based) step, micro-batch after micro-batch.
  void fill_step(io::TokenBatch& batch) const;  // and its mask, when the data has one
  bool needs_rows() const;  // whether any chunk here embeds tokens or computes the loss
  void start_prefetch(int64_t step0);  // a new prefetcher whose first step is step0 (0-based)
  const io::TokenBatch& step_batch(int64_t step);  // the prefetched batch of a (1-based) step
  void load_eval_rows(int64_t index);  // micro-batch `index` of an evaluation (evaluate(index, chunk))
  int dp_rank_, dp_;
  int64_t trained_step_ = 0;  // the last step (1-based) whose rows were asked for: blend metrics
  // The ranks splitting each micro-batch's sequences (ep x the tp grid's rows) and this one's share.
  int share_rank_, shares_;
  int64_t micro_batches_;  // per step on each dp x shares rank
  comm::ProcessMesh& mesh_;  // its groups sum evaluation (ProcessMesh::sum_batch_shares)
  io::TokenLoader train_loader_;
  std::optional<io::TokenLoader> val_loader_;
  std::vector<int32_t> rows_;  // one micro-batch of token rows [B, T+1]
  std::vector<uint8_t> mask_rows_;  // their loss mask, when the data has one
  models::LossMask mask_;           // what the next forward of rows_ is given (rows: nullptr, no mask)
  double eval_denominator_ = 0;     // an evaluation's counted targets / (its micro-batches x dp)
  // --document-mask: one micro-batch's segments [B, T] (every stage reads them: its attention masks
  // by document), cut by the loader from the window starts and /doc_offsets (training: on the
  // prefetcher's thread, with the rows); empty without.
  std::vector<int32_t> segments_;
  const int32_t* train_segments(int64_t step, int64_t micro);  // of a training micro-batch (1-based step)
  const int32_t* eval_segments(int64_t index);                 // of load_eval_rows(index)'s micro-batch
  // This rank's rows of the coming steps, read on a background thread (made by start, or anew when
  // a step is asked for out of order); current_ is the step (0-based) being trained.
  std::unique_ptr<io::TokenPrefetcher> prefetcher_;
  const io::TokenBatch* current_ = nullptr;
  std::unique_ptr<parallel::TiedWeights> tied_;
  std::unique_ptr<PipelineRunner> runner_;  // pp > 1
};

}  // namespace tessera::train
