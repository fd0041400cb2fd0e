// Unit tests of the CPU AdamW: through ops::adamw, and on each code path (scalar, AVX2, AVX-512)
// that this CPU runs: three steps with weight decay and grad_scale against a scalar double
// reference written in torch.optim.AdamW's order, on 1 and 3 threads; every path bit-identical to
// the scalar one, remainders included, and nothing written past the end; the spans' form, its
// zeroing of gradients and its bf16 bits of the updated values.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "kernel_test_util.h"
#include "kernels/cpu/adamw_paths.h"
#include "kernels/cpu/isa.h"
#include "kernels/ops.h"

using tessera::Tensor;

namespace {

using Threads = tessera::testing::ScopedThreads;
using tessera::kernels::cpu::AdamWPath;

// torch.optim.AdamW, one element, in double:
//   p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
void adamw_ref(double& p, double g, double& m, double& v, const tessera::ops::AdamWArgs& a) {
  g *= a.grad_scale;
  p *= 1.0 - double(a.lr) * a.weight_decay;
  m = double(a.beta1) * m + (1.0 - a.beta1) * g;
  v = double(a.beta2) * v + (1.0 - a.beta2) * g * g;
  const double bc1 = 1.0 - std::pow(double(a.beta1), double(a.step));
  const double bc2 = 1.0 - std::pow(double(a.beta2), double(a.step));
  p -= double(a.lr) / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + a.eps);
}

tessera::ops::AdamWArgs test_args() {
  tessera::ops::AdamWArgs args;
  args.lr = 1e-2f;
  args.beta1 = 0.9f;
  args.beta2 = 0.95f;
  args.eps = 1e-8f;
  args.weight_decay = 0.1f;
  args.grad_scale = 0.5f;
  return args;
}

// Parameters, moments (the second one >= 0) and gradients of n elements drawn from seed.
struct AdamWBuffers {
  Tensor p, m, v, g;
};
AdamWBuffers random_buffers(int64_t n, uint64_t seed) {
  AdamWBuffers b{tessera::testing::random_tensor({n}, seed, 1),
                 tessera::testing::random_tensor({n}, seed, 2, 0.0f, 0.1f),
                 tessera::testing::random_tensor({n}, seed, 3, 0.0f, 0.1f), tessera::testing::random_tensor({n}, seed, 4)};
  for (int64_t i = 0; i < n; ++i) b.v.data<float>()[i] *= b.v.data<float>()[i];
  return b;
}

TEST(AdamW, ThreeStepsMatchScalarReference) {
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{70001}}) {
    for (int threads : {1, 3}) {
      Threads scope(threads);
      Tensor param = Tensor::empty({n}), m = Tensor::zeros({n}), v = Tensor::zeros({n}), grad = Tensor::empty({n});
      tessera::philox_fill_normal(param.data<float>(), n, 17, 1, 0, 0.0f, 1.0f);
      std::vector<double> p_ref(param.data<float>(), param.data<float>() + n), m_ref(n, 0.0), v_ref(n, 0.0);
      tessera::ops::AdamWArgs args = test_args();
      for (int64_t step = 1; step <= 3; ++step) {
        tessera::philox_fill_normal(grad.data<float>(), n, 17, 10 + step, 0, 0.0f, 2.0f);
        args.step = step;
        tessera::ops::adamw(param, grad, m, v, args);
        for (int64_t i = 0; i < n; ++i) adamw_ref(p_ref[i], grad.data<float>()[i], m_ref[i], v_ref[i], args);
      }
      for (int64_t i = 0; i < n; ++i) {
        // One step moves p by ~lr; the wrong bias correction, decay or grad scale moves it by
        // >= 1e-4 relative, far beyond float rounding (1e-6).
        ASSERT_NEAR(param.data<float>()[i], p_ref[i], 1e-6 * (std::fabs(p_ref[i]) + 1e-2)) << "n=" << n << " i=" << i;
        // m can cancel to far below the O(1) gradients it is made of: absolute against those.
        ASSERT_NEAR(m.data<float>()[i], m_ref[i], 1e-6 * (std::fabs(m_ref[i]) + 1.0)) << "i=" << i;
        ASSERT_NEAR(v.data<float>()[i], v_ref[i], 1e-6 * std::fabs(v_ref[i]) + 1e-12) << "i=" << i;
      }
    }
  }
}

// The four arrays of one path's run, each with kGuard sentinel floats past n.
struct PathRun {
  static constexpr int64_t kGuard = 32;
  static constexpr float kSentinel = -12345.0f;
  std::vector<float> param, grad, m, v;
  explicit PathRun(int64_t n)
      : param(n + kGuard, kSentinel), grad(n + kGuard, kSentinel), m(n + kGuard, kSentinel),
        v(n + kGuard, kSentinel) {
    tessera::philox_fill_normal(param.data(), n, 23, 1, 0, 0.0f, 1.0f);
    std::fill_n(m.begin(), n, 0.0f);
    std::fill_n(v.begin(), n, 0.0f);
  }
};

// Three steps on `path` of n elements; the arrays afterwards.
PathRun run_path(AdamWPath path, int64_t n) {
  PathRun run(n);
  tessera::ops::AdamWArgs args = test_args();
  for (int64_t step = 1; step <= 3; ++step) {
    tessera::philox_fill_normal(run.grad.data(), n, 23, 10 + step, 0, 0.0f, 2.0f);
    args.step = step;
    tessera::kernels::cpu::adamw_on_path(path, run.param.data(), run.grad.data(), run.m.data(), run.v.data(), n, args);
  }
  return run;
}

class AdamWPathTest : public ::testing::TestWithParam<AdamWPath> {};

// Every lane-count remainder of 8 and 16, a partial last OpenMP chunk (16384 per chunk), 1 and 3
// threads: equal to the double reference within float rounding, and to the scalar path bit for bit.
TEST_P(AdamWPathTest, MatchesReferenceAndScalarPathBitForBit) {
  const AdamWPath path = GetParam();
  if (!tessera::kernels::cpu::adamw_path_supported(path))
    GTEST_SKIP() << tessera::kernels::cpu::adamw_path_name(path) << " is not compiled in or not run by this CPU";
  for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 1001, 16384 + 16 + 5, 70001}) {
    for (int threads : {1, 3}) {
      Threads scope(threads);
      const PathRun got = run_path(path, n);
      const PathRun want = run_path(AdamWPath::scalar, n);
      PathRun ref(n);
      std::vector<double> p_ref(ref.param.begin(), ref.param.begin() + n), m_ref(n, 0.0), v_ref(n, 0.0);
      tessera::ops::AdamWArgs args = test_args();
      for (int64_t step = 1; step <= 3; ++step) {
        tessera::philox_fill_normal(ref.grad.data(), n, 23, 10 + step, 0, 0.0f, 2.0f);
        args.step = step;
        for (int64_t i = 0; i < n; ++i) adamw_ref(p_ref[i], ref.grad[i], m_ref[i], v_ref[i], args);
      }
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got.param[i], p_ref[i], 1e-6 * (std::fabs(p_ref[i]) + 1e-2)) << "n=" << n << " i=" << i;
        ASSERT_NEAR(got.m[i], m_ref[i], 1e-6 * (std::fabs(m_ref[i]) + 1.0)) << "n=" << n << " i=" << i;
        ASSERT_NEAR(got.v[i], v_ref[i], 1e-6 * std::fabs(v_ref[i]) + 1e-12) << "n=" << n << " i=" << i;
      }
      // Bitwise equality (float ==): all paths do the same operations without fused multiply-adds.
      for (int64_t i = 0; i < n + PathRun::kGuard; ++i) {
        ASSERT_EQ(got.param[i], want.param[i]) << "n=" << n << " i=" << i;
        ASSERT_EQ(got.m[i], want.m[i]) << "n=" << n << " i=" << i;
        ASSERT_EQ(got.v[i], want.v[i]) << "n=" << n << " i=" << i;
      }
      for (int64_t i = n; i < n + PathRun::kGuard; ++i)
        ASSERT_EQ(got.param[i], PathRun::kSentinel) << "written past the end: n=" << n << " i=" << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, AdamWPathTest,
                         ::testing::Values(AdamWPath::scalar, AdamWPath::avx2, AdamWPath::avx512),
                         [](const ::testing::TestParamInfo<AdamWPath>& info) {
                           return std::string(tessera::kernels::cpu::adamw_path_name(info.param));
                         });

// ops::adamw runs the widest path the CPU supports; scalar is always there.
TEST(AdamW, ChoosesTheWidestSupportedPath) {
  using tessera::kernels::cpu::adamw_path_supported;
  EXPECT_TRUE(adamw_path_supported(AdamWPath::scalar));
  // no wider than the other kernels' copy (TESSERA_CPU_ISA) in a build with several (isa.h)
  using tessera::kernels::cpu::Isa;
  const Isa isa = tessera::kernels::cpu::isa_copies() ? tessera::kernels::cpu::kernel_isa() : Isa::avx512;
  const AdamWPath want = isa == Isa::avx512 && adamw_path_supported(AdamWPath::avx512) ? AdamWPath::avx512
                         : isa != Isa::base && adamw_path_supported(AdamWPath::avx2)  ? AdamWPath::avx2
                                                                                      : AdamWPath::scalar;
  EXPECT_EQ(tessera::kernels::cpu::adamw_best_path(), want);
#if defined(__x86_64__)
  // On x86 the build compiles both SIMD paths in; a CPU with the instructions must get them.
  EXPECT_EQ(adamw_path_supported(AdamWPath::avx2), bool(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(adamw_path_supported(AdamWPath::avx512), bool(__builtin_cpu_supports("avx512f")));
#endif
  std::printf("adamw path on this CPU: %s\n", tessera::kernels::cpu::adamw_path_name(want));
}

// zero_grad: the same update, bit for bit, and the gradient zero afterwards (on more elements than
// one parallel chunk, on 2 threads).
TEST(AdamW, ZeroGradLeavesTheUpdateAndZeroesTheGradient) {
  tessera::testing::ScopedThreads threads(2);
  const int64_t n = 100003;
  tessera::ops::AdamWArgs args;
  args.lr = 3e-3f;
  args.weight_decay = 0.1f;
  args.grad_scale = 0.5f;
  Tensor p[2], m[2], v[2], g[2];
  for (int k = 0; k < 2; ++k) {
    AdamWBuffers b = random_buffers(n, 11);
    p[k] = b.p, m[k] = b.m, v[k] = b.v, g[k] = b.g;
    args.zero_grad = k == 1;
    tessera::ops::adamw(p[k], g[k], m[k], v[k], args);
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(p[1].data<float>()[i], p[0].data<float>()[i]) << i;
    ASSERT_EQ(m[1].data<float>()[i], m[0].data<float>()[i]) << i;
    ASSERT_EQ(v[1].data<float>()[i], v[0].data<float>()[i]) << i;
    ASSERT_EQ(g[1].data<float>()[i], 0.0f) << i;
    ASSERT_NE(g[0].data<float>()[i], 0.0f) << i;  // without it the gradient is left alone
  }
}

// adamw_spans (the whole optimizer step in one parallel region) gives, bit for bit, what one adamw
// call per span gives (adamw is itself one span, so this checks the spans' chunking, decay choice
// and gaps; the arithmetic is checked against the reference above), with or without decay per span, zeroing only the spans' gradients; what lies
// between spans is left alone. Spans of several chunks and of a few elements, on 2 threads.
TEST(AdamW, SpansMatchOneCallPerSpanBitForBit) {
  tessera::testing::ScopedThreads threads(2);
  const int64_t n = 90000;
  const std::vector<tessera::ops::AdamWSpan> spans = {
      {0, 40000, true}, {40000, 40007, false}, {40100, 70000, true}, {70000, 70768, false}, {71000, n, true}};
  tessera::ops::AdamWArgs args = test_args();
  args.zero_grad = true;
  Tensor p[2], m[2], v[2], g[2];
  for (int k = 0; k < 2; ++k) {
    AdamWBuffers b = random_buffers(n, 5);
    p[k] = b.p, m[k] = b.m, v[k] = b.v, g[k] = b.g;
  }
  const Tensor p_before = p[0].clone(), g_before = g[0].clone();
  tessera::ops::adamw_spans(p[0], g[0], m[0], v[0], spans, args);
  for (const auto& span : spans) {
    tessera::ops::AdamWArgs one = args;
    one.weight_decay = span.decay ? args.weight_decay : 0.0f;
    const tessera::Shape shape{span.end - span.begin};
    Tensor ps = p[1].slice(span.begin, shape), gs = g[1].slice(span.begin, shape);
    Tensor ms = m[1].slice(span.begin, shape), vs = v[1].slice(span.begin, shape);
    tessera::ops::adamw(ps, gs, ms, vs, one);
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(p[0].data<float>()[i], p[1].data<float>()[i]) << i;
    ASSERT_EQ(m[0].data<float>()[i], m[1].data<float>()[i]) << i;
    ASSERT_EQ(v[0].data<float>()[i], v[1].data<float>()[i]) << i;
    ASSERT_EQ(g[0].data<float>()[i], g[1].data<float>()[i]) << i;
  }
  for (const int64_t gap : {int64_t{40050}, int64_t{70900}}) {  // between spans: untouched
    EXPECT_EQ(p[0].data<float>()[gap], p_before.data<float>()[gap]);
    EXPECT_EQ(g[0].data<float>()[gap], g_before.data<float>()[gap]);
  }
  EXPECT_EQ(g[0].data<float>()[100], 0.0f);
  EXPECT_NE(p[0].data<float>()[100], p_before.data<float>()[100]);
}

// param_bits: the spans' updated values rounded to bf16 (as ops::cast rounds them), written
// beside the update on every path this CPU runs; the update itself unchanged bit for bit; bits
// between spans left alone. Spans of several chunks, a partial one, 2 threads.
TEST(AdamW, SpansWriteTheUpdatedValuesBf16Bits) {
  tessera::testing::ScopedThreads threads(2);
  const int64_t n = 50000;
  const std::vector<tessera::ops::AdamWSpan> spans = {{0, 20000, true}, {20003, 20100, false}, {20200, n, true}};
  const tessera::ops::AdamWArgs args = test_args();
  for (const AdamWPath path : {AdamWPath::scalar, AdamWPath::avx2, AdamWPath::avx512}) {
    if (!tessera::kernels::cpu::adamw_path_supported(path)) continue;  // the scalar path always runs
    SCOPED_TRACE(tessera::kernels::cpu::adamw_path_name(path));
    Tensor p[2], m[2], v[2], g[2];
    for (int k = 0; k < 2; ++k) {
      AdamWBuffers b = random_buffers(n, 6);
      p[k] = b.p, m[k] = b.m, v[k] = b.v, g[k] = b.g;
    }
    Tensor bits = Tensor::empty({n}, tessera::DType::bf16);
    std::fill_n(bits.bits16(), n, uint16_t{0xabcd});
    tessera::kernels::cpu::adamw_spans_on_path(path, p[0].data<float>(), g[0].data<float>(), m[0].data<float>(),
                                               v[0].data<float>(), spans.data(), 3, args, bits.bits16());
    tessera::kernels::cpu::adamw_spans_on_path(path, p[1].data<float>(), g[1].data<float>(), m[1].data<float>(),
                                               v[1].data<float>(), spans.data(), 3, args);
    Tensor want = Tensor::empty({n}, tessera::DType::bf16);
    tessera::ops::cast(want, p[0]);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(p[0].data<float>()[i], p[1].data<float>()[i]) << i;
      ASSERT_EQ(m[0].data<float>()[i], m[1].data<float>()[i]) << i;
      ASSERT_EQ(v[0].data<float>()[i], v[1].data<float>()[i]) << i;
      const bool in_span = i < 20000 || (i >= 20003 && i < 20100) || i >= 20200;
      ASSERT_EQ(bits.bits16()[i], in_span ? want.bits16()[i] : uint16_t{0xabcd}) << i;
    }
  }
  Tensor p = Tensor::zeros({10}), g = Tensor::zeros({10}), m = Tensor::zeros({10}), v = Tensor::zeros({10});
  EXPECT_THROW(tessera::ops::adamw_spans(p, g, m, v, {{0, 10, true}}, args, Tensor::empty({9}, tessera::DType::bf16)),
               tessera::Error);  // one bit pattern short
  EXPECT_THROW(tessera::ops::adamw_spans(p, g, m, v, {{0, 10, true}}, args, Tensor::empty({10}, tessera::DType::f16)),
               tessera::Error);  // not bf16
}

TEST(AdamW, SpansOutsideTheBuffersOrOverlappingAreRefused) {
  Tensor p = Tensor::zeros({10}), g = Tensor::zeros({10}), m = Tensor::zeros({10}), v = Tensor::zeros({10});
  const tessera::ops::AdamWArgs args;
  const std::vector<std::vector<tessera::ops::AdamWSpan>> bad = {
      {{0, 11, true}}, {{-1, 3, true}}, {{5, 4, true}}, {{0, 6, true}, {5, 10, false}}};
  for (const auto& spans : bad) {
    try {
      tessera::ops::adamw_spans(p, g, m, v, spans, args);
      ADD_FAILURE() << "spans accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("spans must lie in the buffers"), std::string::npos) << e.what();
    }
  }
}

// With zero gradients the moments stay zero and only the decoupled weight decay acts.
TEST(AdamW, ZeroGradientOnlyDecays) {
  Tensor param = Tensor::empty({5}), m = Tensor::zeros({5}), v = Tensor::zeros({5}), grad = Tensor::zeros({5});
  for (int i = 0; i < 5; ++i) param.data<float>()[i] = float(i) - 2.0f;
  tessera::ops::AdamWArgs args;
  args.lr = 0.1f;
  args.weight_decay = 0.5f;
  tessera::ops::adamw(param, grad, m, v, args);
  for (int i = 0; i < 5; ++i) {
    EXPECT_FLOAT_EQ(param.data<float>()[i], (float(i) - 2.0f) * 0.95f);
    EXPECT_EQ(m.data<float>()[i], 0.0f);
    EXPECT_EQ(v.data<float>()[i], 0.0f);
  }
}

}  // namespace
