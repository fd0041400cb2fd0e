// Which path the quantised matmuls take (quant_paths.h), found once, and the checks of a quantised
// matrix's description that every entry point makes first.
#include "core/error.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/quant_paths.h"

namespace tessera::kernels::cpu {
namespace {
bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}
}  // namespace

const char* quant_path_name(QuantPath path) { return path == QuantPath::avx512 ? "avx512" : "scalar"; }

bool quant_path_supported(QuantPath path) {
  return path == QuantPath::scalar || (kQuantAvx512Compiled && cpu_has_avx512());
}

bool quant_int4_vnni_supported() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported =
      kQuantInt4VnniCompiled && cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
  return supported;
#else
  return false;
#endif
}

// Never wider than the other kernels' copy (isa.h), as adamw_best_path.
QuantPath quant_best_path() {
  static const QuantPath best =
      (!isa_copies() || kernel_isa() == Isa::avx512) && quant_path_supported(QuantPath::avx512) ? QuantPath::avx512
                                                                                               : QuantPath::scalar;
  return best;
}

void check_quant_view(const QuantMatrixView& w, const char* op) {
  TESSERA_CHECK(w.bits == 8 || w.bits == 4, op, ": bits must be 8 or 4, not ", w.bits);
  TESSERA_CHECK(w.rows >= 0 && w.cols >= 0, op, ": a negative extent [", w.rows, ", ", w.cols, "]");
  TESSERA_CHECK(w.group > 0 && w.cols % w.group == 0, op, ": group size ", w.group, " does not divide the ", w.cols,
                " columns");
  TESSERA_CHECK(w.bits == 8 || w.group % 2 == 0, op, ": int4 packs columns in pairs: group size ", w.group,
                " must be even");
  const bool empty = w.rows == 0 || w.cols == 0;
  TESSERA_CHECK(empty || (w.q && w.scales && (w.bits == 8 || w.zeros)), op, ": a null ",
                !w.q ? "q" : !w.scales ? "scales" : "zeros", " pointer");
}

}  // namespace tessera::kernels::cpu
