// Unit tests of core/philox: Philox4x32-10 known answers, stream ids, and the (seed, stream, index) purity that layout-independent initialisation rests on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/philox.h"

using tessera::PhiloxCounter;
using tessera::PhiloxKey;

namespace {

// Random123's known-answer vectors for Philox4x32-10, from tests/kat_vectors of
// https://github.com/DEShawResearch/random123 (the three "philox4x32 10" lines; columns: counter[4],
// key[2], expected[4]). Found with the code-search tool in several independent copies of that file
// (e.g. a Python port that embeds kat_vectors verbatim, a Rust and a Go port citing it); all agree:
//   philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
//   philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
//   philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
struct Kat {
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter expected;
};
const Kat kKats[] = {
    {{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u},
     {0x00000000u, 0x00000000u},
     {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

TEST(Philox, Random123KnownAnswers) {
  for (const Kat& k : kKats) {
    const PhiloxCounter got = tessera::philox4x32(k.counter, k.key);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(got[i], k.expected[i]) << "word " << i << " of the vector with counter[0] = 0x" << std::hex
                                       << k.counter[0];
  }
}

// philox_bits is documented as key = seed, counter = (index, stream), each split low word first.
TEST(Philox, BitsMapSeedStreamIndexOntoKeyAndCounter) {
  const uint64_t seed = 0x299f31d0a4093822ull;    // key words {0xa4093822, 0x299f31d0}
  const uint64_t index = 0x85a308d3243f6a88ull;   // counter words 0, 1
  const uint64_t stream = 0x0370734413198a2eull;  // counter words 2, 3
  const PhiloxCounter got = tessera::philox_bits(seed, stream, index);
  EXPECT_EQ(got, kKats[2].expected);
  EXPECT_EQ(tessera::philox_bits(0, 0, 0), kKats[0].expected);
  EXPECT_EQ(tessera::philox_bits(~0ull, ~0ull, ~0ull), kKats[1].expected);
}

// The stream of a name is 64-bit FNV-1a. Published FNV-1a 64 vectors ("" -> offset basis,
// "a", "foobar"), as in Zig's std/hash/fnv.zig tests (found with the code-search tool). Pinning them
// keeps every checkpoint's initial values reproducible across versions.
TEST(Philox, StreamIdIsFnv1a64) {
  EXPECT_EQ(tessera::stream_id(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(tessera::stream_id("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(tessera::stream_id("foobar"), 0x85944171f73967e8ull);
}

TEST(Philox, StreamIdDiffersForDifferentNames) {
  const std::vector<std::string> names = {
      "embed.tokens.weight",     "embed.positions.weight",   "blocks.0.attn.qkv.weight",
      "blocks.1.attn.qkv.weight", "blocks.0.attn.qkv.bias",  "blocks.0.attn.proj.weight",
      "blocks.0.mlp.fc.weight",  "blocks.0.mlp.proj.weight", "blocks.10.mlp.fc.weight",
      "blocks.1.mlp.fc.weight",  "ln_f.weight",              "ln_f.bias"};
  std::set<uint64_t> ids;
  for (const std::string& n : names) ids.insert(tessera::stream_id(n));
  EXPECT_EQ(ids.size(), names.size());
  EXPECT_EQ(tessera::stream_id("blocks.3.attn.qkv.weight"), tessera::stream_id(std::string("blocks.3.attn.qkv.weight")));
  // Different streams give different values at the same (seed, index).
  const uint64_t s0 = tessera::stream_id("blocks.0.attn.qkv.weight");
  const uint64_t s1 = tessera::stream_id("blocks.1.attn.qkv.weight");
  int same = 0;
  for (uint64_t i = 0; i < 256; ++i) same += tessera::philox_normal(7, s0, i) == tessera::philox_normal(7, s1, i);
  EXPECT_EQ(same, 0);
}

TEST(Philox, SeedsAndIndicesGiveDifferentValues) {
  const uint64_t s = tessera::stream_id("w");
  int same_seed = 0, same_neighbour = 0;
  for (uint64_t i = 0; i < 256; ++i) {
    same_seed += tessera::philox_normal(1, s, i) == tessera::philox_normal(2, s, i);
    same_neighbour += tessera::philox_normal(1, s, i) == tessera::philox_normal(1, s, i + 1);
  }
  EXPECT_EQ(same_seed, 0);
  EXPECT_EQ(same_neighbour, 0);
  // High words of seed, stream and index take part too (a 64-bit seed, a 64-bit index).
  EXPECT_NE(tessera::philox_bits(1, s, 5), tessera::philox_bits(1ull | (1ull << 32), s, 5));
  EXPECT_NE(tessera::philox_bits(1, s, 5), tessera::philox_bits(1, s, 5ull | (1ull << 32)));
  EXPECT_NE(tessera::philox_bits(1, s, 5), tessera::philox_bits(1, s ^ (1ull << 40), 5));
}

TEST(Philox, UniformAndNormalArePureFunctionsOfSeedStreamIndex) {
  const uint64_t seed = 1234, stream = tessera::stream_id("blocks.0.mlp.fc.weight");
  for (uint64_t i : {0ull, 1ull, 17ull, 1ull << 33, ~0ull}) {
    EXPECT_EQ(tessera::philox_normal(seed, stream, i), tessera::philox_normal(seed, stream, i));
    EXPECT_EQ(tessera::philox_uniform(seed, stream, i), tessera::philox_uniform(seed, stream, i));
    // Uniform: the top 24 bits of the first word, scaled into [0, 1).
    const PhiloxCounter w = tessera::philox_bits(seed, stream, i);
    EXPECT_EQ(tessera::philox_uniform(seed, stream, i), static_cast<float>(w[0] >> 8) * 0x1p-24f);
  }
}

// What a rank computes for its shard [first, first + n) equals the serial fill at those indices.
TEST(Philox, ShardedFillsEqualTheSerialFill) {
  const int64_t n = 1000;
  const uint64_t seed = 42, stream = tessera::stream_id("embed.tokens.weight");
  const uint64_t base = (1ull << 32) - 300;  // the shards straddle the 2^32 boundary of the index
  std::vector<float> serial(n), sharded(n, -1.0f), useries(n), ushard(n, -1.0f);
  tessera::philox_fill_normal(serial.data(), n, seed, stream, base, 0.5f, 0.02f);
  tessera::philox_fill_uniform(useries.data(), n, seed, stream, base, -2.0f, 3.0f);
  const int64_t cuts[] = {0, 1, 299, 300, 301, 640, 999, 1000};
  for (int s = 0; s + 1 < 8; ++s) {
    const int64_t a = cuts[s], len = cuts[s + 1] - cuts[s];
    tessera::philox_fill_normal(sharded.data() + a, len, seed, stream, base + a, 0.5f, 0.02f);
    tessera::philox_fill_uniform(ushard.data() + a, len, seed, stream, base + a, -2.0f, 3.0f);
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(sharded[i], serial[i]) << "element " << i;
    ASSERT_EQ(ushard[i], useries[i]) << "element " << i;
    ASSERT_EQ(serial[i], 0.5f + 0.02f * tessera::philox_normal(seed, stream, base + i)) << "element " << i;
    ASSERT_GE(useries[i], -2.0f);
    ASSERT_LT(useries[i], 3.0f);
  }
}

// Sample moments of 1e5 draws within 5 standard errors (deterministic: the RNG is).
TEST(Philox, NormalAndUniformMoments) {
  const int64_t n = 100000;
  std::vector<float> z(n), u(n);
  tessera::philox_fill_normal(z.data(), n, 2024, tessera::stream_id("moments"), 0, 0.0f, 1.0f);
  tessera::philox_fill_uniform(u.data(), n, 2024, tessera::stream_id("moments"), 0, 0.0f, 1.0f);
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0, tail = 0, us1 = 0, us2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(z[i])) << i;
    const double x = z[i];
    s1 += x;
    s2 += x * x;
    s3 += x * x * x;
    s4 += x * x * x * x;
    tail += std::fabs(x) > 2.0;
    ASSERT_GE(u[i], 0.0f);
    ASSERT_LT(u[i], 1.0f);
    us1 += u[i];
    us2 += static_cast<double>(u[i]) * u[i];
  }
  const double mean = s1 / n, var = s2 / n - mean * mean;
  const double skew = s3 / n, kurt = s4 / n;
  EXPECT_NEAR(mean, 0.0, 5.0 * std::sqrt(1.0 / n));
  EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / n));
  EXPECT_NEAR(skew, 0.0, 5.0 * std::sqrt(15.0 / n));        // var(x^3) = 15
  EXPECT_NEAR(kurt, 3.0, 5.0 * std::sqrt(96.0 / n));        // var(x^4) = 105 - 9
  const double p2 = std::erfc(2.0 / std::sqrt(2.0));        // P(|x| > 2) = 0.0455
  EXPECT_NEAR(tail / n, p2, 5.0 * std::sqrt(p2 * (1 - p2) / n));
  const double umean = us1 / n, uvar = us2 / n - umean * umean;
  EXPECT_NEAR(umean, 0.5, 5.0 * std::sqrt(1.0 / 12.0 / n));
  EXPECT_NEAR(uvar, 1.0 / 12.0, 5.0 * std::sqrt(1.0 / 180.0 / n));  // var(u^2) - ... ~ 1/180
}

TEST(Philox, FillAppliesMeanAndStd) {
  const int64_t n = 64;
  std::vector<float> a(n), b(n);
  const uint64_t s = tessera::stream_id("affine");
  tessera::philox_fill_normal(a.data(), n, 3, s, 10, 0.0f, 1.0f);
  tessera::philox_fill_normal(b.data(), n, 3, s, 10, 1.5f, 0.25f);
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(b[i], 1.5f + 0.25f * a[i]) << i;
}

}  // namespace
