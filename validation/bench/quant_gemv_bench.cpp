// The decode step's product, y = W x for one token, with W in f32 (the GEMM library, ops' gemm at
// m = 1, and f32_gemv's AVX-512 path, which generate runs at batch 1), bf16 (bf16_weight_matmul, each path this CPU runs), int8 and int4
// (kernels/cpu/quant_gemv.cpp, each path this CPU runs, and on AVX-512 VNNI the int4 f32 kernel on
// one thread beside the integer product that path takes; and their bf16 products under generate
// --weights bf16, quant_bf16_matmul, on each bf16 path this CPU runs: avx512_bf16 and amx_bf16),
// the bf16 products at batch 1 and at --batch M (weights streamed alike), against the
// memory-bandwidth limit measured in the same run: a copy loop's GB/s, and the limit of a GEMV is
// that rate over the bytes it must read (weights, scales, zero points). Each format's matrix is held
// in enough copies (>= 256 MB) that successive GEMVs read from memory, not from the 32 MB last-level
// cache, as a model's layers do in decoding. Not a test.
//
// Then the batched product (--batch M activation rows, batched decode's shape): f32 sgemm, the
// quantised register tiles (what quant_gemm ran for every M before the panels) and quant_gemm (each
// block of weight rows dequantised once into an f32 panel, then sgemm), bf16 weights
// (bf16_weight_matmul) and the quantised ones' bf16 products (quant_bf16_matmul), each bf16 path,
// and their int8-activation products (quant_w8a8_gemm, the best path, packing per call; and
// quant_w8a8_gemm_packed on the matrix packed once, as generate --activations int8 runs it), in
// GFLOP/s. The GEMV lines include
// the packed int8-activation product at m = 1 (generate's batch 1 under --activations int8) against
// the quantised matrix's bytes (the packed blocks read 6-8% more: offsets, padding).
//
// usage: bench_quant_gemv [--reps N] [--group G] [--batch M]     threads: OMP_NUM_THREADS
// Figures: GEMV/s (the tokens/s one matrix alone would allow), GB/s of bytes read, % of the limit.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_matmul_paths.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/f32_gemv_paths.h"
#include "kernels/cpu/quant_paths.h"
#include "kernels/cpu/quant_w8a8_packed.h"
#include "kernels/cpu/quant_w8a8_paths.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace cpu = tessera::kernels::cpu;
int g_reps = 5;
constexpr double kFootprint = 256e6;  // bytes of copies per format: well past the last-level cache

// Best seconds per call of f(i) over `calls` calls (i = 0..calls-1), best of g_reps rounds after a warm-up.
double best_per_call(int64_t calls, const std::function<void(int64_t)>& f) {
  for (int64_t i = 0; i < calls; ++i) f(i);
  double best = 1e30;
  for (int r = 0; r < g_reps; ++r) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < calls; ++i) f(i);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / double(calls));
  }
  return best;
}

double copy_gbs() {
  const int64_t n = int64_t{64} << 20;
  std::vector<float> src(static_cast<size_t>(n), 1.0f), dst(static_cast<size_t>(n), 0.0f);
  const double sec = best_per_call(1, [&](int64_t) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  });
  return 8.0 * double(n) / sec / 1e9;
}

void line(const char* what, int64_t rows, int64_t cols, double bytes, double sec, double bandwidth) {
  const double limit = bandwidth * 1e9 / bytes;  // GEMV/s if only the bytes' transfer counted
  std::printf("%-26s [%4lld x %4lld] %9.2f MB %10.0f GEMV/s %7.1f GB/s %6.0f%% of %8.0f GEMV/s\n", what,
              static_cast<long long>(rows), static_cast<long long>(cols), bytes / 1e6, 1.0 / sec, bytes / sec / 1e9,
              100.0 * (1.0 / sec) / limit, limit);
}

// The bf16 products' paths that use vector units (each one this CPU runs).
std::vector<cpu::Bf16MatmulPath> bf16_vector_paths() {
  std::vector<cpu::Bf16MatmulPath> paths;
  for (cpu::Bf16MatmulPath path : {cpu::Bf16MatmulPath::avx512_bf16, cpu::Bf16MatmulPath::amx_bf16})
    if (cpu::bf16_matmul_path_supported(path)) paths.push_back(path);
  return paths;
}

// The batched product y [m, rows] = x [m, cols] W^T in f32 and in int8 / int4 (the AVX-512 path
// where this CPU runs it), one matrix (it and its panels stay in cache: this measures the arithmetic).
void batched(int64_t m, int64_t rows, int64_t cols, int64_t group) {
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(m * cols)), y(static_cast<size_t>(m * rows));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.02f * static_cast<float>(static_cast<int64_t>(i * 7919 % 1000) - 500) / 500.0f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;
  const double flop = 2.0 * double(m * rows * cols);
  auto report = [&](const std::string& what, double sec, double f32_sec) {
    std::printf("%-34s M=%-3lld [%4lld x %4lld] %8.1f GFLOP/s %6.2fx f32\n", what.c_str(), static_cast<long long>(m),
                static_cast<long long>(rows), static_cast<long long>(cols), flop / sec / 1e9, f32_sec / sec);
  };
  const double f32_sec = best_per_call(8, [&](int64_t) {
    cpu::gemm(false, true, m, rows, cols, 1.0f, x.data(), w.data(), 0.0f, y.data());
  });
  report(std::string("f32 sgemm (") + cpu::gemm_library_name() + ")", f32_sec, f32_sec);
  {
    std::vector<uint16_t> wb(w.size());
    cpu::f32_to_bf16(wb.data(), w.data(), static_cast<int64_t>(w.size()));
    for (cpu::Bf16MatmulPath bpath : bf16_vector_paths()) {
      const double sec = best_per_call(8, [&](int64_t) {
        cpu::bf16_matmul_on_path(bpath, y.data(), x.data(), m, wb.data(), rows, cols);
      });
      report(std::string("bf16 weights (") + cpu::bf16_matmul_path_name(bpath) + ")", sec, f32_sec);
    }
  }
  const cpu::QuantPath path = cpu::quant_best_path();
  for (int bits : {8, 4}) {
    const int64_t groups = rows * (cols / group);
    std::vector<uint8_t> q(static_cast<size_t>(bits == 8 ? rows * cols : rows * cols / 2)),
        zeros(static_cast<size_t>(bits == 4 ? groups : 0));
    std::vector<float> scales(static_cast<size_t>(groups));
    cpu::quantize_weights(q.data(), scales.data(), bits == 4 ? zeros.data() : nullptr, w.data(), rows, cols, group,
                          bits, false);
    const tessera::kernels::QuantMatrixView v{q.data(), scales.data(), bits == 4 ? zeros.data() : nullptr,
                                              rows, cols, group, bits};
    const std::string name = "int" + std::to_string(bits) + " G" + std::to_string(group) + " ";
    const double tiles = best_per_call(8, [&](int64_t) {
      if (path == cpu::QuantPath::avx512)
        cpu::quant_gemm_rows_avx512(y.data(), x.data(), m, v, 0, rows);
      else
        cpu::quant_gemm_rows_scalar(y.data(), x.data(), m, v, 0, rows);
    });
    report(name + "register tiles (" + cpu::quant_path_name(path) + ")", tiles, f32_sec);
    const double panels = best_per_call(8, [&](int64_t) { cpu::quant_gemm(y.data(), x.data(), m, v); });
    report(name + "quant_gemm (panels)", panels, f32_sec);
    for (cpu::Bf16MatmulPath bpath : bf16_vector_paths()) {
      const double bf16 = best_per_call(8, [&](int64_t) {
        cpu::quant_bf16_matmul_on_paths(path, bpath, y.data(), x.data(), m, v);
      });
      report(name + "quant_bf16_matmul (" + cpu::bf16_matmul_path_name(bpath) + ")", bf16, f32_sec);
    }
    // The best path only (the portable one is a plain loop, far slower: correctness, not speed).
    const cpu::W8A8Path w8a8_path = cpu::w8a8_best_path();
    const double w8a8 =
        best_per_call(8, [&](int64_t) { cpu::quant_w8a8_gemm_on_path(w8a8_path, y.data(), x.data(), m, v); });
    report(name + "quant_w8a8_gemm (int8 x, " + cpu::w8a8_path_name(w8a8_path) + ")", w8a8, f32_sec);
    const cpu::W8A8PackedMatrix packed = cpu::w8a8_pack(v);
    cpu::W8A8Scratch scratch;
    const double once = best_per_call(8, [&](int64_t) {
      cpu::quant_w8a8_gemm_packed_on_path(w8a8_path, y.data(), x.data(), m, packed, scratch);
    });
    report(name + "quant_w8a8_gemm_packed (packed once)", once, f32_sec);
  }
}

// Weights streamed from memory (copies past the last-level cache), batch 1 and `batch` activation
// rows: a call reads the weights once either way, so both have the GEMV's limit.
void matrix(int64_t rows, int64_t cols, int64_t group, int64_t batch, double bandwidth) {
  const int64_t mb = std::max<int64_t>(1, batch);
  std::vector<int64_t> batches{1};
  if (batch > 1) batches.push_back(batch);
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(mb * cols)),
      y(static_cast<size_t>(mb * rows));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.02f * static_cast<float>(static_cast<int64_t>(i * 7919 % 1000) - 500) / 500.0f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;

  {  // f32: the GEMM library at m = 1
    const double bytes = 4.0 * double(rows * cols);
    const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>(kFootprint / bytes));
    std::vector<float> all(static_cast<size_t>(copies * rows * cols));
    for (int64_t c = 0; c < copies; ++c) std::copy(w.begin(), w.end(), all.begin() + c * rows * cols);
    const double sec = best_per_call(copies, [&](int64_t i) {
      cpu::gemm(false, true, 1, rows, cols, 1.0f, x.data(), all.data() + i * rows * cols, 0.0f, y.data());
    });
    line((std::string("f32 (") + cpu::gemm_library_name() + ")").c_str(), rows, cols, bytes, sec, bandwidth);
    if (cpu::f32_gemv_path_supported(cpu::F32GemvPath::avx512)) {  // f32_gemv's own path (generate's batch 1)
      const double own = best_per_call(copies, [&](int64_t i) {
        cpu::f32_gemv_on_path(cpu::F32GemvPath::avx512, y.data(), x.data(), all.data() + i * rows * cols, rows, cols);
      });
      line("f32 GEMV (avx512)", rows, cols, bytes, own, bandwidth);
    }
  }
  {  // bf16 weights: bf16_weight_matmul at m = 1, each path
    const double bytes = 2.0 * double(rows * cols);
    const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>(kFootprint / bytes));
    std::vector<uint16_t> all(static_cast<size_t>(copies * rows * cols));
    cpu::f32_to_bf16(all.data(), w.data(), rows * cols);
    for (int64_t c = 1; c < copies; ++c) std::copy_n(all.begin(), rows * cols, all.begin() + c * rows * cols);
    std::vector<cpu::Bf16MatmulPath> paths{cpu::Bf16MatmulPath::scalar};
    for (cpu::Bf16MatmulPath path : bf16_vector_paths()) paths.push_back(path);
    for (int64_t m : batches) {
      for (cpu::Bf16MatmulPath path : paths) {
        if (path == cpu::Bf16MatmulPath::scalar && m > 1) continue;
        const double sec = best_per_call(copies, [&](int64_t i) {
          cpu::bf16_matmul_on_path(path, y.data(), x.data(), m, all.data() + i * rows * cols, rows, cols);
        });
        const std::string what = std::string("bf16 (") + cpu::bf16_matmul_path_name(path) + ") M=" + std::to_string(m);
        line(what.c_str(), rows, cols, bytes, sec, bandwidth);
      }
    }
  }
  for (int bits : {8, 4}) {
    const int64_t qbytes = bits == 8 ? rows * cols : rows * cols / 2, groups = rows * (cols / group);
    std::vector<uint8_t> q(static_cast<size_t>(qbytes)), zeros(static_cast<size_t>(bits == 4 ? groups : 0));
    std::vector<float> scales(static_cast<size_t>(groups));
    cpu::quantize_weights(q.data(), scales.data(), bits == 4 ? zeros.data() : nullptr, w.data(), rows, cols, group,
                          bits, false);
    const double bytes = double(qbytes) + 4.0 * double(groups) + double(zeros.size());
    const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>(kFootprint / bytes));
    std::vector<uint8_t> all_q(static_cast<size_t>(copies * qbytes)), all_z(static_cast<size_t>(copies) * zeros.size());
    std::vector<float> all_s(static_cast<size_t>(copies * groups));
    for (int64_t c = 0; c < copies; ++c) {
      std::copy(q.begin(), q.end(), all_q.begin() + c * qbytes);
      std::copy(scales.begin(), scales.end(), all_s.begin() + c * groups);
      std::copy(zeros.begin(), zeros.end(), all_z.begin() + c * static_cast<int64_t>(zeros.size()));
    }
    for (cpu::QuantPath path : {cpu::QuantPath::scalar, cpu::QuantPath::avx512}) {
      if (!cpu::quant_path_supported(path)) continue;
      const double sec = best_per_call(copies, [&](int64_t i) {
        const tessera::kernels::QuantMatrixView v{all_q.data() + i * qbytes, all_s.data() + i * groups,
                                                  bits == 4 ? all_z.data() + i * groups : nullptr, rows, cols, group,
                                                  bits};
        cpu::quant_gemv_on_path(path, y.data(), x.data(), v);
      });
      const std::string what = "int" + std::to_string(bits) + " G" + std::to_string(group) + " (" +
                               cpu::quant_path_name(path) + ")";
      line(what.c_str(), rows, cols, bytes, sec, bandwidth);
    }
    if (bits == 4 && cpu::quant_path_supported(cpu::QuantPath::avx512) && cpu::quant_int4_vnni_supported()) {
      // The AVX-512 path's int4 line above is the VNNI integer product; its f32 kernel, for the ratio.
      const double sec = best_per_call(copies, [&](int64_t i) {
        const tessera::kernels::QuantMatrixView v{all_q.data() + i * qbytes, all_s.data() + i * groups,
                                                  all_z.data() + i * groups, rows, cols, group, bits};
        cpu::quant_gemv_rows_avx512(y.data(), x.data(), v, 0, rows);
      });
      line(("int4 G" + std::to_string(group) + " (avx512 f32, 1 thr)").c_str(), rows, cols, bytes, sec, bandwidth);
    }
    // generate --weights bf16: the quantised matrix's bf16 products (quant_bf16_matmul_on_paths) at
    // batch 1 and `batch`, each bf16 path with the best quantised path
    for (int64_t m : batches)
      for (cpu::Bf16MatmulPath bpath : bf16_vector_paths()) {
        const double sec = best_per_call(copies, [&](int64_t i) {
          const tessera::kernels::QuantMatrixView v{all_q.data() + i * qbytes, all_s.data() + i * groups,
                                                    bits == 4 ? all_z.data() + i * groups : nullptr, rows, cols, group,
                                                    bits};
          cpu::quant_bf16_matmul_on_paths(cpu::quant_best_path(), bpath, y.data(), x.data(), m, v);
        });
        const std::string what = "int" + std::to_string(bits) + " G" + std::to_string(group) + " bf16 (" +
                                 cpu::bf16_matmul_path_name(bpath) + ") M=" + std::to_string(m);
        line(what.c_str(), rows, cols, bytes, sec, bandwidth);
      }
    {  // generate --activations int8 at batch 1: the packed integer product at m = 1
      const tessera::kernels::QuantMatrixView v{q.data(), scales.data(), bits == 4 ? zeros.data() : nullptr,
                                                rows, cols, group, bits};
      const std::vector<cpu::W8A8PackedMatrix> packed(static_cast<size_t>(copies), cpu::w8a8_pack(v));
      cpu::W8A8Scratch scratch;
      const cpu::W8A8Path path = cpu::w8a8_best_path();
      const double sec = best_per_call(copies, [&](int64_t i) {
        cpu::quant_w8a8_gemm_packed_on_path(path, y.data(), x.data(), 1, packed[static_cast<size_t>(i)], scratch);
      });
      const std::string what = "int" + std::to_string(bits) + " G" + std::to_string(group) + " int8 x packed";
      line(what.c_str(), rows, cols, bytes, sec, bandwidth);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t group = 64, batch = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      g_reps = std::atoi(argv[++i]);
    } else if (a == "--group" && i + 1 < argc) {
      group = std::atoll(argv[++i]);
    } else if (a == "--batch" && i + 1 < argc) {
      batch = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_quant_gemv [--reps N] [--group G] [--batch M]\n");
      return 2;
    }
  }
  std::printf("threads %d, quantised path chosen: %s\n", omp_get_max_threads(),
              cpu::quant_path_name(cpu::quant_best_path()));
  const double bandwidth = copy_gbs();
  std::printf("limit: copy of 64M floats %.1f GB/s (8 bytes per element); a GEMV's limit = that / its bytes\n\n",
              bandwidth);
  matrix(768, 3072, group, batch, bandwidth);
  matrix(3072, 768, group, batch, bandwidth);
  if (batch > 0) {
    std::printf("\nbatched products (one matrix, in cache), M = %lld activation rows\n", static_cast<long long>(batch));
    batched(batch, 768, 3072, group);
    batched(batch, 3072, 768, group);
  }
  return 0;
}
