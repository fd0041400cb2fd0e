// WindowPermutation: six Feistel rounds keyed by Philox (seed, stream, epoch, round, half), then
// cycle-walking: values past n are sent through the network again until they land inside.
#include "io/window_permutation.h"

#include "core/error.h"
#include "core/philox.h"

namespace tessera::io {
namespace {
constexpr int kRounds = 6;
}

WindowPermutation::WindowPermutation(int64_t n, uint64_t seed, uint64_t stream)
    : n_(n), seed_(seed), stream_(stream), half_bits_(1) {
  TESSERA_CHECK(n >= 1, "window permutation: needs at least one window, got ", n);
  while ((uint64_t{1} << (2 * half_bits_)) < static_cast<uint64_t>(n)) ++half_bits_;
}

uint64_t WindowPermutation::round(uint64_t x, int64_t epoch) const {
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t left = x >> half_bits_, right = x & mask;
  for (int r = 0; r < kRounds; ++r) {
    // Counter: (epoch, round, right half); half_bits_ <= 32, so right fits the low 32 bits.
    const uint64_t counter = ((static_cast<uint64_t>(epoch) * kRounds + static_cast<uint64_t>(r)) << 32) | right;
    const PhiloxCounter w = philox_bits(seed_, stream_, counter);
    const uint64_t f = ((static_cast<uint64_t>(w[1]) << 32) | w[0]) & mask;
    const uint64_t next = left ^ f;
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

int64_t WindowPermutation::at(int64_t epoch, int64_t i) const {
  TESSERA_CHECK(epoch >= 0 && i >= 0 && i < n_, "window permutation: no position ", i, " in epoch ", epoch, " (",
                n_, " windows)");
  uint64_t x = static_cast<uint64_t>(i);
  do {
    x = round(x, epoch);
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

}  // namespace tessera::io
