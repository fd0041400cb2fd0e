// Benchmark of the CPU AdamW's paths (scalar, AVX2, AVX-512) in GB/s against this machine's memory
// bandwidth, measured in the same run: STREAM-like copy and triad loops, and a loop with AdamW's
// exact traffic and no arithmetic to speak of (p += g, m += g, v += g), its memory ceiling. Not a test.
//
// usage: bench_adamw_cpu [--sizes M1,M2,...] [--reps N]   sizes in millions of parameters
// Threads: OMP_NUM_THREADS. Traffic counted as STREAM does (no write-allocate): AdamW reads param,
// grad, exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq back: 28 bytes per parameter.
// Copy and triad write to lines they did not read, so their real traffic is 3/2 and 4/3 of the
// counted one (the write-allocate reads); AdamW and the same-traffic loop write back what they read.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/adamw_paths.h"

namespace {

using tessera::kernels::cpu::AdamWPath;
using Clock = std::chrono::steady_clock;

// A float array of n, 64-byte aligned, first touched by the threads that will stream it.
struct Buffer {
  float* data;
  explicit Buffer(int64_t n, float value) : data(static_cast<float*>(std::aligned_alloc(64, ((n * 4 + 63) / 64) * 64))) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) data[i] = value + 1e-7f * float(i % 1000);
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

std::vector<int64_t> parse_sizes(const char* text) {
  std::vector<int64_t> sizes;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    const double millions = std::strtod(p, &end);
    if (end == p || millions <= 0) {
      std::fprintf(stderr, "error: --sizes wants millions of parameters separated by commas, got '%s'\n", text);
      std::exit(2);
    }
    sizes.push_back(static_cast<int64_t>(millions * 1e6));
    p = *end == ',' ? end + 1 : end;
  }
  return sizes;
}

// 100000000 -> "100M", 250000 -> "0.25M".
std::string label(int64_t n) {
  char text[32];
  std::snprintf(text, sizeof text, "%gM", n / 1e6);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {10'000'000, 30'000'000, 100'000'000};
  int reps = 5;
  for (int a = 1; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--sizes") && a + 1 < argc) sizes = parse_sizes(argv[++a]);
    else if (!std::strcmp(argv[a], "--reps") && a + 1 < argc) reps = std::max(1, std::atoi(argv[++a]));
    else {
      std::fprintf(stderr, "usage: %s [--sizes M1,M2,...] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  const int64_t n_max = *std::max_element(sizes.begin(), sizes.end());
  Buffer param(n_max, 0.5f), grad(n_max, 0.01f), exp_avg(n_max, 0.0f), exp_avg_sq(n_max, 0.0f);
  Buffer scratch_x(n_max, 1.0f), scratch_y(n_max, 2.0f);

  std::printf("threads %d, best of %d runs each; AdamW path chosen at run time: %s\n", omp_get_max_threads(), reps,
              tessera::kernels::cpu::adamw_path_name(tessera::kernels::cpu::adamw_best_path()));
  std::printf("%-8s %-8s %9s %9s %8s %8s\n", "params", "kernel", "ms", "GB/s", "%triad", "%ceiling");
  tessera::ops::AdamWArgs args;
  args.lr = 1e-3f;
  args.weight_decay = 0.1f;
  args.step = 0;
  for (int64_t n : sizes) {
    // Memory bandwidth at this size: copy y = x (8 bytes/element), triad x = y + s g (12), and the
    // ceiling: AdamW's own arrays and traffic, p,m,v += g (28; the values stay finite, and AdamW
    // carries on from them). Every kernel runs once per round, round after round, so that a burst
    // of load from elsewhere falls on all of them alike; each keeps its best round.
    float *x = scratch_x.data, *y = scratch_y.data, *p = param.data, *m = exp_avg.data, *v = exp_avg_sq.data;
    const float* g = grad.data;
    struct Kernel {
      std::string name;
      double bytes_per_element;
      std::function<void()> run;
      double best_s = 1e30;
    };
    std::vector<Kernel> kernels;
    kernels.push_back({"copy", 8.0, [&] {
#pragma omp parallel for schedule(static)
                         for (int64_t i = 0; i < n; ++i) y[i] = x[i];
                       }});
    kernels.push_back({"triad", 12.0, [&] {
#pragma omp parallel for schedule(static)
                         for (int64_t i = 0; i < n; ++i) x[i] = y[i] + 0.5f * g[i];
                       }});
    kernels.push_back({"ceiling", 28.0, [&] {
#pragma omp parallel for schedule(static)
                         for (int64_t i = 0; i < n; ++i) {
                           p[i] += g[i];
                           m[i] += g[i];
                           v[i] += g[i];
                         }
                       }});
    for (AdamWPath path : {AdamWPath::scalar, AdamWPath::avx2, AdamWPath::avx512}) {
      const char* name = tessera::kernels::cpu::adamw_path_name(path);
      if (!tessera::kernels::cpu::adamw_path_supported(path)) {
        std::printf("%-8s %-8s %9s\n", label(n).c_str(), name, "unsupported");
        continue;
      }
      kernels.push_back({name, 28.0, [&, path] {
                           args.step += 1;
                           tessera::kernels::cpu::adamw_on_path(path, p, g, m, v, n, args);
                         }});
    }
    for (int round = 0; round < reps; ++round)
      for (Kernel& k : kernels) {
        const auto t0 = Clock::now();
        k.run();
        k.best_s = std::min(k.best_s, std::chrono::duration<double>(Clock::now() - t0).count());
      }
    auto gbs = [&](const Kernel& k) { return k.bytes_per_element * n / k.best_s / 1e9; };
    const double triad_gbs = gbs(kernels[1]), ceiling_gbs = gbs(kernels[2]);
    for (const Kernel& k : kernels)
      std::printf("%-8s %-8s %9.2f %9.2f %7.0f%% %7.0f%%\n", label(n).c_str(), k.name.c_str(), k.best_s * 1e3, gbs(k),
                  100 * gbs(k) / triad_gbs, 100 * gbs(k) / ceiling_gbs);
  }
  return 0;
}
