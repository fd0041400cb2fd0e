// GEMM on the CPU, single and batched: oneDNN when the build found it (its matmul primitive for
// the linears' forward products, its row-major sgemm for the rest), the BLAS's cblas_sgemm
// otherwise or when TESSERA_CPU_GEMM=blas. Both run on the OpenMP threads
// tessera's own kernels use.
#include <cblas.h>
#ifdef TESSERA_HAVE_ONEDNN
#include <dnnl.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn_matmul.h"

namespace tessera::kernels::cpu {
namespace {

enum class GemmLibrary { blas, onednn };

GemmLibrary choose_library(const char* setting) {
  const std::string asked = setting ? setting : "";
#ifdef TESSERA_HAVE_ONEDNN
  if (asked.empty() || asked == "onednn") return GemmLibrary::onednn;
#else
  TESSERA_CHECK(asked != "onednn", "TESSERA_CPU_GEMM=onednn, but this build has no oneDNN (Debian: libdnnl-dev, then "
                                   "configure again)");
  if (asked.empty()) return GemmLibrary::blas;
#endif
  TESSERA_CHECK(asked == "blas", "TESSERA_CPU_GEMM must be onednn or blas, not '", asked, "'");
  return GemmLibrary::blas;
}

GemmLibrary library() {
  static const GemmLibrary chosen = choose_library(std::getenv("TESSERA_CPU_GEMM"));
  return chosen;
}

// c[m, n] *= beta (k == 0: the product is empty); beta == 0 overwrites, as BLAS does.
void scale_only(int64_t m, int64_t n, float beta, float* c) {
  const int64_t total = m * n;
  if (beta == 0.0f) {
    std::fill(c, c + total, 0.0f);
  } else if (beta != 1.0f) {
#pragma omp parallel for simd if (total > (1 << 16))
    for (int64_t i = 0; i < total; ++i) c[i] *= beta;
  }
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           const float* b, float beta, float* c) {
#ifdef TESSERA_HAVE_ONEDNN
  // A linear's forward (x w^T) through the matmul primitive: oneDNN's sgemm was slow at some of
  // these shapes on a Zen 5 VM (GPT-2's 256 x 768 x 3072 at 260 GFLOP/s against 408), and config
  // (a) of gpt_cpu.sh took 4-5% less GEMM time. The other shapes were faster on the sgemm (a dx
  // product: 428 against 345 GFLOP/s).
  if (library() == GemmLibrary::onednn && trans_b && !trans_a &&
      onednn_matmul(trans_a, trans_b, m, n, k, alpha, a, b, false, beta, c))
    return;
  if (library() == GemmLibrary::onednn) {
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                            trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
    TESSERA_CHECK(status == dnnl_success, "oneDNN sgemm failed (status ", static_cast<int>(status), ") for ", m, "x", n,
                  "x", k);
    return;
  }
#endif
  const blasint lda = static_cast<blasint>(std::max<int64_t>(1, trans_a ? m : k));
  const blasint ldb = static_cast<blasint>(std::max<int64_t>(1, trans_b ? k : n));
  const blasint ldc = static_cast<blasint>(std::max<int64_t>(1, n));
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, lda, b,
              ldb, beta, c, ldc);
}

const char* name_of(GemmLibrary l) { return l == GemmLibrary::onednn ? "oneDNN" : "BLAS"; }

}  // namespace

const char* gemm_library_for(const char* setting) { return name_of(choose_library(setting)); }
const char* gemm_library_name() { return name_of(library()); }

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(m, n, beta, c);
  sgemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
}

// One product after another, each using every thread. Measured against one OpenMP loop over the
// batch with OpenBLAS single-threaded inside, that was slower in every shape tried (2 cores,
// OpenBLAS 0.3.21 OpenMP build: 48 x 128x128x64 1.36 vs 0.93 ms, 8 x 256^3 1.66 vs 1.20 ms).
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, const float* b, float beta, float* c) {
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) return scale_only(batch * m, n, beta, c);
  for (int64_t i = 0; i < batch; ++i)
    sgemm(trans_a, trans_b, m, n, k, alpha, a + i * m * k, b + i * k * n, beta, c + i * m * n);
}

}  // namespace tessera::kernels::cpu
