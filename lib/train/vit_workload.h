// VitWorkload: a Vit and its image data for the Trainer. Training batches are cut and augmented
// by the ImageLoader from (seed, epoch, image) and made ahead on a background thread
// (ImagePrefetcher), this rank taking rows [dp_rank x micro-batches x micro-batch, ...) of each
// global batch; evaluation (normalisation only) splits the test set's batches over the dp ranks
// and sums the loss, correct predictions and count over dp. On a pipeline (pp > 1) it is a
// PipelineStage: the first stage reads the images (prefetched), the last only the labels;
// evaluation runs through the stages, and the last stage's sums are summed over pp too.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "io/image_dataset.h"
#include "io/image_loader.h"
#include "io/image_prefetcher.h"
#include "models/vit/vit.h"
#include "train/pipeline_runner.h"
#include "train/train_config.h"
#include "train/workload.h"

namespace tessera::train {

class VitWorkload final : public Workload, private ModelStage<models::Vit> {
 public:
  // test may be null (no evaluation). dp: the data-parallel group and grid_rows the tensor-parallel
  // grid's ranks splitting each micro-batch (ProcessMesh::grid_rows; one rank otherwise): their
  // ranks pick the slice; pp: the pipeline group (its size and the model's chunks pick the
  // schedule of config.pp_schedule); data: the data group (dp x sp) of the trainer.
  VitWorkload(models::Vit& model, std::shared_ptr<const io::ImageDataset> train,
              std::shared_ptr<const io::ImageDataset> test, const TrainConfig& config, comm::Communicator& dp,
              comm::Communicator& grid_rows, comm::Communicator& pp, comm::Communicator& data,
              io::ImageAugment augment = {});
  ~VitWorkload() override;

  nn::ParamStore& params() override { return model_.params(); }
  void start(int64_t first_step) override;
  float train_micro_batch(int64_t step, int64_t micro, float grad_scale, parallel::GradSync* sync) override;
  bool can_evaluate() const override { return eval_loader_.has_value(); }
  Evaluation evaluate() override;
  std::string unit() const override { return "samples"; }
  int64_t units_per_sample() const override { return 1; }
  double flops_per_sample() const override { return model_.flops_per_sample(); }
  std::string model_name() const override { return "vit"; }
  std::vector<std::pair<std::string, int64_t>> model_config() const override;
  PipelineRunner* pipeline() override { return runner_.get(); }
  void set_trace(TraceSink* trace) override { model_.units().set_trace(trace); }
  // The ViT ties no weights across stages: a TiedWeights that does nothing on every stage.
  parallel::TiedWeights* tied_weights() override { return tied_.get(); }

 private:
  // PipelineStage (ModelStage answers the rest): the model's chunks with this rank's images and labels.
  float forward(int64_t step, int chunk, int micro, float grad_scale, parallel::GradSync* sync) override;
  float evaluate(int64_t batch, int chunk) override;

  const io::ImageBatch& step_batch(int64_t step);  // this rank's rows of the step, prefetched
  const int32_t* step_labels(int64_t step);        // their labels (a last stage loads only these)
  void load_eval_round(int64_t round);             // test batch round x ranks + rank, or padding
  void add(const models::Vit::Eval& e);            // to eval_sum_

  models::Vit& model_;
  TrainConfig config_;
  comm::Communicator& dp_;
  comm::Communicator& grid_rows_;
  comm::Communicator& pp_;
  int batch_rank_, batch_ranks_;  // this rank among the dp x grid_rows ranks splitting a batch
  int64_t first_row_, rows_;      // this rank's slice of each global batch
  io::ImageLoader train_loader_;
  std::optional<io::ImageLoader> eval_loader_;
  std::unique_ptr<io::ImagePrefetcher> prefetcher_;  // on the stage with the embedding
  const io::ImageBatch* batch_ = nullptr;             // the current step's rows
  std::vector<int32_t> labels_;                       // without a prefetcher: the current step's labels
  int64_t labels_step_ = -1;
  std::vector<float> eval_images_;
  std::vector<int32_t> eval_labels_;
  int64_t eval_round_base_ = 0;  // of the runner's evaluation batch 0
  models::Vit::Eval eval_sum_;
  std::unique_ptr<parallel::TiedWeights> tied_;
  std::unique_ptr<PipelineRunner> runner_;  // pp > 1
};

}  // namespace tessera::train
