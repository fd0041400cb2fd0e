// Roofline lines for tessera's CPU kernels, each against a limit measured in the same run (not a
// test): the GEMMs of a GPT-2 124M step (batch 4 x seq 64 = 256 token rows) through ops::matmul in
// GFLOP/s against a 2048^3 sgemm (and with bf16 inputs against a 2048^3 bf16 GEMM), and their linear forwards with the bias fused against unfused;
// layer norm forward and backward in GB/s against a copy loop's bandwidth; causal attention
// forward and backward in GFLOP/s (against the same sgemm rate, which attention, made of small
// tiles and a softmax, can at best approach); GELU, bias, softmax cross-entropy and bf16 rounding
// in GB/s against the copy; the Llama layers' RMSNorm, SwiGLU and rotary qkv packing in GB/s
// against the copy.
//
// usage: bench_kernels_cpu [--reps N] [--only SECTION]     threads: OMP_NUM_THREADS
// Each figure is the best of N runs (default 7) after one warm-up. SECTION (gemm, linear,
// layernorm, elementwise, llama, attention) runs that section alone, with the limit it is read
// against.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;

int g_reps = 7;
const char* g_only = nullptr;  // --only: the one section to run
bool run_section(const char* name) { return g_only == nullptr || std::strcmp(g_only, name) == 0; }

// Best seconds of g_reps runs of f after one warm-up.
double best_seconds(const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < g_reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

Tensor filled(Shape shape, float scale) {
  Tensor t = Tensor::empty(std::move(shape));
  float* p = t.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = scale * static_cast<float>((i * 7919) % 1000 - 500) / 500.0f;
  return t;
}

// C[m, n] = A[m, k] B^T (B stored [n, k], as a linear layer's weight) and the backward products.
double gemm_gflops(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
  Tensor a = trans_a ? filled({k, m}, 1.0f) : filled({m, k}, 1.0f);
  Tensor b = trans_b ? filled({n, k}, 1.0f) : filled({k, n}, 1.0f);
  Tensor c = Tensor::zeros({m, n});
  const double s = best_seconds([&] { ops::matmul(a, trans_a, b, trans_b, c); });
  return 2.0 * double(m) * double(n) * double(k) / s / 1e9;
}

// C = A op B with bf16 inputs: B given with its bf16 copy (a weight under mixed precision), and A
// too when both_given (an operand rounded once for several products, RoundedOperand); otherwise A
// is rounded inside each product.
double gemm_bf16_gflops(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, bool both_given) {
  Tensor a = trans_a ? filled({k, m}, 1.0f) : filled({m, k}, 1.0f);
  Tensor b = trans_b ? filled({n, k}, 1.0f) : filled({k, n}, 1.0f);
  Tensor c = Tensor::zeros({m, n});
  Tensor b_bits = Tensor::empty({b.numel()}, DType::bf16);
  ops::cast(b_bits, b.reshape({b.numel()}));
  const ops::Operand b_with_copy(b, b_bits);
  const ops::MatmulInputs bf16 = ops::MatmulInputs::bf16;
  const ops::RoundedOperand a_operand(a, both_given ? bf16 : ops::MatmulInputs::f32);  // f32: rounds nothing
  const double s =
      best_seconds([&] { ops::matmul(a_operand, trans_a, b_with_copy, trans_b, c, 1.0f, 0.0f, bf16); });
  return 2.0 * double(m) * double(n) * double(k) / s / 1e9;
}

// A copy of n floats: 8 bytes per element counted (no write-allocate), as STREAM counts it.
double copy_gbs(int64_t n) {
  Tensor src = filled({n}, 1.0f), dst = Tensor::zeros({n});
  const float* s = src.data<float>();
  float* d = dst.data<float>();
  const double sec = best_seconds([&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = s[i];
  });
  return 8.0 * double(n) / sec / 1e9;
}

// The Llama layers' loops (kernels/cpu/rmsnorm.cpp, swiglu.cpp, rope.cpp) in GB/s of bytes read
// and written against the copy: RMSNorm on the layer norm's shapes, SwiGLU on a 256-row MLP of
// 3072 columns (GELU's), and the rotary qkv packing with grouped-query heads (12 query heads of 64,
// 4 kv heads) at 1024 token rows, as one sequence of 1024 and as 4 of 256 (its cos/sin table is
// made per call for the positions: the first pays 4x the second's table per byte packed).
void llama_section(double bandwidth) {
  auto line = [&](const char* name, double bytes, const std::function<void()>& run) {
    const double gbs = bytes / best_seconds(run) / 1e9;
    std::printf("%-44s %10.1f %7.0f%%\n", name, gbs, 100.0 * gbs / bandwidth);
  };
  std::printf("\n%-44s %10s %8s\n", "Llama layers", "GB/s", "% copy");
  const int64_t c = 768;
  for (const int64_t n : {int64_t{4096}, int64_t{65536}}) {
    Tensor x = filled({n, c}, 1.0f), y = Tensor::zeros({n, c}), w = filled({c}, 1.0f), rstd = Tensor::zeros({n});
    Tensor dy = filled({n, c}, 0.5f), dx = Tensor::zeros({n, c}), dw = Tensor::zeros({c});
    const double elements = double(n) * double(c);
    const std::string shape = std::to_string(n) + " x " + std::to_string(c);
    line(("RMSNorm forward  " + shape).c_str(), 8.0 * elements, [&] { ops::rmsnorm_forward(y, rstd, x, w, 1e-5f); });
    // reads dy and x, reads and writes dx (it accumulates)
    line(("RMSNorm backward " + shape).c_str(), 16.0 * elements,
         [&] { ops::rmsnorm_backward(dx, dw, dy, x, w, rstd); });
  }
  {
    const int64_t n = 256 * 4 * c;
    Tensor gate = filled({n}, 4.0f), up = filled({n}, 1.0f), out = Tensor::zeros({n});
    Tensor dout = filled({n}, 0.5f), dgate = Tensor::zeros({n}), dup = Tensor::zeros({n});
    line("SwiGLU forward 256 x 3072", 12.0 * n, [&] { ops::swiglu_forward(out, gate, up); });
    // reads dout, gate, up; writes dgate, dup
    line("SwiGLU backward 256 x 3072", 20.0 * n, [&] { ops::swiglu_backward(dgate, dup, dout, gate, up); });
  }
  for (const int64_t batch : {int64_t{1}, int64_t{4}}) {
    ops::RopeShape s;
    s.batch = batch;
    s.seq = 1024 / batch;
    s.heads = 12;
    s.kv_heads = 4;
    s.head_dim = 64;
    s.group = 3;
    const int64_t rows = s.batch * s.seq, hd = s.heads * s.head_dim, kd = s.kv_heads * s.head_dim;
    Tensor q = filled({rows, hd}, 1.0f), k = filled({rows, kd}, 1.0f), v = filled({rows, kd}, 1.0f);
    Tensor qkv = Tensor::zeros({rows, 3 * hd});
    Tensor dq = Tensor::zeros({rows, hd}), dk = Tensor::zeros({rows, kd}), dv = Tensor::zeros({rows, kd});
    // q, k, v read, qkv written (and the transpose: the same bytes the other way)
    const double bytes = 4.0 * double(rows) * double(hd + 2 * kd + 3 * hd);
    const std::string shape = "B " + std::to_string(batch) + ", T " + std::to_string(s.seq);
    line(("rope_pack forward  12/4 heads, " + shape).c_str(), bytes, [&] { ops::rope_pack_forward(qkv, q, k, v, s); });
    line(("rope_pack backward 12/4 heads, " + shape).c_str(), bytes,
         [&] { ops::rope_pack_backward(dq, dk, dv, qkv, s); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      g_reps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc && g_only == nullptr) {
      g_only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_kernels_cpu [--reps N] [--only SECTION]\n");
      return 2;
    }
  }
  const char* const sections[] = {"gemm", "linear", "layernorm", "elementwise", "llama", "attention"};
  if (g_only != nullptr &&
      std::none_of(std::begin(sections), std::end(sections), [](const char* n) { return std::strcmp(n, g_only) == 0; })) {
    std::fprintf(stderr, "error: --only %s: not a section (gemm, linear, layernorm, elementwise, llama, attention)\n",
                 g_only);
    return 2;
  }
  std::printf("threads %d, best of %d\n\n", omp_get_max_threads(), g_reps);
  const double limit = run_section("gemm") || run_section("attention") ? gemm_gflops(2048, 2048, 2048, false, true) : 0;
  if (limit > 0) std::printf("limit: sgemm 2048^3 through ops::matmul: %.1f GFLOP/s\n\n", limit);

  struct Shape3 {
    const char* name;
    int64_t m, n, k;
    bool ta, tb;
  };
  // The head's rows: GPT-2's 50257 tokens padded to a multiple of 64, as GptConfig pads them (a
  // bf16 product of 50257 rows runs at half the rate on oneDNN 2.7: the padding matters).
  const int64_t rows = 256, c = 768, vocab = 50304;
  const Shape3 gemms[] = {
      {"qkv forward      [256x768] x [2304x768]^T", rows, 3 * c, c, false, true},
      {"proj forward     [256x768] x [768x768]^T", rows, c, c, false, true},
      {"fc forward       [256x768] x [3072x768]^T", rows, 4 * c, c, false, true},
      {"fc2 forward      [256x3072] x [768x3072]^T", rows, c, 4 * c, false, true},
      {"fc dx            [256x3072] x [3072x768]", rows, c, 4 * c, false, false},
      {"fc dW            [256x3072]^T x [256x768]", 4 * c, c, rows, true, false},
      {"head forward     [256x768] x [50304x768]^T", rows, vocab, c, false, true},
      {"head dW          [256x50304]^T x [256x768]", vocab, c, rows, true, false},
      {"head dx          [256x50304] x [50304x768]", rows, c, vocab, false, false},
  };
  if (run_section("gemm")) {
    std::printf("%-44s %10s %8s\n", "GEMM (GPT-2 124M, 256 token rows)", "GFLOP/s", "% limit");
    for (const Shape3& g : gemms) {
      const double r = gemm_gflops(g.m, g.n, g.k, g.ta, g.tb);
      std::printf("%-44s %10.1f %7.0f%%\n", g.name, r, 100.0 * r / limit);
    }
  }

  // The same products with bf16 inputs (--precision bf16): the limit with both operands' bf16
  // copies given (the GEMM alone), then each shape as a step runs it, the weight's copy given and
  // the activation rounded on the fly, and with both given (what storing the activations in bf16
  // would leave).
  if (run_section("gemm")) {
    const double bf16_limit = gemm_bf16_gflops(2048, 2048, 2048, false, true, true);
    std::printf("\nlimit: bf16 GEMM 2048^3, both operands' copies given: %.1f GFLOP/s (%.2fx sgemm)\n\n",
                bf16_limit, bf16_limit / limit);
    std::printf("%-44s %10s %8s %10s %8s\n", "bf16 GEMM (weight's copy given)", "GFLOP/s", "% limit",
                "both given", "% limit");
    for (const Shape3& g : gemms) {
      const double one = gemm_bf16_gflops(g.m, g.n, g.k, g.ta, g.tb, false);
      const double both = gemm_bf16_gflops(g.m, g.n, g.k, g.ta, g.tb, true);
      std::printf("%-44s %10.1f %7.0f%% %10.1f %7.0f%%\n", g.name, one, 100.0 * one / bf16_limit, both,
                  100.0 * both / bf16_limit);
    }
  }

  // A linear's forward with its bias: ops::linear_forward (on oneDNN the bias in the matmul's
  // epilogue; with GELU, then one pass) against the unfused ops it replaced.
  if (run_section("linear"))
    std::printf("\n%-44s %10s %10s %7s\n", "linear forward + bias (256 token rows)", "fused ms", "unfused", "ratio");
  for (const Shape3& g : {gemms[0], gemms[1], gemms[2], gemms[3]}) {
    if (!run_section("linear")) break;
    const bool gelu = g.n == 4 * c;  // the MLP's first layer
    Tensor x = filled({g.m, g.k}, 1.0f), w = filled({g.n, g.k}, 0.05f), bias = filled({g.n}, 0.1f);
    Tensor y = Tensor::zeros({g.m, g.n}), pre = Tensor::zeros({g.m, g.n});
    const double fused = best_seconds([&] { ops::linear_forward(y, x, w, bias, gelu ? &pre : nullptr); });
    const double unfused = best_seconds([&] {
      if (gelu) {
        ops::matmul(x, false, w, true, pre);
        ops::bias_gelu_forward(y, pre, bias);
      } else {
        ops::broadcast_rows(y, bias);
        ops::matmul(x, false, w, true, y, 1.0f, 1.0f);
      }
    });
    std::printf("%-.17s%-27s %10.3f %10.3f %7.3f\n", g.name, gelu ? "+ GELU" : "", 1e3 * fused, 1e3 * unfused,
                fused / unfused);
  }

  const bool streaming = run_section("layernorm") || run_section("elementwise") || run_section("llama");
  const double bandwidth = streaming ? copy_gbs(int64_t{64} << 20) : 0;
  if (streaming)
    std::printf("%slimit: copy of 64M floats: %.1f GB/s (8 bytes per element)\n", limit > 0 ? "\n" : "", bandwidth);
  if (run_section("layernorm")) std::printf("\n%-44s %10s %8s\n", "layer norm (bytes: x, y or dy, dx)", "GB/s", "% copy");
  for (const int64_t n : {int64_t{4096}, int64_t{65536}}) {
    if (!run_section("layernorm")) break;
    Tensor x = filled({n, c}, 1.0f), y = Tensor::zeros({n, c}), w = filled({c}, 1.0f), b = filled({c}, 0.1f);
    Tensor mean = Tensor::zeros({n}), rstd = Tensor::zeros({n});
    Tensor dy = filled({n, c}, 0.5f), dx = Tensor::zeros({n, c}), dw = Tensor::zeros({c}), db = Tensor::zeros({c});
    const double elements = double(n) * double(c);
    const double fwd = 8.0 * elements / best_seconds([&] { ops::layernorm_forward(y, mean, rstd, x, w, b); }) / 1e9;
    // backward reads dy and x, reads and writes dx (it accumulates): 16 bytes per element
    const double bwd =
        16.0 * elements / best_seconds([&] { ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd); }) / 1e9;
    std::printf("forward  %6lld x %-28lld %10.1f %7.0f%%\n", static_cast<long long>(n), static_cast<long long>(c), fwd,
                100.0 * fwd / bandwidth);
    std::printf("backward %6lld x %-28lld %10.1f %7.0f%%\n", static_cast<long long>(n), static_cast<long long>(c), bwd,
                100.0 * bwd / bandwidth);
  }

  // The other loops of a step (kernels/cpu/*.cpp through cpu_ops.h), on GPT-2 124M's shapes: 256
  // token rows, the MLP's 3072 columns, the 50257-column logits; bytes read and written per element.
  if (run_section("elementwise")) {
    std::printf("\n%-44s %10s %8s\n", "elementwise (256 token rows)", "GB/s", "% copy");
    const int64_t rows = 256, mlp = 4 * c, vocab = 50257, n = rows * mlp, logits_n = rows * vocab;
    Tensor x = filled({n}, 2.0f), y = Tensor::zeros({n}), dy = filled({n}, 0.5f), bias = filled({mlp}, 0.1f);
    Tensor logits = filled({logits_n}, 4.0f), dlogits = Tensor::zeros({logits_n});
    Tensor losses = Tensor::zeros({rows}), lse = Tensor::zeros({rows});
    std::vector<int32_t> targets(rows);
    for (int64_t r = 0; r < rows; ++r) targets[r] = static_cast<int32_t>((r * 7919) % vocab);
    std::vector<uint16_t> bits(static_cast<size_t>(logits_n));
    float *px = x.data<float>(), *py = y.data<float>(), *pl = logits.data<float>(), *pd = dlogits.data<float>();
    const float *pdy = dy.data<float>(), *pb = bias.data<float>();
    const struct {
      const char* name;
      double bytes;
      std::function<void()> run;
    } loops[] = {
        {"GELU forward 256 x 3072", 8.0 * n, [&] { kernels::cpu::gelu_forward(py, px, n); }},
        {"bias + GELU forward 256 x 3072", 16.0 * n,
         [&] { kernels::cpu::bias_gelu_forward(py, px, pb, rows, mlp); }},
        {"GELU backward 256 x 3072", 12.0 * n, [&] { kernels::cpu::gelu_backward(py, px, pdy, n); }},
        {"bias backward 256 x 3072", 4.0 * n, [&] { kernels::cpu::bias_backward(py, pdy, rows, mlp); }},
        {"softmax xent forward 256 x 50257", 4.0 * logits_n,
         [&] {
           kernels::cpu::softmax_xent_forward(losses.data<float>(), lse.data<float>(), pl, targets.data(), rows, vocab,
                                              vocab);
         }},
        {"softmax xent backward 256 x 50257", 8.0 * logits_n,
         [&] {
           kernels::cpu::softmax_xent_backward(pd, pl, targets.data(), lse.data<float>(), rows, vocab, vocab, 1.0f, 0);
         }},
        {"f32 to bf16 256 x 50257", 6.0 * logits_n,
         [&] { kernels::cpu::f32_to_bf16(bits.data(), pl, logits_n); }},
        {"round to bf16 in place 256 x 50257", 8.0 * logits_n,
         [&] { kernels::cpu::round_bf16_inplace(pd, nullptr, logits_n); }},
    };
    for (const auto& l : loops) {
      const double gbs = l.bytes / best_seconds(l.run) / 1e9;
      std::printf("%-44s %10.1f %7.0f%%\n", l.name, gbs, 100.0 * gbs / bandwidth);
    }
  }

  if (run_section("llama")) llama_section(bandwidth);

  if (run_section("attention"))
    std::printf("\n%-44s %10s %8s\n", "causal attention (12 heads of 64)", "GFLOP/s", "% limit");
  for (const int64_t t : {int64_t{64}, int64_t{256}, int64_t{1024}}) {
    if (!run_section("attention")) break;
    const int64_t batch = 4, heads = 12, d = 64;
    Tensor qkv = filled({batch, t, 3 * heads * d}, 0.5f), out = Tensor::zeros({batch, t, heads * d});
    Tensor lse = Tensor::zeros({batch, heads, t}), dout = filled({batch, t, heads * d}, 0.5f);
    Tensor dqkv = Tensor::zeros(qkv.shape());
    // causal: half the T x T scores; forward q k^T and p v (4 T^2 D / 2 per head), backward 2.5x that
    const double fwd_flops = 2.0 * double(batch * heads) * double(t) * double(t) * double(d);
    const double fwd = fwd_flops / best_seconds([&] { ops::attention_forward(out, lse, qkv, heads); }) / 1e9;
    const double bwd = 2.5 * fwd_flops /
                       best_seconds([&] { ops::attention_backward(dqkv, dout, qkv, out, lse, heads); }) / 1e9;
    std::printf("forward  B 4, T %-27lld %10.1f %7.0f%%\n", static_cast<long long>(t), fwd, 100.0 * fwd / limit);
    std::printf("backward B 4, T %-27lld %10.1f %7.0f%%\n", static_cast<long long>(t), bwd, 100.0 * bwd / limit);
  }
  return 0;
}
