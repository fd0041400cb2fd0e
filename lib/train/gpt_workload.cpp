// GptWorkload: token batches into the Gpt; evaluation; the --dump files of the PyTorch oracle.
#include "train/gpt_workload.h"

#include <algorithm>

#include "io/hdf5_file.h"
#include "kernels/kernel_timing.h"

namespace tessera::train {

GptWorkload::GptWorkload(models::Gpt& model, const io::TokenDataset& train_data, const io::TokenDataset* val_data,
                         const TrainConfig& config, comm::ProcessMesh& mesh)
    : GptWorkload(model,
                  io::TokenLoader(train_data, config.seq_len, config.global_batch, config.seed,
                                  io::parse_sampling(config.sampling)),
                  val_data, config, mesh) {}

GptWorkload::GptWorkload(models::Gpt& model, io::TokenLoader train_loader, const io::TokenDataset* val_data,
                         const TrainConfig& config, comm::ProcessMesh& mesh)
    : ModelStage(model),
      model_(model),
      config_(config),
      dp_rank_(mesh.coord(comm::Axis::dp)),
      dp_(mesh.shape().dp),
      share_rank_(mesh.batch_share()),
      shares_(mesh.batch_shares()),
      micro_batches_(config.micro_batches(mesh.shape().dp * shares_)),
      mesh_(mesh),
      train_loader_(std::move(train_loader)),
      rows_(static_cast<size_t>(config.micro_batch * (config.seq_len + 1))) {
  if (train_loader_.has_mask()) mask_rows_.resize(rows_.size());
  // An evaluation batch is a global batch, cut into this rank's rows as a training batch is.
  if (val_data) val_loader_.emplace(*val_data, config.seq_len, config.global_batch, config.seed);
  if (config.document_mask) {
    TESSERA_CHECK(train_loader_.has_documents(), train_loader_.data().path,
                  ": --document-mask needs its documents (/doc_offsets, read by TokenDataset::load_documents)");
    TESSERA_CHECK(!val_loader_ || val_loader_->has_documents(), val_loader_->data().path,
                  ": --document-mask needs the validation data's documents too (/doc_offsets)");
    segments_.resize(static_cast<size_t>(config.micro_batch * config.seq_len));
  }
  if (val_loader_ && val_loader_->has_mask()) mask_rows_.resize(rows_.size());
  comm::Communicator& pp = mesh.group(comm::Axis::pp);
  comm::Communicator& data = mesh.data_group();
  if (pp.size() > 1) {
    // An untied head (Llama's) has no mirror: the stages then share nothing (TiedWeights no-ops).
    const bool first = model.has_embedding(0) && model.config().tie_embeddings;
    const bool last = model.has_head(model.chunks() - 1);
    tied_ = std::make_unique<parallel::TiedWeights>(first ? &model.params() : nullptr, &model.units(), 0,
                                                    last ? model.tied_mirror() : nullptr, model.tied_param(), pp, data);
    runner_ = std::make_unique<PipelineRunner>(
        static_cast<PipelineStage&>(*this), pp,
        parallel::make_schedule(config.pp_schedule, pp.size(), static_cast<int>(micro_batches_), model.chunks()));
  }
}

int64_t GptWorkload::first_row(int64_t micro) const {
  return ((dp_rank_ * micro_batches_ + micro) * shares_ + share_rank_) * config_.micro_batch;
}

std::vector<Workload::StepMetric> GptWorkload::step_metrics() {
  // Token bytes the job's loaders have read so far (summed over ranks): the rows of the steps
  // trained and of the few prefetched, never more of the file.
  const StepMetric data_bytes{"data_bytes_read", static_cast<double>(train_loader_.bytes_read()), false};
  // A blend: the tokens each source has given the run so far (the same on every rank: a maximum).
  std::vector<StepMetric> blend;
  if (train_loader_.blended()) {
    const std::vector<int64_t> samples = train_loader_.source_samples(trained_step_);
    for (size_t k = 0; k < samples.size(); ++k)
      blend.push_back({"blend_tokens." + std::to_string(k), static_cast<double>(samples[k] * config_.seq_len), true});
  }
  if (model_.config().moe_every == 0) {
    blend.insert(blend.begin(), data_bytes);
    return blend;
  }
  // Contributions that add up over the job (the model divides out the ranks holding the same
  // value: models::Gpt::MoeStepStats): the auxiliary terms are loss shares (averaged over dp and
  // micro-batches like the loss); the drops are each token group's; loads are maxima.
  const models::Gpt::MoeStepStats s = model_.take_moe_stats();
  std::vector<StepMetric> metrics{{"aux_loss", s.aux_loss / static_cast<double>(micro_batches_ * dp_), false},
                                  {"dropped_tokens", s.dropped, false}, data_bytes};
  metrics.insert(metrics.end(), blend.begin(), blend.end());
  int64_t index = 0;
  for (int64_t i = 0; i < model_.config().layers; ++i)
    if (model_.config().is_moe_block(i))
      metrics.push_back({"expert_load.blocks." + std::to_string(i), s.max_load[static_cast<size_t>(index++)], true});
  return metrics;
}

GptWorkload::~GptWorkload() = default;

const int32_t* GptWorkload::train_segments(int64_t step, int64_t micro) {
  if (segments_.empty()) return nullptr;
  // Cut on the loader's thread with the step's rows (io::TokenBatch::segments): no offset read here.
  const kernels::KernelTimer timer(kernels::KernelKind::data, "data_wait");
  const io::TokenBatch& batch = step_batch(step);
  const auto n = static_cast<std::ptrdiff_t>(segments_.size());
  std::copy(batch.segments.begin() + micro * n, batch.segments.begin() + (micro + 1) * n, segments_.begin());
  return segments_.data();
}

const int32_t* GptWorkload::eval_segments(int64_t index) {
  if (segments_.empty()) return nullptr;
  val_loader_->eval_segments(index / micro_batches_, first_row(index % micro_batches_), config_.micro_batch,
                             segments_.data());
  return segments_.data();
}

float GptWorkload::forward(int64_t step, int chunk, int micro, float grad_scale, parallel::GradSync* sync) {
  trained_step_ = step;
  const bool needs_rows = model_.has_embedding(chunk) || model_.has_head(chunk);
  if (needs_rows) load_train_rows(step, micro);
  // Every stage has the micro-batch's segments (its prefetcher cuts them, reading no token where the
  // stage has no rows).
  return model_.forward_chunk(chunk, micro, rows_.data(), true, grad_scale, sync, mask_, train_segments(step, micro));
}

// Micro-batch `index` of an evaluation: micro-batch index % micro-batches of global batch
// index / micro-batches.
float GptWorkload::evaluate(int64_t index, int chunk) {
  if (model_.has_embedding(chunk) || model_.has_head(chunk)) load_eval_rows(index);
  return model_.forward_chunk(chunk, static_cast<int>(index), rows_.data(), false, 1.0f, nullptr, mask_,
                              eval_segments(index));
}

void GptWorkload::load_eval_rows(int64_t index) {
  const int64_t batch = index / micro_batches_, row = first_row(index % micro_batches_);
  val_loader_->eval_rows(batch, row, config_.micro_batch, rows_.data());
  mask_ = {};
  if (val_loader_->has_mask()) {
    val_loader_->eval_mask(batch, row, config_.micro_batch, mask_rows_.data());
    mask_ = {mask_rows_.data(), eval_denominator_};
  }
}

bool GptWorkload::needs_rows() const {
  for (int c = 0; c < model_.chunks(); ++c)
    if (model_.has_embedding(c) || model_.has_head(c)) return true;
  return false;
}

void GptWorkload::fill_step(io::TokenBatch& batch) const {
  const int64_t step0 = batch.step, rows = config_.micro_batch * train_loader_.row_len();
  const int64_t segments = config_.micro_batch * config_.seq_len;
  try {
    for (int64_t m = 0; m < micro_batches_; ++m) {
      if (!batch.tokens.empty())
        train_loader_.train_rows(step0, first_row(m), config_.micro_batch, batch.tokens.data() + m * rows);
      if (!batch.mask.empty())
        train_loader_.train_mask(step0, first_row(m), config_.micro_batch, batch.mask.data() + m * rows);
      if (!batch.segments.empty())
        train_loader_.train_segments(step0, first_row(m), config_.micro_batch, batch.segments.data() + m * segments);
    }
    if (!batch.mask.empty()) batch.mask_count = train_loader_.train_mask_count(step0);
  } catch (const Error& e) {
    fail("training step ", step0 + 1, ": ", e.what());
  }
}

void GptWorkload::start_prefetch(int64_t step0) {
  current_ = nullptr;
  prefetcher_.reset();
  // A stage that neither embeds nor scores reads no token, only the segments under --document-mask.
  const int64_t rows = needs_rows() ? micro_batches_ * config_.micro_batch * train_loader_.row_len() : 0;
  const int64_t segments = segments_.empty() ? 0 : micro_batches_ * config_.micro_batch * config_.seq_len;
  prefetcher_ = std::make_unique<io::TokenPrefetcher>([this](io::TokenBatch& b) { fill_step(b); }, step0, rows,
                                                      rows > 0 && train_loader_.has_mask(), segments);
}

void GptWorkload::start(int64_t first_step) {
  if (needs_rows() || !segments_.empty()) start_prefetch(first_step - 1);
}

const io::TokenBatch& GptWorkload::step_batch(int64_t step) {
  const int64_t step0 = step - 1;
  if (current_ == nullptr || current_->step != step0) {
    // The prefetcher hands out steps in order; a step out of that order starts a new one there.
    if (!prefetcher_ || prefetcher_->next_step() != step0) start_prefetch(step0);
    current_ = &prefetcher_->next();
  }
  return *current_;
}

int64_t GptWorkload::data_epoch(int64_t consumed_samples) const {
  if (train_loader_.blended()) return -1;  // each source its own epoch: data_state's data_blend_epochs
  return train_loader_.sampling() == io::Sampling::epoch ? train_loader_.epoch_of_sample(consumed_samples) : -1;
}

std::vector<std::pair<std::string, std::string>> GptWorkload::data_state(int64_t step) const {
  if (!train_loader_.blended()) return {};
  // What a resume continues from: the windows each source has given (and, for epochs, the epoch each
  // source is in). All are functions of (seed, step), recomputed on resume and checked against these.
  const std::vector<int64_t> samples = train_loader_.source_samples(step);
  std::vector<io::BlendSource> sources;
  std::string counts, epochs;
  for (int64_t k = 0; k < train_loader_.sources(); ++k) {
    sources.push_back(train_loader_.blend_source(k));
    const int64_t n = samples[static_cast<size_t>(k)];
    if (k > 0) {
      counts += ',';
      epochs += ',';
    }
    counts += std::to_string(n);
    epochs += std::to_string(train_loader_.source(k).epoch_of_sample(n));
  }
  std::vector<std::pair<std::string, std::string>> state{{"data_blend", io::blend_text(sources)},
                                                         {"data_blend_samples", counts}};
  if (train_loader_.sampling() == io::Sampling::epoch) state.emplace_back("data_blend_epochs", epochs);
  return state;
}

void GptWorkload::load_train_rows(int64_t step, int64_t micro) {
  const kernels::KernelTimer timer(kernels::KernelKind::data, "data_wait");
  const io::TokenBatch& batch = step_batch(step);
  const int64_t rows = config_.micro_batch * train_loader_.row_len();
  std::copy(batch.tokens.begin() + micro * rows, batch.tokens.begin() + (micro + 1) * rows, rows_.begin());
  mask_ = {};
  if (!batch.mask.empty()) {
    std::copy(batch.mask.begin() + micro * rows, batch.mask.begin() + (micro + 1) * rows, mask_rows_.begin());
    mask_ = {mask_rows_.data(), static_cast<double>(batch.mask_count) / static_cast<double>(micro_batches_ * dp_)};
  }
}

float GptWorkload::train_micro_batch(int64_t step, int64_t micro, float grad_scale, parallel::GradSync* sync) {
  trained_step_ = step;
  load_train_rows(step, micro);
  return model_.forward_backward(rows_.data(), grad_scale, sync, mask_, train_segments(step, micro));
}

Workload::Evaluation GptWorkload::evaluate() {
  // Global batches, as --eval-batches counts them: each rank runs its micro-batches of each, and
  // its loss is its share of each micro-batch's mean (as in training), so the shares add up over
  // dp x sp, ep and the grid's rows, and the micro-batch means average over micro-batches and dp.
  const int64_t batches = std::min(config_.eval_batches, val_loader_->eval_batches());
  const int64_t micro_batches = batches * micro_batches_;
  if (val_loader_->has_mask())  // every rank counts the evaluation's targets itself: the same everywhere
    eval_denominator_ = static_cast<double>(val_loader_->eval_mask_count(batches)) /
                        static_cast<double>(micro_batches * dp_);
  double loss = 0.0;
  if (runner_) {
    loss = runner_->evaluate(micro_batches);  // summed over the stages: the last one's
  } else {
    for (int64_t i = 0; i < micro_batches; ++i) {
      load_eval_rows(i);
      loss += model_.forward(rows_.data(), mask_, eval_segments(i));
    }
  }
  loss = mesh_.sum_batch_shares(loss, false);  // the pipeline's runner summed over its stages
  return {loss / static_cast<double>(micro_batches * dp_), std::nullopt};
}

std::string GptWorkload::model_name() const {
  const models::GptConfig& m = model_.config();
  if (m.llama()) return m.moe_every > 0 ? "moe_llama" : "llama";
  return m.moe_every > 0 ? "moe_gpt" : "gpt";
}

std::vector<std::pair<std::string, int64_t>> GptWorkload::model_config() const {
  const models::GptConfig& m = model_.config();
  std::vector<std::pair<std::string, int64_t>> c{
      {"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads}, {"vocab", m.vocab}};
  // gpt2's learned positions fix the longest sequence; Llama's rotary ones do not.
  if (m.llama()) {
    c.insert(c.end(), {{"kv_heads", m.kv()}, {"ffn_hidden", m.mlp_hidden()}, {"tie_embeddings", m.tie_embeddings}});
  } else {
    c.emplace_back("max_seq", m.max_seq);
  }
  if (m.moe_every > 0) {
    c.insert(c.end(), {{"moe_every", m.moe_every}, {"experts", m.moe.experts}, {"expert_hidden", m.moe.hidden},
                       {"top_k", m.moe.router.top_k}, {"shared_experts", m.moe.shared_experts}});
    // --router-norm as what it computes: whether the gates are renormalised over the chosen experts.
    const nn::RouterOptions& r = m.moe.router;
    const bool renormalised =
        r.norm == nn::RouterNorm::softmax_topk || (r.norm == nn::RouterNorm::auto_ && r.top_k == 2);
    c.emplace_back("gates_renormalised", renormalised ? 1 : 0);
  }
  return c;
}

std::vector<std::pair<std::string, double>> GptWorkload::model_values() const {
  const models::GptConfig& m = model_.config();
  if (!m.llama()) return {};
  return {{"norm_eps", m.norm_eps}, {"rope_theta", m.rope_theta}};
}

void GptWorkload::dump_initial(const std::string& path) {
  io::H5File f = io::H5File::create(path);
  const models::GptConfig& m = model_.config();
  f.set_attr("/", "layers", m.layers);
  f.set_attr("/", "hidden", m.hidden);
  f.set_attr("/", "heads", m.heads);
  f.set_attr("/", "arch", std::string(models::arch_name(m.arch)));
  f.set_attr("/", "kv_heads", m.kv());
  f.set_attr("/", "ffn_hidden", m.mlp_hidden());
  f.set_attr("/", "norm_eps", static_cast<double>(m.norm_eps));
  f.set_attr("/", "rope_theta", static_cast<double>(m.rope_theta));
  f.set_attr("/", "tie_embeddings", static_cast<int64_t>(m.tie_embeddings));
  f.set_attr("/", "seq_len", config_.seq_len);
  f.set_attr("/", "vocab_size", m.vocab);
  f.set_attr("/", "global_batch", config_.global_batch);
  f.set_attr("/", "steps", config_.steps);
  f.set_attr("/", "beta1", static_cast<double>(config_.adamw.beta1));
  f.set_attr("/", "beta2", static_cast<double>(config_.adamw.beta2));
  f.set_attr("/", "eps", static_cast<double>(config_.adamw.eps));
  f.set_attr("/", "weight_decay", static_cast<double>(config_.adamw.weight_decay));
  f.set_attr("/", "grad_clip", static_cast<double>(config_.grad_clip));
  nn::ParamStore& store = model_.params();
  for (int i = 0; i < store.size(); ++i) f.write("/init/" + store.spec(i).name, store.logical_copy(store.value(i), i));
  for (int64_t step = 1; step <= config_.steps; ++step) {
    Tensor rows = Tensor::empty({config_.global_batch, config_.seq_len + 1}, DType::i32);
    train_loader_.train_rows(step - 1, 0, config_.global_batch, rows.data<int32_t>());
    f.write("/batches/step_" + std::to_string(step), rows);
    if (segments_.empty()) continue;
    Tensor segments = Tensor::empty({config_.global_batch, config_.seq_len}, DType::i32);  // --document-mask
    train_loader_.train_segments(step - 1, 0, config_.global_batch, segments.data<int32_t>());
    f.write("/segments/step_" + std::to_string(step), segments);
  }
}

void GptWorkload::dump_first_step(const std::string& path) {
  TESSERA_CHECK(config_.micro_batches() == 1, "--dump needs --micro-batch equal to --global-batch");
  io::H5File f = io::H5File::open_rw(path);
  nn::ParamStore& store = model_.params();
  for (int i = 0; i < store.size(); ++i)
    f.write("/step_1/grads/" + store.spec(i).name, store.logical_copy(store.grad(i), i));
  // Logits of the same batch, without touching the gradients.
  train_loader_.train_rows(0, 0, config_.micro_batch, rows_.data());
  const float loss = model_.forward(rows_.data(), {}, train_segments(1, 0));
  const Tensor all = model_.logits().to(Device::cpu);
  const int64_t vp = all.dim(2), v = model_.config().vocab, n = all.numel() / vp;
  Tensor logits = Tensor::empty({all.dim(0), all.dim(1), v});
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < v; ++j) logits.data<float>()[r * v + j] = all.data<float>()[r * vp + j];
  f.write("/step_1/logits", logits);
  Tensor l = Tensor::empty({1});
  l.data<float>()[0] = loss;
  f.write("/step_1/loss", l);
}

}  // namespace tessera::train
