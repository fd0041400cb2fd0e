// Philox4x32-10, a counter-based RNG (Salmon et al., SC'11): each value is a pure function of
// (seed, stream, index), so any rank can compute exactly the values the serial run has at the
// global positions of its shard. Streams are named: stream_id("blocks.3.attn.qkv.weight").
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace tessera {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten rounds of Philox4x32 on one counter block.
PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key);

// 64-bit FNV-1a of a name: the stream of a named parameter or dropout site.
uint64_t stream_id(std::string_view name);

// The four 32-bit words at (seed, stream, index): key = seed, counter = (index, stream).
PhiloxCounter philox_bits(uint64_t seed, uint64_t stream, uint64_t index);
// Uniform in [0, 1) with 24 random bits.
float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index);
// Standard normal (Box-Muller on the first two words).
float philox_normal(uint64_t seed, uint64_t stream, uint64_t index);

// Fill out[i] with mean + std * normal(seed, stream, first_index + i), i in [0, n).
void philox_fill_normal(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first_index,
                        float mean, float std);
void philox_fill_uniform(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first_index,
                         float low, float high);

}  // namespace tessera
