// TokenLoader: cuts the global batch of a step from a token data set, as a pure function of
// (seed, step, row), so any split of the rows over ranks sees exactly the serial run's rows. It
// reads only the rows asked for (TokenDataset::read): no copy of the corpus.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/token_blend.h"
#include "io/token_dataset.h"
#include "io/window_permutation.h"

namespace tessera::io {

// How training windows are drawn: `random` windows start anywhere (drawn with replacement);
// `epoch` cuts the data into non-overlapping windows of seq_len + 1 and visits each exactly once
// per epoch, in a Philox permutation per epoch.
enum class Sampling { random, epoch };
Sampling parse_sampling(const std::string& name);  // "random" or "epoch", else an error naming it
const char* sampling_name(Sampling s);

// A row is seq_len + 1 consecutive tokens: inputs = row[0..T-1], targets = row[1..T].
class TokenLoader {
 public:
  // Shares the data set's readers (cheap to copy). Throws if the data has fewer than seq_len + 1 tokens.
  TokenLoader(const TokenDataset& data, int64_t seq_len, int64_t global_batch, uint64_t seed,
              Sampling sampling = Sampling::random);
  // A blend of several data sets (they must agree on vocab_size and tokenizer: else an error naming
  // both). Row r of step s takes source k, the first whose normalised cumulative weight exceeds a
  // uniform draw from Philox (seed, stream_id("loader.blend"), s * global_batch + r); it then takes
  // that source's next window in the source's own order: the source's n-th window, n the number of
  // earlier rows (all steps before, then rows before r) that chose it, drawn as a one-source loader
  // with its own seed (Philox (seed, stream_id("loader.blend.seed"), k)) and global batch 1 would
  // draw its sample n: random windows, or its own permutation and epoch counter under epoch sampling.
  // n is a pure function of (seed, step, row); counts at every 16th step (and at the step last asked
  // for) are cached as asked for.
  TokenLoader(const std::vector<BlendSource>& sources, const std::vector<TokenDataset>& data, int64_t seq_len,
              int64_t global_batch, uint64_t seed, Sampling sampling = Sampling::random);

  // Rows [first_row, first_row + count) of the global batch of `step` (0-based) into
  // out[count * (seq_len + 1)]. random: row r starts at a uniform integer in [0, size - seq_len - 1]
  // drawn from Philox at (seed, stream_id("loader.train"), step * global_batch + r). epoch: sample
  // s = step * global_batch + r is position s mod W of epoch s / W (W = size / (seq_len + 1)
  // windows), whose window is WindowPermutation(W, seed, stream_id("loader.epoch")).at(epoch, pos)
  // and starts at window * (seq_len + 1).
  void train_rows(int64_t step, int64_t first_row, int64_t count, int32_t* out) const;

  // Evaluation rows, deterministic and in order: row r of eval batch i starts at
  // ((i * global_batch + r) * seq_len) mod (size - seq_len), i.e. consecutive non-overlapping
  // windows, wrapping over the valid window starts [0, size - seq_len - 1].
  void eval_rows(int64_t batch_index, int64_t first_row, int64_t count, int32_t* out) const;
  // The loss mask (io/token_dataset.h), cut into the same windows as the rows above: whether the data
  // has one (a blend: any source; a source without one counts every token), and values
  // [count * (seq_len + 1)] of rows [first_row, first_row + count) (row position t + 1 says whether
  // predicting token t + 1 counts).
  bool has_mask() const { return mask_; }
  void train_mask(int64_t step, int64_t first_row, int64_t count, uint8_t* out) const;
  void eval_mask(int64_t batch_index, int64_t first_row, int64_t count, uint8_t* out) const;
  // The targets that count in the whole global batch of a step, or in eval batches [0, batches):
  // the ones among positions 1..seq_len of every row (without a mask, all of them).
  int64_t train_mask_count(int64_t step) const;
  int64_t eval_mask_count(int64_t batches) const;

  // Eval batches that cover every full window of the data once (at least 1).
  int64_t eval_batches() const;

  // Document masking: the segments of the same rows into out[count * seq_len]: for the input
  // position t of a row starting at token s, the number of documents starting in (s, s + t] (0
  // for the row's first document, counting up). Read from the data set's documents (every source's,
  // for a blend: TokenDataset::load_documents), no token read: the offsets near each window, by
  // pread (io/document_index.h). Throws unless has_documents(). Thread-safe.
  void train_segments(int64_t step, int64_t first_row, int64_t count, int32_t* out) const;
  void eval_segments(int64_t batch_index, int64_t first_row, int64_t count, int32_t* out) const;
  bool has_documents() const;

  // Window starts (the first token of row r), exposed for tests and tracing. For a blend, the start
  // in train_source(step, row)'s data.
  int64_t train_start(int64_t step, int64_t row) const;

  // Blends: the sources (none for one data set), the source of a row, and the windows each source
  // has given to the rows of steps [0, step) (consumed samples per source).
  bool blended() const { return !sources_.empty(); }
  int64_t sources() const { return static_cast<int64_t>(sources_.size()); }
  const TokenLoader& source(int64_t k) const { return sources_[static_cast<size_t>(k)]; }
  const BlendSource& blend_source(int64_t k) const { return blend_[static_cast<size_t>(k)]; }
  int64_t train_source(int64_t step, int64_t row) const;
  std::vector<int64_t> source_samples(int64_t step) const;
  // Token bytes read so far by this loader's data (every source of a blend).
  int64_t bytes_read() const;
  int64_t eval_start(int64_t batch_index, int64_t row) const;

  // Epoch sampling: windows per epoch, and the epoch and position in it of a sample count.
  int64_t epoch_windows() const { return (size()) / (seq_len_ + 1); }
  int64_t epoch_of_sample(int64_t sample) const { return sample / epoch_windows(); }

  Sampling sampling() const { return sampling_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t global_batch() const { return global_batch_; }
  int64_t row_len() const { return seq_len_ + 1; }
  int64_t size() const { return data_.size(); }
  // One data set's; a blend's first source's (its vocabulary and tokenizer are every source's).
  const TokenDataset& data() const { return data_; }

 private:
  void check_rows(const char* what, int64_t first_row, int64_t count, const int32_t* out) const;
  void copy_row(int64_t start, int32_t* out) const;
  void row_segments(int64_t start, int32_t* out) const;  // seq_len segments of the row at start
  void copy_mask_row(int64_t start, uint8_t* out) const;  // ones when data_ has no mask
  int64_t count_targets(const std::vector<uint8_t>& mask) const;  // rows of mask values

  TokenDataset data_;
  int64_t seq_len_, global_batch_;
  uint64_t seed_, stream_;
  Sampling sampling_;
  bool mask_ = false;  // data_ (a blend: any source) has a loss mask
  std::optional<WindowPermutation> permutation_;  // epoch sampling
  // Blends: each source as a one-row loader, the weights as given and their normalised running sums.
  std::vector<TokenLoader> sources_;
  std::vector<BlendSource> blend_;
  std::vector<double> cumulative_;
  uint64_t blend_stream_ = 0;  // stream_id("loader.blend"): the rows' source draws
  struct Counts;  // samples per source at every 16th step, shared by copies (thread-safe)
  std::shared_ptr<Counts> counts_;
  void source_samples_at(int64_t step, int64_t* counts) const;
  // Blend rows: (source, that source's sample index) of rows [0, end) of `step`, by row.
  void blend_rows(int64_t step, int64_t end, std::vector<std::pair<int64_t, int64_t>>& out) const;
};

}  // namespace tessera::io
