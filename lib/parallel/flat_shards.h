// FlatShards: how a flat buffer of `total` elements is cut into `parts` contiguous ranges, one per
// data-parallel rank (ZeRO shards, and the pieces each rank writes to a checkpoint). Ranges are
// multiples of 16 elements (64-byte aligned) except the last; a rank may get an empty range.
#pragma once
#include <cstdint>
#include <vector>

namespace tessera::parallel {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

class FlatShards {
 public:
  FlatShards(int64_t total, int parts);
  int parts() const { return parts_; }
  int64_t total() const { return total_; }
  Range shard(int part) const;
  // Per part, how many elements of [r.begin, r.end) fall in its shard (counts for reduce-scatter-v).
  std::vector<int64_t> counts_within(Range r) const;

 private:
  int64_t total_;
  int parts_;
  int64_t chunk_;
};

}  // namespace tessera::parallel
