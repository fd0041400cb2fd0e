// BpeModel: the merge table keyed by id pairs and the greedy lowest-rank merge loop.
#include "text/bpe_model.h"

#include <limits>

#include "core/error.h"
#include "text/byte_unicode.h"

namespace tessera::text {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                   const std::string& name)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges), name_(name) {
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab_) {
    if (id < 0 || id > kMaxTokenId)
      fail(name_, ": model.vocab gives '", token, "' the id ", id, " (ids must be in [0, ", kMaxTokenId, "])");
    max_id = std::max(max_id, id);
  }
  tokens_.assign(static_cast<size_t>(max_id) + 1, std::string());
  for (const auto& [token, id] : vocab_) {
    std::string& slot = tokens_[static_cast<size_t>(id)];
    if (!slot.empty()) fail(name_, ": model.vocab gives id ", id, " to both '", slot, "' and '", token, "'");
    slot = token;
  }
  auto id_of = [&](const std::string& token, size_t rank, const char* what) {
    const auto it = vocab_.find(token);
    if (it == vocab_.end())
      fail(name_, ": model.merges[", rank, "]: the ", what, " '", token, "' is not in model.vocab");
    return it->second;
  };
  for (size_t r = 0; r < merges.size(); ++r) {
    const int32_t left = id_of(merges[r].first, r, "left part");
    const int32_t right = id_of(merges[r].second, r, "right part");
    const int32_t result = id_of(merges[r].first + merges[r].second, r, "merged token");
    merges_.try_emplace(pair_key(left, right), Merge{static_cast<int32_t>(r), result});  // first rank wins
  }
  const auto& chars = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(chars[static_cast<size_t>(b)]);
    byte_id_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

std::vector<int32_t> BpeModel::encode_word(std::string_view bytes) const {
  const auto& chars = byte_to_unicode();
  if (ignore_merges_) {
    std::string mapped;
    for (unsigned char b : bytes) mapped += chars[b];
    const auto it = vocab_.find(mapped);
    if (it != vocab_.end()) return {it->second};
  }
  std::vector<int32_t> ids;
  ids.reserve(bytes.size());
  for (unsigned char b : bytes) {
    if (byte_id_[b] < 0)
      fail(name_, ": the byte 0x", "0123456789abcdef"[b >> 4], "0123456789abcdef"[b & 15], " (character '", chars[b],
           "') has no token in model.vocab, so it cannot be encoded");
    ids.push_back(byte_id_[b]);
  }
  while (ids.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), best_result = -1;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto it = merges_.find(pair_key(ids[i], ids[i + 1]));
      if (it != merges_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best_result = it->second.result;
        best_at = i;
      }
    }
    if (best_result < 0) break;
    ids[best_at] = best_result;
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  return ids;
}

}  // namespace tessera::text
