// Gpt: construction (parameters, activations) and the forward/backward of one micro-batch.
#include "models/gpt/gpt.h"

#include <cmath>
#include <numeric>

#include "kernels/ops.h"

namespace tessera::models {

void GptConfig::validate(int tp) const {
  TESSERA_CHECK(vocab >= 2, "vocabulary size must be at least 2, got ", vocab);
  TESSERA_CHECK(layers >= 1, "--layers must be at least 1, got ", layers);
  TESSERA_CHECK(hidden >= 1, "--hidden must be at least 1, got ", hidden);
  TESSERA_CHECK(heads >= 1, "--heads must be at least 1, got ", heads);
  TESSERA_CHECK(hidden % heads == 0, "--hidden ", hidden, " is not divisible by --heads ", heads);
  TESSERA_CHECK(max_seq >= 1, "--seq-len must be at least 1, got ", max_seq);
  TESSERA_CHECK(pad_vocab_to >= 1, "vocabulary padding must be at least 1");
  TESSERA_CHECK(heads % tp == 0, "--heads ", heads, " is not divisible by --tp ", tp,
                " (tensor parallelism splits the attention heads)");
}

Gpt::Gpt(const GptConfig& config, Device device, uint64_t seed, int64_t micro_batch, int64_t seq,
         const ModelLayout& layout)
    : config_(config),
      device_(device),
      batch_(micro_batch),
      seq_(seq),
      local_seq_(layout.sequence->local_length(seq)),
      first_position_(layout.sequence->offset(seq)) {
  config.validate(layout.tensor->size());
  TESSERA_CHECK(seq <= config.max_seq, "sequence ", seq, " longer than the model's ", config.max_seq);
  TESSERA_CHECK(!(layout.tensor->splits_rows() && layout.sequence->size() > 1),
                "--sp-mode split_gather splits the sequence inside the tp group: it takes no --sp");
  const int64_t c = config.hidden;
  const float std = 0.02f, proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config.layers));
  embed_ = nn::Embedding(store_, "embed", config.vocab, config.max_seq, c, config.pad_vocab_to, std, *layout.tensor);
  const nn::BlockConfig block{c, config.heads, 4 * c, std, proj_std};
  blocks_.reserve(config.layers);
  std::vector<int> first_param{0};  // of each unit: the embedding, the blocks, the final norm
  for (int64_t i = 0; i < config.layers; ++i) {
    first_param.push_back(store_.size());
    blocks_.emplace_back(store_, "blocks." + std::to_string(i), block, *layout.tensor, *layout.sequence);
  }
  first_param.push_back(store_.size());
  ln_f_ = nn::LayerNorm(store_, "ln_f", c, *layout.tensor);
  units_ = std::make_unique<parallel::ParamUnits>(store_, first_param, device, seed, layout.zero3);

  auto act = [&](Shape s, DType t = DType::f32) { return Tensor::empty(std::move(s), t, device); };
  const int64_t b = micro_batch, t = local_seq_, n = b * t;
  const int64_t rows = layout.tensor->local_rows(n);  // token rows this rank holds between regions
  inputs_ = act({b, t}, DType::i32);
  targets_ = act({b, t}, DType::i32);
  for (int64_t i = 0; i <= config.layers; ++i) residual_.push_back(act({rows, c}));
  for (const auto& blk : blocks_) saved_.push_back(blk.allocate(b, t, device));
  scratch_ = blocks_.front().allocate_scratch(b, t, device);
  lnf_ = act({rows, c});
  lnf_mean_ = act({rows});
  lnf_rstd_ = act({rows});
  head_ = nn::LmHead(embed_, store_, n, device);
  dres_ = act({rows, c});
  host_rows_ = Tensor::empty({2, b, t}, DType::i32);
}

double Gpt::flops_per_token() const {
  return 6.0 * static_cast<double>(store_.global_numel()) +
         6.0 * static_cast<double>(config_.layers * seq_ * config_.hidden);
}

void Gpt::load_batch(const int32_t* rows) {
  int32_t* in = host_rows_.data<int32_t>();
  int32_t* tg = in + batch_ * local_seq_;
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t t = 0; t < local_seq_; ++t) {
      const int32_t* at = rows + b * (seq_ + 1) + first_position_ + t;
      in[b * local_seq_ + t] = at[0];
      tg[b * local_seq_ + t] = at[1];
    }
  inputs_.copy_from(host_rows_.rows(0, 1));
  targets_.copy_from(host_rows_.rows(1, 1));
}

// Under ZeRO-3 the embedding and final norm stay gathered from their forward to their backward
// (training), the blocks are gathered for forward and again for backward.
float Gpt::run_forward(bool training) {
  units_->gather(kEmbedUnit, training);
  embed_.forward(residual_[0], inputs_, first_position_, scratch_.region);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    units_->gather(block_unit(i), false);
    blocks_[i].forward(residual_[i + 1], residual_[i], saved_[i], scratch_);
    units_->release(block_unit(i));
  }
  units_->gather(ln_f_unit(), training);
  ln_f_.forward(lnf_, lnf_mean_, lnf_rstd_, residual_.back());
  const int32_t* host_targets = host_rows_.data<int32_t>() + batch_ * local_seq_;
  const Tensor& losses = head_.forward(lnf_, targets_, host_targets, scratch_.region);  // tied to the embedding
  if (!training) {
    units_->release(ln_f_unit());
    units_->release(kEmbedUnit);
  }
  const float* l = losses.data<float>();
  const double sum = std::accumulate(l, l + losses.numel(), 0.0);
  return static_cast<float>(sum / static_cast<double>(batch_ * seq_));
}

float Gpt::forward(const int32_t* rows) {
  load_batch(rows);
  return run_forward(false);
}

float Gpt::forward_backward(const int32_t* rows, float grad_scale, parallel::GradSync* sync) {
  load_batch(rows);
  const float loss = run_forward(true);
  head_.backward(scratch_.d_c, lnf_, targets_, grad_scale / static_cast<float>(batch_ * seq_), scratch_.region);
  dres_.zero();
  ln_f_.backward(dres_, scratch_.d_c, residual_.back(), lnf_mean_, lnf_rstd_);
  units_->grads_done(ln_f_unit(), sync);
  for (size_t i = blocks_.size(); i-- > 0;) {
    units_->gather(block_unit(i), true);
    blocks_[i].backward(dres_, residual_[i], saved_[i], scratch_);
    units_->grads_done(block_unit(i), sync);
  }
  embed_.backward(dres_, inputs_, first_position_, scratch_.region);
  units_->grads_done(kEmbedUnit, sync);
  return loss;
}

}  // namespace tessera::models
