// The instruction set of the per-ISA kernels (isa.h): cpuid once, or TESSERA_CPU_ISA.
#include "kernels/cpu/isa.h"

#include <cpuid.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace tessera::kernels::cpu {
namespace {
Isa choose() {
  const char* asked = std::getenv("TESSERA_CPU_ISA");
  if (asked && *asked) {
    for (Isa isa : {Isa::base, Isa::avx2, Isa::avx512})
      if (std::string(asked) == isa_name(isa)) {
        TESSERA_CHECK(isa_supported(isa), "TESSERA_CPU_ISA=", asked, ": ",
                      isa_copies() ? "this CPU does not run it"
                                   : "this build has one copy of the kernels, base (built with TESSERA_NATIVE or "
                                     "not for x86-64)");
        return isa;
      }
    fail("TESSERA_CPU_ISA must be base, avx2 or avx512, not '", asked, "'");
  }
  for (Isa isa : {Isa::avx512, Isa::avx2})
    if (isa_supported(isa)) return isa;
  return Isa::base;
}
}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::base: break;
  }
  return "base";
}

#if defined(TESSERA_ISA_VARIANTS)
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
namespace {
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
}  // namespace
#endif

bool isa_supported(Isa isa) {
#if defined(TESSERA_ISA_VARIANTS)
  switch (isa) {
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && isa_supported(Isa::avx2);
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case Isa::base: break;
  }
#endif
  return isa == Isa::base;
}

bool isa_copies() {
#if defined(TESSERA_ISA_VARIANTS)
  return true;
#else
  return false;
#endif
}

Isa kernel_isa() {
  static const Isa chosen = choose();
  return chosen;
}

}  // namespace tessera::kernels::cpu
