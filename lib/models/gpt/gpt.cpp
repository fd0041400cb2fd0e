// Gpt: construction (parameters, activations) and the forward/backward of one micro-batch.
#include "models/gpt/gpt.h"

#include <cmath>
#include <numeric>
#include <utility>

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
      first_position_(layout.sequence->offset(seq)),
      rows_(layout.tensor->local_rows(micro_batch * layout.sequence->local_length(seq))) {
  config.validate(layout.tensor->size());
  TESSERA_CHECK(seq <= config.max_seq, "sequence ", seq, " longer than the model's ", config.max_seq);
  TESSERA_CHECK(!(layout.tensor->splits_rows() && layout.sequence->size() > 1),
                "--sp-mode split_gather splits the sequence inside the tp group: it takes no --sp");
  const PipelinePlacement& pipe = layout.pipeline;
  TESSERA_CHECK(pipe.stages >= 1 && pipe.stage >= 0 && pipe.stage < pipe.stages && pipe.chunks >= 1,
                "pipeline placement: stage ", pipe.stage, " of ", pipe.stages, " with ", pipe.chunks, " chunks");
  const int parts = pipe.virtual_stages();
  size_t base = 0;
  for (int c = 0; c < pipe.chunks; ++c) {
    const int v = pipe.virtual_stage(c);
    const auto [first, end] = stage_blocks(config.layers, parts, v);
    chunks_.push_back({first, end, base, v == 0, v == parts - 1});
    base += static_cast<size_t>(end - first);
  }
  const bool first_stage = chunks_.front().embedding, last_stage = chunks_.back().head;

  const int64_t c = config.hidden;
  const float std = 0.02f, proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config.layers));
  const nn::BlockConfig block{c, config.heads, 4 * c, std, proj_std};
  auto add_embedding = [&](nn::ParamStore& store) {
    return nn::Embedding(store, "embed", config.vocab, config.max_seq, c, config.pad_vocab_to, std, *layout.tensor);
  };
  auto add_block = [&](nn::ParamStore& store, int64_t i) {
    return nn::TransformerBlock(store, "blocks." + std::to_string(i), block, *layout.tensor, *layout.sequence);
  };
  std::vector<int> first_param;  // of each unit: the embedding, the blocks, the final norm
  if (first_stage) {
    first_param.push_back(store_.size());
    embed_ = add_embedding(store_);
  } else if (last_stage) {
    mirror_ = std::make_unique<nn::ParamStore>();
    embed_ = add_embedding(*mirror_);
  }
  block_unit_base_ = first_param.size();
  for (const Chunk& ch : chunks_)
    for (int64_t i = ch.first_block; i < ch.end_block; ++i) {
      first_param.push_back(store_.size());
      blocks_.push_back(add_block(store_, i));
    }
  ln_f_unit_ = first_param.size();
  if (last_stage) {
    first_param.push_back(store_.size());
    ln_f_ = nn::LayerNorm(store_, "ln_f", c, *layout.tensor);
  }
  units_ = std::make_unique<parallel::ParamUnits>(store_, first_param, device, seed, layout.zero3);
  if (mirror_) mirror_->allocate(device, seed);  // the same values as the first stage's table
  if (pipe.pipelined()) {  // the whole model's size, from its parameter list alone
    nn::ParamStore whole;
    add_embedding(whole);
    for (int64_t i = 0; i < config.layers; ++i) add_block(whole, i);
    nn::LayerNorm(whole, "ln_f", c, *layout.tensor);
    model_numel_ = whole.global_numel();
  } else {
    model_numel_ = store_.global_numel();
  }

  auto act = [&](Shape s, DType t = DType::f32) { return Tensor::empty(std::move(s), t, device); };
  const int64_t b = micro_batch, t = local_seq_, n = b * t;
  slots_.resize(chunks_.size());
  scratch_ = blocks_.front().allocate_scratch(b, t, device);
  host_rows_ = Tensor::empty({2, b, t}, DType::i32);
  if (last_stage) {
    targets_ = act({b, t}, DType::i32);
    lnf_ = act({rows_, c});
    lnf_mean_ = act({rows_});
    lnf_rstd_ = act({rows_});
    head_ = nn::LmHead(embed_, mirror_ ? *mirror_ : store_, n, device);
  }
  if (!pipe.pipelined()) {  // one micro-batch's activations, allocated now
    slot(0, 0);
    release(0, 0);
  }
}

double Gpt::flops_per_token() const {
  return 6.0 * static_cast<double>(model_numel_) + 6.0 * static_cast<double>(config_.layers * seq_ * config_.hidden);
}

std::unique_ptr<Gpt::Activations> Gpt::allocate_activations(const Chunk& c) const {
  auto a = std::make_unique<Activations>();
  auto act = [&](Shape s, DType t = DType::f32) { return Tensor::empty(std::move(s), t, device_); };
  if (c.embedding) a->inputs = act({batch_, local_seq_}, DType::i32);
  for (int64_t i = 0; i <= c.blocks(); ++i) a->residual.push_back(act({rows_, config_.hidden}));
  for (int64_t i = 0; i < c.blocks(); ++i) a->saved.push_back(blocks_[c.block_base + i].allocate(batch_, local_seq_, device_));
  a->block_weight_grads.resize(static_cast<size_t>(c.blocks()));
  a->dres = act({rows_, config_.hidden});
  return a;
}

Gpt::Activations& Gpt::slot(int chunk, int micro) {
  ChunkSlots& s = slots_.at(chunk);
  auto it = s.by_micro.find(micro);
  if (it != s.by_micro.end()) return *it->second;
  if (s.free.empty()) {
    s.all.push_back(allocate_activations(chunks_[chunk]));
    s.free.push_back(s.all.back().get());
  }
  Activations* a = s.free.back();
  s.free.pop_back();
  s.by_micro.emplace(micro, a);
  return *a;
}

void Gpt::release(int chunk, int micro) {
  ChunkSlots& s = slots_.at(chunk);
  auto it = s.by_micro.find(micro);
  TESSERA_CHECK(it != s.by_micro.end(), "Gpt::release: micro-batch ", micro, " of chunk ", chunk, " holds nothing");
  s.free.push_back(it->second);
  s.by_micro.erase(it);
}

void Gpt::load_batch(Activations& a, const int32_t* rows) {
  int32_t* in = host_rows_.data<int32_t>();
  int32_t* tg = in + batch_ * local_seq_;
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t t = 0; t < local_seq_; ++t) {
      const int32_t* at = rows + b * (seq_ + 1) + first_position_ + t;
      in[b * local_seq_ + t] = at[0];
      tg[b * local_seq_ + t] = at[1];
    }
  if (a.inputs.defined()) a.inputs.copy_from(host_rows_.rows(0, 1).reshape(a.inputs.shape()));
  if (targets_.defined()) targets_.copy_from(host_rows_.rows(1, 1).reshape(targets_.shape()));
}

// Under ZeRO-3 each block is gathered for its forward and again for its backward. Without a
// pipeline the embedding (also the tied head) and the final norm stay gathered from their forward
// to their backward; on a pipeline the embedding is gathered again for its backward, as the
// stage holds several micro-batches in flight.
float Gpt::forward_chunk(int chunk, int micro, const int32_t* rows, bool training, float grad_scale,
                         parallel::GradSync* sync) {
  const Chunk& c = chunks_[chunk];
  Activations& a = slot(chunk, micro);
  if (c.embedding || c.head) load_batch(a, rows);
  const bool keep_embedding = c.embedding && c.head;  // the head on this chunk reads the table
  if (c.embedding) {
    units_->gather(embed_unit_, training && keep_embedding);
    embed_.forward(a.residual[0], a.inputs, first_position_, scratch_.region);
    if (!keep_embedding) units_->release(embed_unit_);
  }
  for (int64_t j = 0; j < c.blocks(); ++j) {
    const size_t b = c.block_base + static_cast<size_t>(j);
    units_->gather(block_unit(b), false);
    blocks_[b].forward(a.residual[j + 1], a.residual[j], a.saved[j], scratch_);
    units_->release(block_unit(b));
  }
  if (!c.head) return 0.0f;
  units_->gather(ln_f_unit_, training);
  ln_f_.forward(lnf_, lnf_mean_, lnf_rstd_, a.residual.back());
  const int32_t* host_targets = host_rows_.data<int32_t>() + batch_ * local_seq_;
  const Tensor& losses = head_.forward(lnf_, targets_, host_targets, scratch_.region);  // tied to the embedding
  const float* l = losses.data<float>();
  const double sum = std::accumulate(l, l + losses.numel(), 0.0);
  const float loss = static_cast<float>(sum / static_cast<double>(batch_ * seq_));
  if (training) {  // the head's and the final norm's backward, now: dL/d(output) into dres
    head_.backward(scratch_.d_c, lnf_, targets_, grad_scale / static_cast<float>(batch_ * seq_), scratch_.region);
    a.dres.zero();
    ln_f_.backward(a.dres, scratch_.d_c, a.residual.back(), lnf_mean_, lnf_rstd_);
    units_->grads_done(ln_f_unit_, sync);
  } else {
    units_->release(ln_f_unit_);
    if (keep_embedding) units_->release(embed_unit_);
  }
  return loss;
}

void Gpt::backward_chunk(int chunk, int micro, parallel::GradSync* sync, bool defer_weights) {
  const Chunk& c = chunks_[chunk];
  Activations& a = slot(chunk, micro);
  for (int64_t j = c.blocks(); j-- > 0;) {
    const size_t b = c.block_base + static_cast<size_t>(j);
    if (defer_weights) {  // the parameters' values only (ZeRO-3): their gradients wait for W
      units_->gather(block_unit(b), false);
      blocks_[b].backward(a.dres, a.residual[j], a.saved[j], scratch_, &a.block_weight_grads[j]);
      units_->release(block_unit(b));
      continue;
    }
    units_->gather(block_unit(b), true);
    blocks_[b].backward(a.dres, a.residual[j], a.saved[j], scratch_);
    units_->grads_done(block_unit(b), sync);
  }
  if (!c.embedding) return;
  if (defer_weights) {
    a.embedding_weight_grads.embedding(embed_, a.dres, a.inputs, first_position_, scratch_.region);
    return;
  }
  if (!c.head) units_->gather(embed_unit_, true);
  embed_.backward(a.dres, a.inputs, first_position_, scratch_.region);
  units_->grads_done(embed_unit_, sync);
}

void Gpt::backward_weights_chunk(int chunk, int micro, parallel::GradSync* sync) {
  const Chunk& c = chunks_[chunk];
  Activations& a = slot(chunk, micro);
  for (int64_t j = c.blocks(); j-- > 0;) {
    const size_t b = c.block_base + static_cast<size_t>(j);
    units_->gather(block_unit(b), true);
    a.block_weight_grads[j].run();
    units_->grads_done(block_unit(b), sync);
  }
  if (c.embedding) {
    units_->gather(embed_unit_, true);
    a.embedding_weight_grads.run();
    units_->grads_done(embed_unit_, sync);
  }
}

float Gpt::forward(const int32_t* rows) {
  const float loss = forward_chunk(0, 0, rows, false);
  release(0, 0);
  return loss;
}

float Gpt::forward_backward(const int32_t* rows, float grad_scale, parallel::GradSync* sync) {
  TESSERA_CHECK(chunks_.size() == 1 && chunks_[0].embedding && chunks_[0].head,
                "Gpt::forward_backward runs the whole model: on a pipeline stage use forward_chunk/backward_chunk");
  const float loss = forward_chunk(0, 0, rows, true, grad_scale, sync);
  backward_chunk(0, 0, sync);
  release(0, 0);
  return loss;
}

}  // namespace tessera::models
