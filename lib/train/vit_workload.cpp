// VitWorkload: prefetched, augmented image batches into the Vit; evaluation over the test set.
#include "train/vit_workload.h"

#include <algorithm>

namespace tessera::train {

VitWorkload::VitWorkload(models::Vit& model, std::shared_ptr<const io::ImageDataset> train,
                         std::shared_ptr<const io::ImageDataset> test, const TrainConfig& config,
                         comm::Communicator& dp, io::ImageAugment augment)
    : model_(model),
      config_(config),
      dp_(dp),
      first_row_(dp.rank() * config.micro_batches(dp.size()) * config.micro_batch),
      rows_(config.micro_batches(dp.size()) * config.micro_batch),
      train_loader_(train, config.global_batch, config.seed, io::channel_stats(*train), augment) {
  if (test) {
    eval_loader_.emplace(test, config.micro_batch, config.seed, io::channel_stats(*train), io::ImageAugment{0, false});
    eval_images_.resize(static_cast<size_t>(config.micro_batch * eval_loader_->image_floats()));
    eval_labels_.resize(static_cast<size_t>(config.micro_batch));
  }
}

void VitWorkload::start(int64_t first_step) {
  // The loader counts steps from 0, the trainer from 1.
  prefetcher_ = std::make_unique<io::ImagePrefetcher>(train_loader_, first_step - 1, first_row_, rows_);
}

float VitWorkload::train_micro_batch(int64_t step, int64_t micro, float grad_scale, parallel::GradSync* sync) {
  if (micro == 0) batch_ = &prefetcher_->next();
  TESSERA_CHECK(batch_ && batch_->step == step - 1, "vit: the prefetched batch is of step ", batch_->step + 1,
                ", not ", step);
  const int64_t at = micro * config_.micro_batch;
  return model_.forward_backward(batch_->images.data() + at * train_loader_.image_floats(),
                                 batch_->labels.data() + at, grad_scale, sync);
}

Workload::Evaluation VitWorkload::evaluate() {
  // Batch r x dp + rank goes to this rank; every rank runs the same number of rounds (a rank past
  // the end evaluates an all-padding batch, which counts nothing), as ZeRO-3's gathers need.
  const int64_t batches = eval_loader_->eval_batches();
  const int64_t rounds = (batches + dp_.size() - 1) / dp_.size();
  double loss = 0.0, correct = 0.0, count = 0.0;
  for (int64_t r = 0; r < rounds; ++r) {
    const int64_t b = r * dp_.size() + dp_.rank();
    if (b < batches) {
      eval_loader_->eval_batch(b, 0, config_.micro_batch, eval_images_.data(), eval_labels_.data());
    } else {
      std::fill(eval_images_.begin(), eval_images_.end(), 0.0f);
      std::fill(eval_labels_.begin(), eval_labels_.end(), -1);
    }
    const models::Vit::Eval e = model_.evaluate(eval_images_.data(), eval_labels_.data());
    loss += e.loss_sum;
    correct += static_cast<double>(e.correct);
    count += static_cast<double>(e.count);
  }
  loss = dp_.all_reduce_sum(loss);
  correct = dp_.all_reduce_sum(correct);
  count = dp_.all_reduce_sum(count);
  return {loss / count, correct / count};
}

std::vector<std::pair<std::string, int64_t>> VitWorkload::model_config() const {
  const models::VitConfig& c = model_.config();
  return {{"image", c.image}, {"channels", c.channels}, {"patch", c.patch}, {"hidden", c.hidden},
          {"layers", c.layers}, {"heads", c.heads}, {"mlp_ratio", c.mlp_ratio}, {"classes", c.classes}};
}

}  // namespace tessera::train
