// BpeModel: a byte-level BPE vocabulary and its ranked merges; encodes one pre-token into ids by
// merging, again and again, the adjacent pair of lowest rank (the leftmost of equals), as Hugging
// Face's BPE does. Token strings are in the byte-to-unicode alphabet (byte_unicode.h).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::text {

// The largest token id accepted (2^24 - 1; real vocabularies stop near 2^18): an id is a slot in
// a table, so a file's id must not decide how much memory is taken.
constexpr int32_t kMaxTokenId = (1 << 24) - 1;

class BpeModel {
 public:
  // `name` (the tokenizer file) is used in errors: a merge whose parts or result are not in the
  // vocabulary, an id below 0 or repeated. ignore_merges: a pre-token that is itself in the
  // vocabulary is that token, unmerged (Llama 3).
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           const std::string& name);

  // The ids of one pre-token given as raw bytes. A byte whose character is not in the vocabulary
  // is an error naming it.
  std::vector<int32_t> encode_word(std::string_view bytes) const;

  // One more than the largest id.
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // The token string of an id ("" for an id no token has).
  const std::string& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }

 private:
  struct Merge {
    int32_t rank, result;
  };
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;
  std::unordered_map<uint64_t, Merge> merges_;  // key: left id << 32 | right id
  int32_t byte_id_[256];                        // -1: the byte's character has no token
  bool ignore_merges_;
  std::string name_;
};

}  // namespace tessera::text
