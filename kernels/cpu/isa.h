// Run-time choice of the instruction set for the CPU kernels compiled once per set
// (kernels/CMakeLists.txt: TESSERA_ISA_KERNELS, tessera_isa_objects). Such a file defines its
// entry points inside namespace TESSERA_ISA (isa_base: the build's baseline, isa_avx2: AVX2 + FMA +
// F16C, isa_avx512: AVX-512 F/BW/DQ/VL on top), and its base copy (TESSERA_ISA_DISPATCHER) defines
// the public names of cpu_ops.h, each forwarding to the copy kernel_isa() chose:
//   TESSERA_ISA_DECLARE(layernorm_forward)
//   void layernorm_forward(...) { TESSERA_ISA_CALL(layernorm_forward, out, mean, ...); }
// The choice is made once per process, so every call of a kernel runs the same code; the copies
// may round differently from one another (the wider ones fuse multiply-adds and sum in wider
// lanes), so runs compared bit for bit must use one choice (AdamW's paths agree bit for bit).
#pragma once

namespace tessera::kernels::cpu {

enum class Isa { base, avx2, avx512 };
const char* isa_name(Isa isa);
bool isa_supported(Isa isa);  // compiled in (x86-64) and run by this CPU
// Whether this build has a copy per instruction set (the portable x86-64 build); a build with
// TESSERA_NATIVE has one, base, compiled for this machine.
bool isa_copies();
// TESSERA_CPU_ISA=base|avx2|avx512 when set (throws when this CPU or build lacks it), else the
// widest supported; chosen on the first call.
Isa kernel_isa();

}  // namespace tessera::kernels::cpu

#ifndef TESSERA_ISA
#define TESSERA_ISA isa_base
#endif

// Declares fn in every copy's namespace, with the public declaration's type.
#define TESSERA_ISA_DECLARE(fn)                                          \
  namespace isa_base { decltype(::tessera::kernels::cpu::fn) fn; }      \
  namespace isa_avx2 { decltype(::tessera::kernels::cpu::fn) fn; }      \
  namespace isa_avx512 { decltype(::tessera::kernels::cpu::fn) fn; }

#if defined(TESSERA_ISA_VARIANTS)
#define TESSERA_ISA_CALL(fn, ...)                                                 \
  switch (::tessera::kernels::cpu::kernel_isa()) {                               \
    case ::tessera::kernels::cpu::Isa::avx512: return isa_avx512::fn(__VA_ARGS__); \
    case ::tessera::kernels::cpu::Isa::avx2: return isa_avx2::fn(__VA_ARGS__);     \
    case ::tessera::kernels::cpu::Isa::base: break;                              \
  }                                                                               \
  return isa_base::fn(__VA_ARGS__)
#else
#define TESSERA_ISA_CALL(fn, ...) return isa_base::fn(__VA_ARGS__)
#endif
