// TokenLoader: cuts the global batch of a step from a token data set, as a pure function of
// (seed, step, row), so any split of the rows over ranks sees exactly the serial run's rows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/token_dataset.h"

namespace tessera::io {

// A row is seq_len + 1 consecutive tokens: inputs = row[0..T-1], targets = row[1..T].
class TokenLoader {
 public:
  // Copies the tokens (data sets here are small), so `data` need not outlive the loader.
  // Throws if the data has fewer than seq_len + 1 tokens.
  TokenLoader(const TokenDataset& data, int64_t seq_len, int64_t global_batch, uint64_t seed);

  // Rows [first_row, first_row + count) of the global batch of `step` (0-based) into
  // out[count * (seq_len + 1)]. Row r starts at a uniform integer in [0, size - seq_len - 1] drawn
  // from Philox at (seed, stream_id("loader.train"), step * global_batch + r).
  void train_rows(int64_t step, int64_t first_row, int64_t count, int32_t* out) const;

  // Evaluation rows, deterministic and in order: row r of eval batch i starts at
  // ((i * global_batch + r) * seq_len) mod (size - seq_len), i.e. consecutive non-overlapping
  // windows, wrapping over the valid window starts [0, size - seq_len - 1].
  void eval_rows(int64_t batch_index, int64_t first_row, int64_t count, int32_t* out) const;
  // Eval batches that cover every full window of the data once (at least 1).
  int64_t eval_batches() const;

  // Window starts (the first token of row r), exposed for tests and tracing.
  int64_t train_start(int64_t step, int64_t row) const;
  int64_t eval_start(int64_t batch_index, int64_t row) const;

  int64_t seq_len() const { return seq_len_; }
  int64_t global_batch() const { return global_batch_; }
  int64_t row_len() const { return seq_len_ + 1; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  void check_rows(const char* what, int64_t first_row, int64_t count, const int32_t* out) const;
  void copy_row(int64_t start, int32_t* out) const;

  std::string path_, split_;
  std::vector<int32_t> tokens_;
  int64_t seq_len_, global_batch_;
  uint64_t seed_, stream_;
};

}  // namespace tessera::io
