// Gradient checks of the Llama layers' ops (RMSNorm, the rotary qkv packing, SwiGLU): each op's
// backward against central finite differences of its own fp32 forward under a random linear
// objective L = sum(out * R), with a norm-relative tolerance per input (gradcheck.h). The nn
// layers built on them have their checks in test_nn_gradcheck.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/tensor.h"
#include "gradcheck.h"
#include "kernels/ops.h"

using tessera::Tensor;
using tessera::ops::RopeShape;
namespace gc = tessera::testing;

namespace {

// Derivatives by the five-point central stencil with step h (gradcheck.h). Measured worst
// norm-relative errors over the base, AVX2 and AVX-512 copies: RMSNorm 1.3e-5 (input), SwiGLU 2.4e-6,
// rope_pack (linear: rounding only) 1.1e-6; a
// gradient 1% off gives ~1e-2.
constexpr float kStep = 1.0f / 32;
constexpr double kTol = 5e-5;

template <typename F>
void check(const std::string& what, Tensor& x, const Tensor& analytic, F&& f) {
  const gc::Comparison c = gc::compare_gradient(what, x, analytic, kStep, f, 1 << 20);
  EXPECT_LT(c.rel_err, kTol) << what << " (checked " << c.count << " elements)";
  EXPECT_GT(c.num_norm, 1e-6) << what << ": the objective barely depends on it; the check proves nothing";
}

TEST(LlamaOpsGradcheck, RmsNormInputAndWeight) {
  const int64_t rows = 6, cols = 40;
  Tensor x = gc::normal({rows, cols}, "rmsnorm.x", 1.0f, 0.3f), w = gc::normal({cols}, "rmsnorm.w", 0.3f, 1.0f);
  const Tensor r = gc::normal({rows, cols}, "rmsnorm.r", 1.0f);
  Tensor out = Tensor::empty({rows, cols}), rstd = Tensor::empty({rows});
  auto loss = [&] {
    tessera::ops::rmsnorm_forward(out, rstd, x, w, 1e-5f);
    return gc::dot(out, r);
  };
  loss();
  Tensor dx = Tensor::zeros({rows, cols}), dw = Tensor::zeros({cols});
  tessera::ops::rmsnorm_backward(dx, dw, r, x, w, rstd);
  check("rmsnorm input", x, dx, loss);
  check("rmsnorm weight", w, dw, loss);
}

TEST(LlamaOpsGradcheck, SwiGluGateAndUp) {
  const int64_t n = 300;
  Tensor gate = gc::normal({n}, "swiglu.gate", 2.0f), up = gc::normal({n}, "swiglu.up", 1.0f);
  const Tensor r = gc::normal({n}, "swiglu.r", 1.0f);
  Tensor out = Tensor::empty({n});
  auto loss = [&] {
    tessera::ops::swiglu_forward(out, gate, up);
    return gc::dot(out, r);
  };
  Tensor dgate = Tensor::empty({n}), dup = Tensor::empty({n});
  tessera::ops::swiglu_backward(dgate, dup, r, gate, up);
  check("swiglu gate", gate, dgate, loss);
  check("swiglu up", up, dup, loss);
}

// q, k and v through L = sum(qkv * R): grouped-query heads of a tensor-parallel rank (global H 8,
// K 4: rank 1 of 2 given all four kv heads, two of which no local query head reads) at positions
// 5..8 of a sequence, and multi-query heads at theta 500000.
TEST(LlamaOpsGradcheck, RopePackQueryKeyValue) {
  RopeShape tp_rank;
  tp_rank.batch = 2;
  tp_rank.seq = 4;
  tp_rank.heads = 4;
  tp_rank.kv_heads = 4;
  tp_rank.head_dim = 8;
  tp_rank.group = 2;
  tp_rank.first_head = 4;
  tp_rank.first_position = 5;
  RopeShape mqa;
  mqa.batch = 1;
  mqa.seq = 6;
  mqa.heads = 3;
  mqa.kv_heads = 1;
  mqa.head_dim = 16;
  mqa.group = 3;
  mqa.theta = 500000.0f;
  for (const auto& layout : {std::pair{"tp rank", tp_rank}, std::pair{"mqa", mqa}}) {
    const std::string name = layout.first;
    const RopeShape s = layout.second;
    SCOPED_TRACE(name);
    const int64_t rows = s.batch * s.seq, D = s.head_dim;
    Tensor q = gc::normal({rows, s.heads * D}, "rope.q", 1.0f), k = gc::normal({rows, s.kv_heads * D}, "rope.k", 1.0f);
    Tensor v = gc::normal({rows, s.kv_heads * D}, "rope.v", 1.0f);
    const Tensor r = gc::normal({rows, 3 * s.heads * D}, "rope.r", 1.0f);
    Tensor qkv = Tensor::empty(r.shape());
    auto loss = [&] {
      tessera::ops::rope_pack_forward(qkv, q, k, v, s);
      return gc::dot(qkv, r);
    };
    Tensor dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape()), dv = Tensor::empty(v.shape());
    tessera::ops::rope_pack_backward(dq, dk, dv, r, s);
    check(name + " rope q", q, dq, loss);
    check(name + " rope k", k, dk, loss);
    check(name + " rope v", v, dv, loss);
  }
}

}  // namespace
