// bf16 from f32 on the CPU: round to nearest, ties to even; NaN stays a (quiet) NaN, inf stays inf.
#pragma once
#include <bit>
#include <cstdint>

namespace tessera::kernels::cpu {

inline uint16_t bf16_from_f32(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x40u;  // keep sign and payload, set the quiet bit
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// f's nearest bf16 value as an f32.
inline float bf16_rounded(float f) { return std::bit_cast<float>(static_cast<uint32_t>(bf16_from_f32(f)) << 16); }

}  // namespace tessera::kernels::cpu
