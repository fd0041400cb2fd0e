// Philox4x32-10 and the uniform/normal values derived from it.
#include "core/philox.h"

#include "core/fnv1a.h"

#include <cmath>

namespace tessera {
namespace {
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
}  // namespace

PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

uint64_t stream_id(std::string_view name) { return Fnv1a().add(name).value(); }

PhiloxCounter philox_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                     static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>((philox_bits(seed, stream, index)[0] >> 8) * 0x1p-24);
}

float philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxCounter w = philox_bits(seed, stream, index);
  const double u1 = ((w[0] >> 8) + 1.0) * 0x1p-24;  // (0, 1]: log is finite
  const double u2 = (w[1] >> 8) * 0x1p-24;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void philox_fill_normal(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first_index,
                        float mean, float std) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = mean + std * philox_normal(seed, stream, first_index + i);
}

void philox_fill_uniform(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first_index,
                         float low, float high) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    out[i] = low + (high - low) * philox_uniform(seed, stream, first_index + i);
}

}  // namespace tessera
