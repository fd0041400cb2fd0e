// VitWorkload: prefetched, augmented image batches into the Vit (whole, or chunk by chunk on a
// pipeline stage); evaluation over the test set.
#include "train/vit_workload.h"

#include <algorithm>

#include "kernels/kernel_timing.h"

namespace tessera::train {

VitWorkload::VitWorkload(models::Vit& model, std::shared_ptr<const io::ImageDataset> train,
                         std::shared_ptr<const io::ImageDataset> test, const TrainConfig& config,
                         comm::Communicator& dp, comm::Communicator& grid_rows, comm::Communicator& pp,
                         comm::Communicator& data, io::ImageAugment augment)
    : ModelStage(model),
      model_(model),
      config_(config),
      dp_(dp),
      grid_rows_(grid_rows),
      pp_(pp),
      batch_rank_(dp.rank() * grid_rows.size() + grid_rows.rank()),
      batch_ranks_(dp.size() * grid_rows.size()),
      first_row_(batch_rank_ * config.micro_batches(batch_ranks_) * config.micro_batch),
      rows_(config.micro_batches(batch_ranks_) * config.micro_batch),
      train_loader_(train, config.global_batch, config.seed, io::channel_stats(*train), augment) {
  if (test) {
    io::check_same_images(*train, *test);  // the model reads test images with the train images' shape
    eval_loader_.emplace(test, config.micro_batch, config.seed, io::channel_stats(*train), io::ImageAugment{0, false});
    eval_images_.resize(static_cast<size_t>(config.micro_batch * eval_loader_->image_floats()));
    eval_labels_.resize(static_cast<size_t>(config.micro_batch));
  }
  if (pp.size() > 1) {
    tied_ = std::make_unique<parallel::TiedWeights>(nullptr, nullptr, 0, nullptr, 0, pp, data);
    runner_ = std::make_unique<PipelineRunner>(
        static_cast<PipelineStage&>(*this), pp,
        parallel::make_schedule(config.pp_schedule, pp.size(), static_cast<int>(config.micro_batches(batch_ranks_)),
                                model.chunks()));
  }
}

VitWorkload::~VitWorkload() = default;

void VitWorkload::start(int64_t first_step) {
  // The loader counts steps from 0, the trainer from 1. Only the stage with the embedding needs
  // the images; a last stage without it reads the labels alone (step_labels).
  if (model_.has_embedding(0))
    prefetcher_ = std::make_unique<io::ImagePrefetcher>(train_loader_, first_step - 1, first_row_, rows_);
  else if (model_.has_head(model_.chunks() - 1))
    labels_.resize(static_cast<size_t>(rows_));
}

const io::ImageBatch& VitWorkload::step_batch(int64_t step) {
  if (!batch_ || batch_->step != step - 1) {
    const kernels::KernelTimer timer(kernels::KernelKind::data, "data_wait");  // the wait for the loader thread
    batch_ = &prefetcher_->next();
  }
  TESSERA_CHECK(batch_->step == step - 1, "vit: the prefetched batch is of step ", batch_->step + 1, ", not ", step);
  return *batch_;
}

const int32_t* VitWorkload::step_labels(int64_t step) {
  if (prefetcher_) return step_batch(step).labels.data();
  if (labels_step_ != step) {
    const std::vector<int64_t> images = train_loader_.global_batch(step - 1);
    for (int64_t r = 0; r < rows_; ++r)
      labels_[static_cast<size_t>(r)] = train_loader_.data().labels[static_cast<size_t>(images[first_row_ + r])];
    labels_step_ = step;
  }
  return labels_.data();
}

float VitWorkload::train_micro_batch(int64_t step, int64_t micro, float grad_scale, parallel::GradSync* sync) {
  const io::ImageBatch& batch = step_batch(step);
  const int64_t at = micro * config_.micro_batch;
  return model_.forward_backward(batch.images.data() + at * train_loader_.image_floats(), batch.labels.data() + at,
                                 grad_scale, sync);
}

float VitWorkload::forward(int64_t step, int chunk, int micro, float grad_scale, parallel::GradSync* sync) {
  const int64_t at = micro * config_.micro_batch;
  const float* images = nullptr;
  const int32_t* labels = nullptr;
  if (model_.has_embedding(chunk)) images = step_batch(step).images.data() + at * train_loader_.image_floats();
  if (model_.has_head(chunk)) labels = step_labels(step) + at;
  return model_.training_loss(model_.forward_chunk(chunk, micro, images, labels, true, grad_scale, sync));
}

void VitWorkload::load_eval_round(int64_t round) {
  // Batch round x ranks + rank goes to this rank; every rank runs the same number of rounds (a
  // rank past the end evaluates an all-padding batch, which counts nothing), as ZeRO-3's gathers
  // need.
  const int64_t b = round * batch_ranks_ + batch_rank_;
  if (b < eval_loader_->eval_batches()) {
    eval_loader_->eval_batch(b, 0, config_.micro_batch, eval_images_.data(), eval_labels_.data());
  } else {
    std::fill(eval_images_.begin(), eval_images_.end(), 0.0f);
    std::fill(eval_labels_.begin(), eval_labels_.end(), -1);
  }
}

void VitWorkload::add(const models::Vit::Eval& e) {
  eval_sum_.loss_sum += e.loss_sum;
  eval_sum_.correct += e.correct;
  eval_sum_.count += e.count;
}

float VitWorkload::evaluate(int64_t batch, int chunk) {
  if (model_.has_embedding(chunk) || model_.has_head(chunk)) load_eval_round(eval_round_base_ + batch);
  const models::Vit::Eval e = model_.forward_chunk(chunk, static_cast<int>(batch), eval_images_.data(),
                                                   eval_labels_.data(), false);
  add(e);
  return static_cast<float>(e.loss_sum);
}

Workload::Evaluation VitWorkload::evaluate() {
  const int64_t rounds = (eval_loader_->eval_batches() + batch_ranks_ - 1) / batch_ranks_;
  eval_sum_ = {};
  if (runner_) {
    // Through the stages, in windows that keep the runner's message tags (2 x chunks per batch)
    // below the 32767 every MPI guarantees. The sums are the last stage's (zero elsewhere).
    const int64_t window = 16000 / model_.chunks();
    for (eval_round_base_ = 0; eval_round_base_ < rounds; eval_round_base_ += window)
      runner_->evaluate(std::min(window, rounds - eval_round_base_));
  } else {
    for (int64_t r = 0; r < rounds; ++r) {
      load_eval_round(r);
      add(model_.evaluate(eval_images_.data(), eval_labels_.data()));
    }
  }
  double loss = eval_sum_.loss_sum, correct = static_cast<double>(eval_sum_.correct),
         count = static_cast<double>(eval_sum_.count);
  for (comm::Communicator* group : {&dp_, &grid_rows_, &pp_}) {
    if (group->size() == 1) continue;
    loss = group->all_reduce_sum(loss);
    correct = group->all_reduce_sum(correct);
    count = group->all_reduce_sum(count);
  }
  return {loss / count, correct / count};
}

std::vector<std::pair<std::string, int64_t>> VitWorkload::model_config() const {
  const models::VitConfig& c = model_.config();
  return {{"image", c.image}, {"channels", c.channels}, {"patch", c.patch}, {"hidden", c.hidden},
          {"layers", c.layers}, {"heads", c.heads}, {"mlp_ratio", c.mlp_ratio}, {"classes", c.classes}};
}

}  // namespace tessera::train
