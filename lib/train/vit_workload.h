// VitWorkload: a Vit and its image data for the Trainer. Training batches are cut and augmented
// by the ImageLoader from (seed, epoch, image) and made ahead on a background thread
// (ImagePrefetcher), this rank taking rows [dp_rank x micro-batches x micro-batch, ...) of each
// global batch; evaluation (normalisation only) splits the test set's batches over the dp ranks
// and sums the loss, correct predictions and count with one all-reduce(dp).
#pragma once
#include <memory>
#include <optional>

#include "comm/communicator.h"
#include "io/image_dataset.h"
#include "io/image_loader.h"
#include "io/image_prefetcher.h"
#include "models/vit/vit.h"
#include "train/train_config.h"
#include "train/workload.h"

namespace tessera::train {

class VitWorkload final : public Workload {
 public:
  // test may be null (no evaluation). dp: the data-parallel group (its rank picks the slice).
  VitWorkload(models::Vit& model, std::shared_ptr<const io::ImageDataset> train,
              std::shared_ptr<const io::ImageDataset> test, const TrainConfig& config, comm::Communicator& dp,
              io::ImageAugment augment = {});

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

 private:
  models::Vit& model_;
  TrainConfig config_;
  comm::Communicator& dp_;
  int64_t first_row_, rows_;  // this rank's slice of each global batch
  io::ImageLoader train_loader_;
  std::optional<io::ImageLoader> eval_loader_;
  std::unique_ptr<io::ImagePrefetcher> prefetcher_;
  const io::ImageBatch* batch_ = nullptr;  // the current step's rows
  std::vector<float> eval_images_;
  std::vector<int32_t> eval_labels_;
};

}  // namespace tessera::train
