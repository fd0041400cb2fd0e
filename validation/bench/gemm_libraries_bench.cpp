// The float32 GEMMs of a GPT-2 124M training step (256 token rows) on one sgemm library: which
// library kernels/cpu/gemm.cpp should run them on. Built by gemm_libraries.sh once per library
// (-DUSE_ONEDNN, -DUSE_BLIS, or the CBLAS it links); not part of the tessera build.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#if defined(USE_ONEDNN)
#include <dnnl.h>
#define LIBRARY "oneDNN"
#elif defined(USE_BLIS)
#include <blis.h>
#define LIBRARY "BLIS"
#else
#include <cblas.h>
#define LIBRARY "OpenBLAS"
#endif

namespace {

struct Shape {
  const char* name;
  bool ta, tb;
  long m, n, k;
  float beta;    // 1: accumulates into the gradient, as the weight gradients do
  int per_step;  // how often a GPT-2 124M step runs it (12 blocks, one head)
};

// Row-major c[m, n] = op(a) op(b) + beta c.
void gemm(const Shape& s, const float* a, const float* b, float* c) {
  const long lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n, ldc = s.n;
#if defined(USE_ONEDNN)
  dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a, lda, b, ldb, s.beta, c, ldc);
#elif defined(USE_BLIS)
  float one = 1.0f, beta = s.beta;
  bli_sgemm(s.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.m, s.n, s.k, &one,
            const_cast<float*>(a), lda, 1, const_cast<float*>(b), ldb, 1, &beta, c, ldc, 1);
#else
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f,
              a, lda, b, ldb, s.beta, c, ldc);
#endif
}

}  // namespace

int main() {
  const long t = 256, c = 768, v = 50257;
  const Shape shapes[] = {
      {"square 2048", false, false, 2048, 2048, 2048, 0, 0},
      {"qkv forward", false, true, t, 3 * c, c, 0, 12},   {"qkv dx", false, false, t, c, 3 * c, 0, 12},
      {"qkv dW", true, false, 3 * c, c, t, 1, 12},        {"proj forward", false, true, t, c, c, 0, 12},
      {"proj dx", false, false, t, c, c, 0, 12},          {"proj dW", true, false, c, c, t, 1, 12},
      {"fc forward", false, true, t, 4 * c, c, 0, 12},    {"fc dx", false, false, t, c, 4 * c, 0, 12},
      {"fc dW", true, false, 4 * c, c, t, 1, 12},         {"fc2 forward", false, true, t, c, 4 * c, 0, 12},
      {"fc2 dx", false, false, t, 4 * c, c, 0, 12},       {"fc2 dW", true, false, c, 4 * c, t, 1, 12},
      {"head forward", false, true, t, v, c, 0, 1},       {"head dx", false, false, t, c, v, 0, 1},
      {"head dW", true, false, v, c, t, 1, 1},
  };
  std::printf("%s, best of 5 after a warm-up\n%-14s %6s %6s %6s %10s %9s\n", LIBRARY, "GEMM", "m", "n", "k", "ms",
              "GFLOP/s");
  double step_ms = 0;
  for (const Shape& s : shapes) {
    std::vector<float> a(s.m * s.k, 0.01f), b(s.k * s.n, 0.02f), out(s.m * s.n, 0.0f);
    double best = 1e30;
    for (int r = 0; r < 6; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      gemm(s, a.data(), b.data(), out.data());
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best = std::min(best, seconds);
    }
    step_ms += best * 1e3 * s.per_step;
    std::printf("%-14s %6ld %6ld %6ld %10.3f %9.1f\n", s.name, s.m, s.n, s.k, best * 1e3,
                2.0 * s.m * s.n * s.k / best / 1e9);
  }
  std::printf("%s: the GEMMs of one GPT-2 124M step (batch 4 x seq 64): %.1f ms\n", LIBRARY, step_ms);
  return 0;
}
