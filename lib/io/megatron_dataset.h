// MegatronDataset: reads Megatron-LM's indexed data set (PREFIX.idx + PREFIX.bin, the "MMIDIDX"
// format), checking everything before trusting anything, and streams its documents' tokens: the
// index and the tokens are read in blocks, so memory does not grow with the corpus.
//
// PREFIX.idx, little-endian:
//   magic "MMIDIDX\0\0" (9 bytes), version u64 (= 1), dtype code u8, sequence count S u64,
//   document index count D u64, then sizes int32[S] (tokens of each sequence), pointers int64[S]
//   (byte offset of each sequence in the .bin), document indices int64[D] (the first sequence of
//   each document, from 0, ending with S: D - 1 documents), and nothing after.
// PREFIX.bin: the sequences' tokens one after the other, in the dtype (codes: 1 uint8, 2 int8,
//   3 int16, 4 int32, 5 int64, 8 uint16; 6 and 7 are floating point, refused as token ids).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace tessera::io {

class MegatronDataset {
 public:
  // Opens PREFIX.idx and PREFIX.bin and checks all but the token values, naming the file and the
  // field: the magic, version and dtype code; the counts against the .idx size; every size (>= 0) and
  // pointer (the first 0, each where the previous sequence ends, none past the .bin); the .bin's size
  // against the index; the document indices (0 first, S last, never decreasing).
  static MegatronDataset open(const std::string& prefix);

  MegatronDataset(MegatronDataset&& other) noexcept;
  MegatronDataset& operator=(MegatronDataset&&) = delete;
  MegatronDataset(const MegatronDataset&) = delete;
  MegatronDataset& operator=(const MegatronDataset&) = delete;
  ~MegatronDataset();

  const std::string& idx_path() const { return idx_path_; }
  const std::string& bin_path() const { return bin_path_; }
  const char* dtype_name() const;
  int64_t sequences() const { return sequences_; }
  int64_t documents() const { return doc_index_count_ - 1; }
  int64_t tokens() const { return tokens_; }

  // Visits every document in order: for document d (of `tokens` tokens, its sequences joined),
  // `begin(d, tokens)`, then `block(ids, n)` for its tokens in blocks. Each token is checked to
  // lie in [0, vocab_size): one outside stops the walk with an error naming the .bin, the token's
  // index in it and its document.
  void for_each_document(int64_t vocab_size, const std::function<void(int64_t, int64_t)>& begin,
                         const std::function<void(const int32_t*, int64_t)>& block) const;

 private:
  MegatronDataset() = default;
  // Walks the document indices with the pointers: calls fn(d, first_token, end_token) per document.
  void walk_documents(const std::function<void(int64_t, int64_t, int64_t)>& fn) const;
  void check_sequences();

  std::string idx_path_, bin_path_;
  int idx_fd_ = -1, bin_fd_ = -1;
  int dtype_code_ = 0, item_bytes_ = 0;
  int64_t sequences_ = 0, doc_index_count_ = 0, tokens_ = 0, bin_bytes_ = 0;
};

}  // namespace tessera::io
