// TokenLoader: Philox-drawn (random) or permuted (epoch) training windows and in-order evaluation
// windows over a token data set, each row read on demand.
#include "io/token_loader.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "core/error.h"
#include "core/philox.h"
#include "io/document_index.h"

namespace tessera::io {

Sampling parse_sampling(const std::string& name) {
  if (name == "random") return Sampling::random;
  if (name == "epoch") return Sampling::epoch;
  fail("--sampling ", name, ": expected random (windows anywhere, with replacement) or epoch (every window once",
       " per epoch)");
}

const char* sampling_name(Sampling s) { return s == Sampling::epoch ? "epoch" : "random"; }

TokenLoader::TokenLoader(const TokenDataset& data, int64_t seq_len, int64_t global_batch, uint64_t seed,
                         Sampling sampling)
    : data_(data), seq_len_(seq_len), global_batch_(global_batch), seed_(seed),
      stream_(stream_id("loader.train")), sampling_(sampling), mask_(data.has_mask()) {
  TESSERA_CHECK(seq_len >= 1, "sequence length must be at least 1, got ", seq_len);
  TESSERA_CHECK(global_batch >= 1, "global batch must be at least 1, got ", global_batch);
  if (size() < seq_len + 1)
    fail("sequence length ", seq_len, " needs at least ", seq_len + 1, " tokens, ", data_.path,
         data_.split.empty() ? "" : " (" + data_.split + ")", " has ", size());
  if (sampling == Sampling::epoch) permutation_.emplace(epoch_windows(), seed, stream_id("loader.epoch"));
}

namespace {
constexpr int64_t kCountStride = 16;  // steps between cached per-source sample counts
}  // namespace

struct TokenLoader::Counts {
  std::mutex mutex;
  std::vector<int64_t> at;  // snapshot j: samples per source over steps [0, j * kCountStride)
  int64_t last_step = -1;   // the step last asked for and its counts: steps in order cost one batch
  std::vector<int64_t> last;
};

TokenLoader::TokenLoader(const std::vector<BlendSource>& sources, const std::vector<TokenDataset>& data,
                         int64_t seq_len, int64_t global_batch, uint64_t seed, Sampling sampling)
    : TokenLoader(data.at(0), seq_len, global_batch, seed, sampling) {
  TESSERA_CHECK(!sources.empty() && sources.size() == data.size(), "a blend needs one data set per source");
  double sum = 0;
  for (const BlendSource& b : sources) {
    TESSERA_CHECK(std::isfinite(b.weight) && b.weight >= 0, "blend: the weight of ", b.path, " is ", b.weight,
                  "; blend weights must be finite and >= 0");
    sum += b.weight;
  }
  TESSERA_CHECK(sum > 0, "blend: the weights sum to zero; give at least one source a positive weight");
  const uint64_t seeds = stream_id("loader.blend.seed");
  double running = 0;
  for (size_t k = 0; k < sources.size(); ++k) {
    const TokenDataset& d = data[k];
    if (d.vocab_size != data[0].vocab_size || d.tokenizer != data[0].tokenizer)
      fail("blend: the sources disagree on their vocabulary: ", sources[0].path, " has vocab_size ",
           data[0].vocab_size, " (tokenizer ", data[0].tokenizer, "), ", sources[k].path, " has vocab_size ",
           d.vocab_size, " (tokenizer ", d.tokenizer, ")");
    const PhiloxCounter w = philox_bits(seed, seeds, k);
    sources_.emplace_back(d, seq_len, 1, (static_cast<uint64_t>(w[1]) << 32) | w[0], sampling);
    mask_ = mask_ || d.has_mask();
    running += sources[k].weight;
    cumulative_.push_back(running / sum);
  }
  cumulative_.back() = 1.0;  // every draw in [0, 1) finds a source
  blend_ = sources;
  blend_stream_ = stream_id("loader.blend");
  counts_ = std::make_shared<Counts>();
  counts_->at.assign(sources.size(), 0);
}

int64_t TokenLoader::train_source(int64_t step, int64_t row) const {
  if (!blended()) return 0;
  const uint64_t index = static_cast<uint64_t>(step) * static_cast<uint64_t>(global_batch_) +
                         static_cast<uint64_t>(row);
  const PhiloxCounter w = philox_bits(seed_, blend_stream_, index);
  const double u = static_cast<double>(((static_cast<uint64_t>(w[1]) << 32) | w[0]) >> 11) * 0x1p-53;
  const auto k = std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin();
  return std::min<int64_t>(k, sources() - 1);
}

void TokenLoader::source_samples_at(int64_t step, int64_t* counts) const {
  const auto n = static_cast<size_t>(sources());
  const auto advance = [&](int64_t from, int64_t to, int64_t* c) {
    for (int64_t s = from; s < to; ++s)
      for (int64_t r = 0; r < global_batch_; ++r) ++c[train_source(s, r)];
  };
  const int64_t snapshot = step / kCountStride;
  const std::lock_guard<std::mutex> lock(counts_->mutex);
  std::vector<int64_t>& at = counts_->at;
  while (static_cast<int64_t>(at.size() / n) <= snapshot) {
    const int64_t last = static_cast<int64_t>(at.size() / n) - 1;
    std::vector<int64_t> next(at.end() - static_cast<std::ptrdiff_t>(n), at.end());
    advance(last * kCountStride, (last + 1) * kCountStride, next.data());
    at.insert(at.end(), next.begin(), next.end());
  }
  // From the step last asked for when it lies between the snapshot and this step, else the snapshot.
  int64_t from = snapshot * kCountStride;
  if (counts_->last_step >= from && counts_->last_step <= step) {
    from = counts_->last_step;
    std::copy_n(counts_->last.begin(), n, counts);
  } else {
    std::copy_n(at.begin() + static_cast<std::ptrdiff_t>(snapshot * static_cast<int64_t>(n)), n, counts);
  }
  advance(from, step, counts);
  counts_->last_step = step;
  counts_->last.assign(counts, counts + n);
}

std::vector<int64_t> TokenLoader::source_samples(int64_t step) const {
  TESSERA_CHECK(step >= 0, "source_samples: negative step ", step);
  std::vector<int64_t> counts(static_cast<size_t>(std::max<int64_t>(sources(), 1)), 0);
  if (!blended()) {
    counts[0] = step * global_batch_;
    return counts;
  }
  source_samples_at(step, counts.data());
  return counts;
}

void TokenLoader::blend_rows(int64_t step, int64_t end, std::vector<std::pair<int64_t, int64_t>>& out) const {
  std::vector<int64_t> counts = source_samples(step);
  out.resize(static_cast<size_t>(end));
  for (int64_t r = 0; r < end; ++r) {
    const int64_t k = train_source(step, r);
    out[static_cast<size_t>(r)] = {k, counts[static_cast<size_t>(k)]++};
  }
}

int64_t TokenLoader::bytes_read() const {
  if (!blended()) return data_.bytes_read();
  int64_t bytes = 0;
  for (const TokenLoader& s : sources_) bytes += s.data().bytes_read();
  return bytes;
}

int64_t TokenLoader::train_start(int64_t step, int64_t row) const {
  if (blended()) {
    std::vector<std::pair<int64_t, int64_t>> rows;
    blend_rows(step, row + 1, rows);
    const auto [k, n] = rows.back();
    return source(k).train_start(n, 0);
  }
  const uint64_t index = static_cast<uint64_t>(step) * static_cast<uint64_t>(global_batch_) +
                         static_cast<uint64_t>(row);
  if (sampling_ == Sampling::epoch) {
    const auto sample = static_cast<int64_t>(index), windows = epoch_windows();
    return permutation_->at(sample / windows, sample % windows) * row_len();
  }
  const PhiloxCounter w = philox_bits(seed_, stream_, index);
  const uint64_t bits = (static_cast<uint64_t>(w[1]) << 32) | w[0];
  const uint64_t starts = static_cast<uint64_t>(size() - seq_len_);  // [0, size - seq_len - 1]
  // Multiply-shift maps 64 uniform bits onto [0, starts) (bias below 2^-32 for any data set here).
  return static_cast<int64_t>((static_cast<unsigned __int128>(bits) * starts) >> 64);
}

int64_t TokenLoader::eval_start(int64_t batch_index, int64_t row) const {
  const int64_t window = batch_index * global_batch_ + row;
  return (window * seq_len_) % (size() - seq_len_);
}

int64_t TokenLoader::eval_batches() const {
  const int64_t windows = (size() - 1) / seq_len_;  // full, non-overlapping windows
  return std::max<int64_t>(1, (windows + global_batch_ - 1) / global_batch_);
}

void TokenLoader::check_rows(const char* what, int64_t first_row, int64_t count, const int32_t* out) const {
  TESSERA_CHECK(first_row >= 0 && count >= 0 && first_row + count <= global_batch_, what, ": rows [",
                first_row, ", ", first_row + count, ") are outside the global batch of ", global_batch_);
  TESSERA_CHECK(out != nullptr || count == 0, what, ": null output buffer");
}

void TokenLoader::copy_row(int64_t start, int32_t* out) const { data_.read(start, seq_len_ + 1, out); }

void TokenLoader::train_rows(int64_t step, int64_t first_row, int64_t count, int32_t* out) const {
  TESSERA_CHECK(step >= 0, "train_rows: negative step ", step);
  check_rows("train_rows", first_row, count, out);
  if (blended()) {
    std::vector<std::pair<int64_t, int64_t>> rows;
    blend_rows(step, first_row + count, rows);
    for (int64_t i = 0; i < count; ++i) {
      const auto [k, n] = rows[static_cast<size_t>(first_row + i)];
      source(k).copy_row(source(k).train_start(n, 0), out + i * row_len());
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) copy_row(train_start(step, first_row + i), out + i * row_len());
}

bool TokenLoader::has_documents() const {
  if (!blended()) return data_.has_documents();
  for (const TokenLoader& s : sources_)
    if (!s.has_documents()) return false;
  return true;
}

void TokenLoader::row_segments(int64_t start, int32_t* out) const {
  data_.documents->segments(start, seq_len_, out);
}

void TokenLoader::train_segments(int64_t step, int64_t first_row, int64_t count, int32_t* out) const {
  TESSERA_CHECK(has_documents(), data_.path, ": --document-mask needs the data set's documents (/doc_offsets)");
  TESSERA_CHECK(step >= 0 && first_row >= 0 && count >= 0 && first_row + count <= global_batch_,
                "train_segments: rows [", first_row, ", ", first_row + count, ") of step ", step,
                " are outside the global batch of ", global_batch_);
  if (blended()) {
    std::vector<std::pair<int64_t, int64_t>> rows;
    blend_rows(step, first_row + count, rows);
    for (int64_t i = 0; i < count; ++i) {
      const auto [k, n] = rows[static_cast<size_t>(first_row + i)];
      source(k).row_segments(source(k).train_start(n, 0), out + i * seq_len_);
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) row_segments(train_start(step, first_row + i), out + i * seq_len_);
}

void TokenLoader::eval_segments(int64_t batch_index, int64_t first_row, int64_t count, int32_t* out) const {
  TESSERA_CHECK(has_documents(), data_.path, ": --document-mask needs the data set's documents (/doc_offsets)");
  for (int64_t i = 0; i < count; ++i) row_segments(eval_start(batch_index, first_row + i), out + i * seq_len_);
}

void TokenLoader::eval_rows(int64_t batch_index, int64_t first_row, int64_t count, int32_t* out) const {
  TESSERA_CHECK(batch_index >= 0, "eval_rows: negative batch index ", batch_index);
  check_rows("eval_rows", first_row, count, out);
  for (int64_t i = 0; i < count; ++i)
    copy_row(eval_start(batch_index, first_row + i), out + i * row_len());
}

void TokenLoader::copy_mask_row(int64_t start, uint8_t* out) const {
  if (data_.has_mask()) {
    data_.read_mask(start, seq_len_ + 1, out);
  } else {
    std::fill(out, out + seq_len_ + 1, uint8_t{1});
  }
}

void TokenLoader::train_mask(int64_t step, int64_t first_row, int64_t count, uint8_t* out) const {
  TESSERA_CHECK(step >= 0, "train_mask: negative step ", step);
  TESSERA_CHECK(first_row >= 0 && count >= 0 && first_row + count <= global_batch_, "train_mask: rows [", first_row,
                ", ", first_row + count, ") are outside the global batch of ", global_batch_);
  if (blended()) {
    std::vector<std::pair<int64_t, int64_t>> rows;
    blend_rows(step, first_row + count, rows);
    for (int64_t i = 0; i < count; ++i) {
      const auto [k, n] = rows[static_cast<size_t>(first_row + i)];
      source(k).copy_mask_row(source(k).train_start(n, 0), out + i * row_len());
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) copy_mask_row(train_start(step, first_row + i), out + i * row_len());
}

void TokenLoader::eval_mask(int64_t batch_index, int64_t first_row, int64_t count, uint8_t* out) const {
  TESSERA_CHECK(batch_index >= 0, "eval_mask: negative batch index ", batch_index);
  TESSERA_CHECK(first_row >= 0 && count >= 0 && first_row + count <= global_batch_, "eval_mask: rows [", first_row,
                ", ", first_row + count, ") are outside the global batch of ", global_batch_);
  for (int64_t i = 0; i < count; ++i) copy_mask_row(eval_start(batch_index, first_row + i), out + i * row_len());
}

int64_t TokenLoader::count_targets(const std::vector<uint8_t>& mask) const {
  int64_t n = 0;
  for (size_t r = 0; r < mask.size(); r += static_cast<size_t>(row_len()))
    for (int64_t t = 1; t <= seq_len_; ++t) n += mask[r + static_cast<size_t>(t)];
  return n;
}

int64_t TokenLoader::train_mask_count(int64_t step) const {
  if (!mask_) return global_batch_ * seq_len_;
  std::vector<uint8_t> mask(static_cast<size_t>(global_batch_ * row_len()));
  train_mask(step, 0, global_batch_, mask.data());
  return count_targets(mask);
}

int64_t TokenLoader::eval_mask_count(int64_t batches) const {
  if (!mask_) return batches * global_batch_ * seq_len_;
  std::vector<uint8_t> mask(static_cast<size_t>(global_batch_ * row_len()));
  int64_t n = 0;
  for (int64_t b = 0; b < batches; ++b) {
    eval_mask(b, 0, global_batch_, mask.data());
    n += count_targets(mask);
  }
  return n;
}

}  // namespace tessera::io
