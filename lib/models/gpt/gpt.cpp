// Gpt: construction (parameters, activations) and the forward/backward of one micro-batch.
#include "models/gpt/gpt.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "kernels/ops.h"
#include "models/whole_model.h"

namespace tessera::models {

namespace {
constexpr float kInitStd = 0.02f;
// GPT-2's scaled initialisation of the projections into the residual stream (Llama: not scaled).
float proj_init_std(const GptConfig& config) {
  if (config.llama()) return kInitStd;
  return kInitStd / std::sqrt(2.0f * static_cast<float>(config.layers));
}
}  // namespace

const char* arch_name(Arch arch) { return arch == Arch::llama ? "llama" : "gpt2"; }

Arch parse_arch(const std::string& name) {
  if (name == "gpt2") return Arch::gpt2;
  if (name == "llama") return Arch::llama;
  fail("--arch ", name, ": expected gpt2 or llama");
}

int64_t GptConfig::llama_ffn_hidden(int64_t hidden) {
  const int64_t third = 8 * hidden / 3;
  return (third + 255) / 256 * 256;
}

int64_t GptConfig::mlp_hidden() const {
  if (!llama()) return ffn_hidden > 0 ? ffn_hidden : 4 * hidden;  // set for gpt2 only by the planners' ViT blocks
  return ffn_hidden > 0 ? ffn_hidden : llama_ffn_hidden(hidden);
}

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
  if (!llama()) {
    TESSERA_CHECK(kv_heads == 0 || kv_heads == heads, "--kv-heads is Llama's (--arch llama); gpt2 has as many",
                  " kv heads as heads");
    TESSERA_CHECK(ffn_hidden == 0, "--ffn-hidden is Llama's (--arch llama); gpt2's MLP is 4 x --hidden");
    TESSERA_CHECK(tie_embeddings, "gpt2's head is tied to the token embedding (--tie-embeddings)");
    return;
  }
  TESSERA_CHECK(kv_heads >= 0 && heads % kv() == 0, "--kv-heads ", kv_heads, " does not divide --heads ", heads);
  TESSERA_CHECK((hidden / heads) % 2 == 0, "rotary positions need an even head size: --hidden ", hidden,
                " / --heads ", heads, " is ", hidden / heads);
  TESSERA_CHECK(kv() % tp == 0 || tp % kv() == 0, "--kv-heads ", kv(), " and --tp ", tp, ": tensor parallelism",
                " splits the kv heads (--tp divides --kv-heads) or replicates them (--kv-heads divides --tp)");
  TESSERA_CHECK(ffn_hidden >= 0, "--ffn-hidden must be >= 0 (0: Llama's default), got ", ffn_hidden);
  TESSERA_CHECK(mlp_hidden() % tp == 0, "--ffn-hidden ", mlp_hidden(), " is not divisible by --tp ", tp);
  TESSERA_CHECK(norm_eps > 0, "--norm-eps must be > 0, got ", norm_eps);
  TESSERA_CHECK(rope_theta > 1, "--rope-theta must be > 1, got ", rope_theta);
}

int64_t GptConfig::moe_blocks() const {
  int64_t n = 0;
  for (int64_t i = 0; i < layers; ++i) n += is_moe_block(i);
  return n;
}

nn::MoeConfig Gpt::moe_block_config(const GptConfig& config) {
  nn::MoeConfig moe = config.moe;
  moe.channels = config.hidden;
  if (moe.hidden == 0) moe.hidden = config.llama() ? config.mlp_hidden() : 4 * config.hidden;
  moe.init_std = kInitStd;
  moe.proj_init_std = proj_init_std(config);
  moe.swiglu = config.llama();  // Mixtral's experts
  return moe;
}

Gpt::Modules Gpt::register_modules(const GptConfig& config, const nn::MoeConfig& moe, const ModelLayout& layout,
                                   const std::vector<ModelChunk>& chunks, nn::ParamStore& store, nn::ParamStore& mirror) {
  TESSERA_CHECK(config.moe_every >= 0, "--moe-every must be >= 0, got ", config.moe_every);
  TESSERA_CHECK(config.moe_every > 0 || layout.experts->size() == 1,
                "expert parallelism (--ep) needs mixture-of-experts blocks (moe_train)");
  TESSERA_CHECK(config.moe_every == 0 || config.moe_blocks() > 0, "--moe-every ", config.moe_every,
                " is more than --layers ", config.layers, ": no block would have experts");
  const ActivationCheckpointing& ckpt = layout.checkpointing;
  TESSERA_CHECK(ckpt.every >= 1 && (!ckpt.enabled() || ckpt.every <= config.layers), "--recompute-every-k-blocks ",
                ckpt.every, " must be in [1, --layers ", config.layers, "]");
  const int64_t c = config.hidden;
  Modules m;
  const bool first_stage = chunks.front().embedding, last_stage = chunks.back().head;
  const bool tied = config.tie_embeddings;
  if (first_stage || (last_stage && tied)) {
    if (first_stage) m.unit_first_param.push_back(store.size());
    m.embed = nn::Embedding(first_stage ? store : mirror, "embed", config.vocab, config.llama() ? 0 : config.max_seq,
                            c, config.pad_vocab_to, kInitStd, *layout.tensor);
  }
  nn::BlockConfig block{c, config.heads, config.mlp_hidden(), kInitStd, proj_init_std(config)};
  if (config.llama()) {
    block.norm = nn::NormKind::rms;
    block.norm_eps = config.norm_eps;
    block.attention = {config.kv(), config.rope_theta};
    block.swiglu = true;
  }
  for (const ModelChunk& ch : chunks)
    for (int64_t i = ch.first_block; i < ch.end_block; ++i) {
      nn::BlockConfig b = block;
      if (config.is_moe_block(i)) b.moe = &moe;
      b.recompute = ckpt.of_block(i);
      m.unit_first_param.push_back(store.size());
      m.blocks.emplace_back(store, "blocks." + std::to_string(i), b, *layout.tensor, *layout.sequence,
                            *layout.experts);
    }
  if (last_stage) {  // one unit: the final norm and an untied head's table
    m.unit_first_param.push_back(store.size());
    m.ln_f = nn::LayerNorm(store, "ln_f", c, *layout.tensor, config.norm_eps,
                           config.llama() ? nn::NormKind::rms : nn::NormKind::layer);
    if (!tied)
      m.head_table = nn::Embedding::head_table(store, "head", config.vocab, c, config.pad_vocab_to, kInitStd,
                                               *layout.tensor);
  }
  return m;
}

Gpt::StageParams Gpt::stage_params(const GptConfig& config, const ModelLayout& layout) {
  config.validate(layout.tensor->size());
  StageParams p;
  const nn::MoeConfig moe = moe_block_config(config);
  p.unit_first_param =
      register_modules(config, moe, layout, model_chunks(config.layers, layout.pipeline), p.store, p.mirror)
          .unit_first_param;
  return p;
}

Gpt::Gpt(const GptConfig& config, Device device, uint64_t seed, int64_t micro_batch, int64_t seq,
         const ModelLayout& layout)
    : config_(config),
      device_(device),
      batch_(micro_batch),
      seq_(seq),
      local_seq_(layout.sequence->local_length(seq)),
      first_position_(layout.sequence->offset(seq)),
      sequence_(layout.sequence),
      branch_sequences_(layout.tensor->branch_moves_sequences() ? layout.tensor : nullptr),
      rows_(layout.tensor->local_rows(micro_batch * layout.sequence->local_length(seq))),
      features_(layout.tensor->local_features(config.hidden)),
      token_share_(layout.experts->size() * layout.tensor->batch_parts()),
      activation_rounding_(layout.activations) {
  config.validate(layout.tensor->size());
  TESSERA_CHECK(config.llama() || seq <= config.max_seq, "sequence ", seq, " longer than the model's ",
                config.max_seq);
  TESSERA_CHECK(!(layout.tensor->splits_rows() && layout.sequence->size() > 1),
                "--sp-mode split_gather splits the sequence inside the tp group: it takes no --sp");
  const PipelinePlacement& pipe = layout.pipeline;
  chunks_ = model_chunks(config.layers, pipe);
  const bool first_stage = chunks_.front().embedding, last_stage = chunks_.back().head;

  moe_config_ = moe_block_config(config);
  moe_stats_.max_load.assign(static_cast<size_t>(config.moe_blocks()), 0.0);
  // 1D tp replicates the MoE layer's work on every tp rank; split_gather gives each its rows' share.
  aux_copies_ = layout.tensor->splits_rows() ? 1.0 : static_cast<double>(layout.tensor->size());
  drop_copies_ = aux_copies_ * layout.experts->size() * layout.experts->shard_size();
  if (layout.tensor->splits_rows() && config.moe_blocks() > 0) {
    aux_shards_ = layout.tensor;
    aux_sum_ = Tensor::empty({1});
  }
  mirror_ = std::make_unique<nn::ParamStore>();
  Modules m = register_modules(config, moe_config_, layout, chunks_, store_, *mirror_);
  embed_ = std::move(m.embed);
  head_table_ = std::move(m.head_table);
  blocks_ = std::move(m.blocks);
  ln_f_ = std::move(m.ln_f);
  block_unit_base_ = first_stage ? 1 : 0;
  ln_f_unit_ = block_unit_base_ + blocks_.size();
  units_ = std::make_unique<parallel::ParamUnits>(store_, m.unit_first_param, device, seed, layout.zero3,
                                                  layout.offload_params, layout.zero3_overlap);
  if (mirror_->size() > 0) {
    mirror_->allocate(device, seed);  // the same values as the first stage's table
  } else {
    mirror_.reset();
  }
  model_numel_ = whole_model_numel<Gpt>(config, layout, store_);

  auto act = [&](Shape s, DType t = DType::f32) { return Tensor::empty(std::move(s), t, device); };
  const int64_t b = micro_batch, t = local_seq_, n = b * t;
  slots_ = ActivationSlots<Activations>(chunks_.size(), [this](int c) { return allocate_activations(chunks_[c]); });
  scratch_ = blocks_.front().allocate_scratch(b, t, device);
  for (const nn::TransformerBlock& blk : blocks_)
    if (blk.is_moe()) {  // the experts' workspace, shared by the MoE blocks
      nn::TransformerBlock::Scratch moe_scratch = blk.allocate_scratch(b, t, device);
      scratch_.moe = moe_scratch.moe;
      scratch_.shared_dhidden = moe_scratch.shared_dhidden;
      scratch_.shared_dup = moe_scratch.shared_dup;
      break;
    }
  for (const nn::TransformerBlock& blk : blocks_)  // checkpointed blocks' shared buffers
    if (blk.recompute() != nn::Recompute::nothing && !recomputed_.count(recomputed_kind(blk)))
      recomputed_.emplace(recomputed_kind(blk), blk.allocate_recomputed(b, t, device));
  host_rows_ = Tensor::empty({2, b, t}, DType::i32);
  if (layout.sequence->zigzag()) {  // the learned positions and RoPE read each row's position from here
    Tensor positions = Tensor::empty({b, t}, DType::i32);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t pos = 0; pos < seq; ++pos)
        if (const int64_t n = layout.sequence->local_row(b, seq, bi, pos); n >= 0)
          positions.data<int32_t>()[n] = static_cast<int32_t>(pos);
    zigzag_positions_ = act({b, t}, DType::i32);
    zigzag_positions_.copy_from(positions);
  }
  if (last_stage) {
    targets_ = act({b, t}, DType::i32);
    lnf_ = act({rows_, features_});
    lnf_mean_ = act({rows_});
    lnf_rstd_ = act({rows_});
    head_ = config.tie_embeddings ? nn::LmHead(embed_, mirror_ ? *mirror_ : store_, n, device)
                                  : nn::LmHead(head_table_, store_, n, device);
  }
  if (!pipe.pipelined()) {  // one micro-batch's activations, allocated now
    slot(0, 0);
    release(0, 0);
  }
}

// An untied input table is a lookup, not a product: it is left out (a tied one is counted as the head).
double Gpt::flops_per_token() const {
  const int64_t lookup_only = config_.tie_embeddings ? 0 : config_.vocab * config_.hidden;
  return 6.0 * static_cast<double>(model_numel_ - lookup_only) +
         6.0 * static_cast<double>(config_.layers * seq_ * config_.hidden);
}

std::unique_ptr<Gpt::Activations> Gpt::allocate_activations(const ModelChunk& c) const {
  auto a = std::make_unique<Activations>();
  auto act = [&](Shape s, DType t = DType::f32) { return Tensor::empty(std::move(s), t, device_); };
  if (c.embedding) a->inputs = act({batch_, local_seq_}, DType::i32);
  allocate_block_activations(*a, c, blocks_, batch_, local_seq_, rows_, features_, device_,
                             [this](const nn::TransformerBlock& blk) {
                               const auto shared = recomputed_.find(recomputed_kind(blk));
                               return shared == recomputed_.end() ? nn::TransformerBlock::Saved{} : shared->second;
                             });
  return a;
}

void Gpt::release(int chunk, int micro) { slots_.release(chunk, micro); }

void Gpt::load_batch(Activations& a, const int32_t* rows, const uint8_t* mask) {
  int32_t* in = host_rows_.data<int32_t>();
  int32_t* tg = in + batch_ * local_seq_;
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t t = 0; t < seq_; ++t) {
      const int64_t n = sequence_->local_row(batch_, seq_, b, t);  // -1: another sp rank's position
      if (n < 0) continue;
      const int32_t* at = rows + b * (seq_ + 1) + t;
      in[n] = at[0];
      tg[n] = at[1];
      if (mask && mask[at + 1 - rows] == 0) tg[n] = -1;  // ignored by the head's loss
    }
  if (a.inputs.defined()) a.inputs.copy_from(host_rows_.rows(0, 1).reshape(a.inputs.shape()));
  if (targets_.defined()) targets_.copy_from(host_rows_.rows(1, 1).reshape(targets_.shape()));
}

// The micro-batch's document segments (the whole sequence's, every sp rank the same) and this rank's
// positions inside their documents, for the embedding's rows and for the blocks' (under 3D tp
// the branches hold other sequences: the tensor layout hands them theirs). Without documents the
// zigzag layout still gives each row its position (its two chunks are not one range).
void Gpt::load_documents(Activations& a, const int32_t* segments) const {
  if (!segments) {
    a.documents = {};
    a.documents.positions = zigzag_positions_;  // undefined unless zigzag
    a.stream_documents = a.documents;
    return;
  }
  auto allocate = [&](nn::DocumentMask& d) {
    if (d.segments.defined()) return;
    d.segments = Tensor::empty({batch_, seq_}, DType::i32);
    d.positions = Tensor::empty({batch_, local_seq_}, DType::i32);
  };
  nn::DocumentMask& stream = a.stream_documents;
  allocate(stream);
  std::copy(segments, segments + batch_ * seq_, stream.segments.data<int32_t>());
  document_positions(stream);
  if (!branch_sequences_) {
    a.documents = stream;
    return;
  }
  allocate(a.documents);
  branch_sequences_->branch_sequences(stream.segments, a.documents.segments);
  document_positions(a.documents);
}

void Gpt::document_positions(nn::DocumentMask& d) const {
  const int32_t* seg = d.segments.data<int32_t>();
  int32_t* pos = d.positions.data<int32_t>();
  for (int64_t b = 0; b < batch_; ++b) {
    const int32_t* row = seg + b * seq_;
    int64_t start = 0;  // the first position of the current document
    for (int64_t t = 0; t < sequence_->positions_end(seq_); ++t) {
      if (t > 0 && row[t] != row[t - 1]) start = t;
      if (const int64_t n = sequence_->local_row(batch_, seq_, b, t); n >= 0) pos[n] = static_cast<int32_t>(t - start);
    }
  }
}

// Under ZeRO-3 each block is gathered for its forward and again for its backward. Without a
// pipeline the embedding (also the tied head) and the final norm stay gathered from their forward
// to their backward; on a pipeline the embedding is gathered again for its backward, as the
// stage holds several micro-batches in flight. Overlapped, the first block's gather is posted as
// the embedding starts and, without a pipeline (backward follows at once), the last block's as the
// head starts.
float Gpt::forward_chunk(int chunk, int micro, const int32_t* rows, bool training, float grad_scale,
                         parallel::GradSync* sync, const LossMask& mask, const int32_t* segments) {
  const ModelChunk& c = chunks_[chunk];
  Activations& a = slot(chunk, micro);
  if (c.embedding || c.head) load_batch(a, rows, mask.rows);
  TESSERA_CHECK(!segments || device_ == Device::cpu, "--document-mask: document masking has no CUDA kernel yet;",
                " train with it on the CPU (--device cpu)");
  load_documents(a, segments);
  const bool keep_embedding = c.embedding && c.head;  // the head on this chunk reads the table
  a.grad_scale = grad_scale;
  float aux = 0.0f;
  if (c.embedding) {
    units_->gather(embed_unit_, training && keep_embedding);
    if (c.blocks() > 0) units_->prefetch(block_unit_base_ + c.block_base);
    embed_.forward(a.residual[0], a.inputs, first_position_, scratch_.region, a.stream_documents.positions);
    activation_rounding_.round(a.residual[0]);
    if (!keep_embedding) units_->release(embed_unit_);
  }
  aux += forward_blocks(stage_blocks(), c, a, activation_rounding_, [&](int64_t j) {
    const size_t b = c.block_base + static_cast<size_t>(j);
    if (training && blocks_[b].is_moe()) record_moe_stats(c.first_block + j, a.saved[j].moe.stats);
  });
  if (!training) aux = 0.0f;  // evaluation reports the language-model loss alone
  bool chunk_has_moe = false;
  for (int64_t i = c.first_block; i < c.first_block + c.blocks(); ++i) chunk_has_moe |= config_.is_moe_block(i);
  if (training && aux_shards_ && chunk_has_moe) {  // all-reduce(tp) of the aux shares (split_gather)
    aux_sum_.data<float>()[0] = aux;
    aux_shards_->all_reduce(aux_sum_);
    aux = aux_sum_.data<float>()[0];
  }
  if (!c.head) return aux;
  units_->gather(ln_f_unit_, training);
  if (training && keep_embedding && c.blocks() > 0) units_->prefetch(block_unit_base_ + c.block_base + c.blocks() - 1);
  ln_f_.forward(lnf_, lnf_mean_, lnf_rstd_, a.residual.back());
  const int32_t* host_targets = host_rows_.data<int32_t>() + batch_ * local_seq_;
  const Tensor& losses = head_.forward(lnf_, targets_, host_targets, scratch_.region);  // tied to the embedding
  const float* l = losses.data<float>();
  const double sum = std::accumulate(l, l + losses.numel(), 0.0);
  // This rank's share of the mean over the micro-batch's sequences, which ep ranks split; under a
  // loss mask, over the counted positions (the caller's denominator: 0 when none counts, and then
  // every target here is ignored and the sum is 0).
  const double tokens = mask.rows == nullptr ? static_cast<double>(batch_ * token_share_ * seq_)
                                             : (mask.denominator > 0 ? mask.denominator : 1.0);
  const float loss = static_cast<float>(sum / tokens);
  if (training) {  // the head's and the final norm's backward, now: dL/d(output) into dres
    head_.backward(scratch_.d_c, lnf_, targets_, grad_scale / static_cast<float>(tokens), scratch_.region);
    a.dres.zero();
    ln_f_.backward(a.dres, scratch_.d_c, a.residual.back(), lnf_mean_, lnf_rstd_);
    units_->grads_done(ln_f_unit_, sync);
  } else {
    units_->release(ln_f_unit_);
    if (keep_embedding) units_->release(embed_unit_);
  }
  return loss + aux;
}

void Gpt::record_moe_stats(int64_t block, const nn::MoeStats& s) {
  int64_t index = 0;  // among the model's MoE blocks
  for (int64_t i = 0; i < block; ++i) index += config_.is_moe_block(i);
  moe_stats_.aux_loss +=
      (moe_config_.router.aux_loss_coef * s.aux_loss + moe_config_.router.z_loss_coef * s.z_loss) / aux_copies_;
  moe_stats_.dropped += static_cast<double>(s.dropped) / drop_copies_;
  double& load = moe_stats_.max_load[static_cast<size_t>(index)];
  load = std::max(load, s.max_load());
}

Gpt::MoeStepStats Gpt::take_moe_stats() {
  MoeStepStats taken = moe_stats_;
  moe_stats_ = {0.0, 0.0, std::vector<double>(taken.max_load.size(), 0.0)};
  return taken;
}

void Gpt::backward_chunk(int chunk, int micro, parallel::GradSync* sync, bool defer_weights) {
  const ModelChunk& c = chunks_[chunk];
  Activations& a = slot(chunk, micro);
  backward_blocks(stage_blocks(), c, a, sync, defer_weights, a.grad_scale);
  if (c.embedding && defer_weights) {
    a.embedding_weight_grads.embedding(embed_, a.dres, a.inputs, first_position_, scratch_.region,
                                       a.stream_documents.positions);
  } else if (c.embedding) {
    if (!c.head) units_->gather(embed_unit_, true);
    embed_.backward(a.dres, a.inputs, first_position_, scratch_.region, a.stream_documents.positions);
    units_->grads_done(embed_unit_, sync);
  }
  units_->finish_grads();  // ZeRO-3: the reduce-scatters still in flight, into the shard
}

void Gpt::backward_weights_chunk(int chunk, int micro, parallel::GradSync* sync) {
  const ModelChunk& c = chunks_[chunk];
  Activations& a = slot(chunk, micro);
  backward_block_weights(stage_blocks(), c, a, sync);
  if (c.embedding) {
    units_->gather(embed_unit_, true);
    a.embedding_weight_grads.run();
    units_->grads_done(embed_unit_, sync);
  }
  units_->finish_grads();  // ZeRO-3: the reduce-scatters still in flight, into the shard
}

float Gpt::forward(const int32_t* rows, const LossMask& mask, const int32_t* segments) {
  const float loss = forward_chunk(0, 0, rows, false, 1.0f, nullptr, mask, segments);
  release(0, 0);
  return loss;
}

float Gpt::forward_backward(const int32_t* rows, float grad_scale, parallel::GradSync* sync, const LossMask& mask,
                           const int32_t* segments) {
  TESSERA_CHECK(chunks_.size() == 1 && chunks_[0].embedding && chunks_[0].head,
                "Gpt::forward_backward runs the whole model: on a pipeline stage use forward_chunk/backward_chunk");
  const float loss = forward_chunk(0, 0, rows, true, grad_scale, sync, mask, segments);
  backward_chunk(0, 0, sync);
  release(0, 0);
  return loss;
}

}  // namespace tessera::models
