// TokenLoader: Philox-drawn (random) or permuted (epoch) training windows and in-order evaluation
// windows over a token data set, each row read on demand.
#include "io/token_loader.h"

#include <algorithm>

#include "core/error.h"
#include "core/philox.h"

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
      stream_(stream_id("loader.train")), sampling_(sampling) {
  TESSERA_CHECK(seq_len >= 1, "sequence length must be at least 1, got ", seq_len);
  TESSERA_CHECK(global_batch >= 1, "global batch must be at least 1, got ", global_batch);
  if (size() < seq_len + 1)
    fail("sequence length ", seq_len, " needs at least ", seq_len + 1, " tokens, ", data_.path,
         data_.split.empty() ? "" : " (" + data_.split + ")", " has ", size());
  if (sampling == Sampling::epoch) permutation_.emplace(epoch_windows(), seed, stream_id("loader.epoch"));
}

int64_t TokenLoader::train_start(int64_t step, int64_t row) const {
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
  for (int64_t i = 0; i < count; ++i) copy_row(train_start(step, first_row + i), out + i * row_len());
}

void TokenLoader::eval_rows(int64_t batch_index, int64_t first_row, int64_t count, int32_t* out) const {
  TESSERA_CHECK(batch_index >= 0, "eval_rows: negative batch index ", batch_index);
  check_rows("eval_rows", first_row, count, out);
  for (int64_t i = 0; i < count; ++i)
    copy_row(eval_start(batch_index, first_row + i), out + i * row_len());
}

}  // namespace tessera::io
