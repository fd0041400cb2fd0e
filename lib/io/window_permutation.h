// WindowPermutation: a permutation of [0, n) drawn from Philox, computed one element at a time in
// O(1) memory (a Feistel network over the next power of 4, cycle-walked into [0, n)), so an epoch
// over billions of windows needs no table. A pure function of (seed, stream, epoch, i).
#pragma once
#include <cstdint>

namespace tessera::io {

class WindowPermutation {
 public:
  // n >= 1 elements; epochs with different numbers are independent permutations.
  WindowPermutation(int64_t n, uint64_t seed, uint64_t stream);
  // Position i (in [0, n)) of epoch `epoch`'s order: a distinct value in [0, n) for each i.
  int64_t at(int64_t epoch, int64_t i) const;
  int64_t size() const { return n_; }

 private:
  uint64_t round(uint64_t x, int64_t epoch) const;  // one pass of the Feistel network
  int64_t n_;
  uint64_t seed_, stream_;
  int half_bits_;  // each Feistel half; the network permutes [0, 4^half_bits)
};

}  // namespace tessera::io
