// FlatShards: shard arithmetic.
#include "parallel/flat_shards.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::parallel {

FlatShards::FlatShards(int64_t total, int parts) : total_(total), parts_(parts) {
  TESSERA_CHECK(parts >= 1 && total >= 0, "FlatShards: ", total, " elements in ", parts, " parts");
  const int64_t per = (total + parts - 1) / parts;
  chunk_ = (per + 15) / 16 * 16;
}

Range FlatShards::shard(int part) const {
  const int64_t b = std::min(total_, chunk_ * part);
  return {b, std::min(total_, b + chunk_)};
}

std::vector<int64_t> FlatShards::counts_within(Range r) const {
  std::vector<int64_t> counts(parts_);
  for (int p = 0; p < parts_; ++p) {
    const Range s = shard(p);
    counts[p] = std::max<int64_t>(0, std::min(s.end, r.end) - std::max(s.begin, r.begin));
  }
  return counts;
}

}  // namespace tessera::parallel
