// TokenDataset: a token data set's metadata (size, vocab_size, tokenizer, entropy_rate) and a way
// to read any range of its tokens on demand. A split is /<split>/tokens or /tokens of one HDF5 file,
// or of several (a glob "dir/shard_*.h5", files in name order, one token sequence); errors name the
// file and dataset. Opening reads metadata only: tokens are read, and checked, as they are asked for.
// A split may carry a loss mask (/<split>/loss_mask beside its tokens, uint8 0 or 1, one per token:
// `data_prep sft`), read the same way.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessera::io {

class DocumentIndex;
class TokenReader;

// One file's part of a split: its tokens are [first, first + reader->size()) of the split.
struct TokenPart {
  int64_t first = 0;
  std::shared_ptr<const TokenReader> reader;
  std::shared_ptr<const TokenReader> mask;  // the file's loss_mask, when the data set has one
};

struct TokenDataset {
  // split "train" or "val": /<split>/tokens if present, else /tokens. Attributes are looked up on
  // the split's group first, then on the root. `path` may be a glob matching several files (shards):
  // they must agree on vocab_size and tokenizer. /doc_offsets beside the tokens, when present, must be
  // 1-D int64, start at 0 and end inside the tokens (`data_prep verify` checks every offset).
  // loss_mask beside the tokens, when present, must be 1-D uint8 as long as the tokens; shards must
  // all have one or none.
  static TokenDataset open(const std::string& path, const std::string& split);
  // Whether `path` (or the first file a glob matches) has tokens for `split` of its own: /<split>/tokens.
  static bool has_split(const std::string& path, const std::string& split);
  // The files a path names: itself, or a glob's matches in name order (none: an error naming it).
  static std::vector<std::string> expand(const std::string& path);

  std::string path, split;
  std::string dataset;  // the HDF5 path the tokens come from, e.g. "/train/tokens"
  int64_t vocab_size = 0;
  std::string tokenizer;
  std::optional<double> entropy_rate;  // nats/token, when the source is known (synthetic data)
  // Tokens held in memory: only for data sets built in code (tests); empty for one opened from files.
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;  // its loss mask, when it has one (as long as tokens)
  std::vector<TokenPart> parts;  // the files of an opened data set, in order
  // Document starts (the first token of every document, increasing, over the whole split) for
  // document masking, looked up window by window (io/document_index.h): none until
  // load_documents(), or set in code for a data set built there. Shared by copies.
  std::shared_ptr<const DocumentIndex> documents;

  int64_t size() const;
  // Finds every part's /doc_offsets and makes `documents` read them as windows need them: metadata
  // only, no offset read (its memory is bounded, whatever the number of documents). A part without
  // them throws naming the file: --document-mask needs the boundaries data_prep writes.
  void load_documents();
  bool has_documents() const;
  // Tokens [start, start + count) into out[count], each checked against the vocabulary (a token
  // outside it throws naming the file, dataset and index). Thread-safe.
  void read(int64_t start, int64_t count, int32_t* out) const;
  std::vector<int32_t> read(int64_t start, int64_t count) const;
  // The loss mask: whether there is one, and values [start, start + count) into out[count] (each
  // checked to be 0 or 1). Thread-safe.
  bool has_mask() const;
  void read_mask(int64_t start, int64_t count, uint8_t* out) const;
  // Bytes and pread calls spent reading tokens so far (all parts).
  int64_t bytes_read() const;
  int64_t reads() const;
};

}  // namespace tessera::io
