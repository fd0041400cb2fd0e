// TokenWriter: writes a token split to HDF5 as it is produced, never holding it: /<group>/tokens
// chunked, uint16 when the vocabulary fits (uint32 otherwise), optionally deflated, and
// /<group>/doc_offsets (int64, the first token of each document), both grown chunk by chunk; with a
// loss mask also /<group>/loss_mask (uint8, one per token, chunked like the tokens).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/hdf5_file.h"

namespace tessera::io {

class TokenWriter {
 public:
  // group "/train", "/val", or "" (root: /tokens, /doc_offsets). chunk_tokens >= 1 tokens a chunk;
  // deflate 0 (none) to 9. Nothing is written to the file until tokens are appended or finish().
  // loss_mask: every append gives each token's mask value (0 or 1) too.
  TokenWriter(H5File& file, const std::string& group, int64_t vocab_size, int64_t chunk_tokens = int64_t{1} << 20,
              int deflate = 0, bool loss_mask = false);
  TokenWriter(const TokenWriter&) = delete;
  TokenWriter& operator=(const TokenWriter&) = delete;

  // Marks the next token appended as the first of a document.
  void start_document();
  // Appends tokens, each checked to lie in [0, vocab_size) (else an error naming its index).
  void append(const int32_t* tokens, int64_t n);
  void append(const std::vector<int32_t>& tokens) { append(tokens.data(), static_cast<int64_t>(tokens.size())); }
  // A writer with a loss mask: tokens and their mask values (each 0 or 1).
  void append(const int32_t* tokens, const uint8_t* mask, int64_t n);
  // Writes what is buffered; the writer takes no more tokens after. Returns the tokens written.
  int64_t finish();

  int64_t size() const { return written_ + static_cast<int64_t>(buffer_.size()); }
  int64_t documents() const { return docs_written_ + static_cast<int64_t>(doc_buffer_.size()); }
  const std::string& tokens_path() const { return tokens_; }

 private:
  void flush_tokens();
  void flush_docs();

  H5File& file_;
  std::string tokens_, offsets_, mask_;  // mask_ empty: no loss mask
  int64_t vocab_, chunk_;
  int deflate_;
  bool wide_;  // uint32 on disk
  bool finished_ = false;
  std::vector<int32_t> buffer_;
  std::vector<uint8_t> mask_buffer_;
  std::vector<int64_t> doc_buffer_;
  int64_t written_ = 0, docs_written_ = 0;
};

}  // namespace tessera::io
