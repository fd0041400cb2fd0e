// Unit tests of a vision transformer's token kernels on the CPU (ops::image_to_patches,
// image_tokens_forward/backward, token_pool_forward/backward): against naive loops, with and
// without a class token, on 1 and 3 threads; the backwards against central finite differences
// (gradcheck.h) and their overwrite / accumulate semantics; shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "gradcheck.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

using tessera::Shape;
using tessera::Tensor;
using tessera::ops::TokenPool;
namespace gc = tessera::testing;
using Threads = tessera::testing::ScopedThreads;

namespace {

Tensor random(Shape shape, uint64_t stream) { return gc::random_tensor(std::move(shape), 17, stream); }

struct ImageCase {
  int64_t batch, height, width, channels, patch;
};

class Patches : public ::testing::TestWithParam<ImageCase> {};

// Every patch element against the definition, written as the loops over the image read it.
TEST_P(Patches, MatchNaiveLoop) {
  const ImageCase c = GetParam();
  const int64_t p = c.patch, down = c.height / p, across = c.width / p, width = p * p * c.channels;
  const Tensor images = random({c.batch, c.height, c.width, c.channels}, 1);
  std::vector<float> want(c.batch * down * across * width);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t y = 0; y < c.height; ++y)
      for (int64_t x = 0; x < c.width; ++x)
        for (int64_t ch = 0; ch < c.channels; ++ch) {
          const int64_t patch = (y / p) * across + x / p, inside = ((y % p) * p + x % p) * c.channels + ch;
          want[(b * down * across + patch) * width + inside] =
              images.data<float>()[((b * c.height + y) * c.width + x) * c.channels + ch];
        }
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor patches = Tensor::empty({c.batch, down * across, width});
    tessera::ops::image_to_patches(patches, images, p);
    ASSERT_EQ(std::vector<float>(patches.data<float>(), patches.data<float>() + patches.numel()), want)
        << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Images, Patches,
                         ::testing::Values(ImageCase{2, 8, 8, 3, 4},     // the tiny ViT
                                           ImageCase{3, 6, 9, 2, 3},     // not square
                                           ImageCase{1, 5, 5, 1, 1},     // 1 x 1 patches
                                           ImageCase{2, 4, 4, 3, 4},     // one patch per image
                                           ImageCase{16, 32, 32, 3, 4}), // threaded (CIFAR-10 shape)
                         [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(PatchesOps, RejectBadShapes) {
  const Tensor images = Tensor::zeros({2, 8, 8, 3});
  Tensor patches = Tensor::empty({2, 4, 48});
  EXPECT_NO_THROW(tessera::ops::image_to_patches(patches, images, 4));
  EXPECT_THROW(tessera::ops::image_to_patches(patches, images, 3), tessera::Error) << "3 does not divide 8";
  Tensor wrong = Tensor::empty({2, 4, 47});
  EXPECT_THROW(tessera::ops::image_to_patches(wrong, images, 4), tessera::Error);
  const Tensor flat = Tensor::zeros({2, 8 * 8 * 3});
  EXPECT_THROW(tessera::ops::image_to_patches(patches, flat, 4), tessera::Error) << "images must be [B, H, W, C]";
}

// ---- token sequence -------------------------------------------------------------------------------

struct TokenCase {
  int64_t batch, patches, channels;
  bool cls;
};

class ImageTokens : public ::testing::TestWithParam<TokenCase> {};

TEST_P(ImageTokens, ForwardMatchesNaiveLoop) {
  const TokenCase c = GetParam();
  const int64_t first = c.cls ? 1 : 0, tokens = c.patches + first;
  const Tensor proj = random({c.batch, c.patches, c.channels}, 2), pos = random({tokens, c.channels}, 3);
  const Tensor cls = c.cls ? random({c.channels}, 4) : Tensor();
  for (int threads : {1, 3}) {
    Threads scope(threads);
    Tensor out = Tensor::empty({c.batch, tokens, c.channels});
    tessera::ops::image_tokens_forward(out, proj, cls, pos);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t ch = 0; ch < c.channels; ++ch) {
          const float x = t < first ? cls.data<float>()[ch]
                                    : proj.data<float>()[(b * c.patches + t - first) * c.channels + ch];
          ASSERT_EQ(out.data<float>()[(b * tokens + t) * c.channels + ch], x + pos.data<float>()[t * c.channels + ch])
              << "b " << b << " t " << t << " c " << ch;
        }
  }
}

// L = sum(out * R): dproj, dcls and dpos against central differences; dproj overwritten, dcls and
// dpos accumulated onto what they held.
TEST_P(ImageTokens, BackwardMatchesFiniteDifferences) {
  const TokenCase c = GetParam();
  const int64_t tokens = c.patches + (c.cls ? 1 : 0);
  Tensor proj = random({c.batch, c.patches, c.channels}, 2), pos = random({tokens, c.channels}, 3);
  Tensor cls = c.cls ? random({c.channels}, 4) : Tensor();
  Tensor out = Tensor::empty({c.batch, tokens, c.channels});
  const Tensor r = random({c.batch, tokens, c.channels}, 5);
  auto f = [&] {
    tessera::ops::image_tokens_forward(out, proj, cls, pos);
    return gc::dot(out, r);
  };
  for (int threads : {1, 3}) {
    Threads scope(threads);
    const Tensor dpos0 = random({tokens, c.channels}, 6), dcls0 = random({c.channels}, 7);
    Tensor dproj = Tensor::empty(proj.shape()), dpos = dpos0.clone();
    Tensor dcls = c.cls ? dcls0.clone() : Tensor();
    tessera::ops::image_tokens_backward(dproj, dcls, dpos, r);
    for (int64_t i = 0; i < dpos.numel(); ++i) dpos.data<float>()[i] -= dpos0.data<float>()[i];
    for (int64_t i = 0; c.cls && i < dcls.numel(); ++i) dcls.data<float>()[i] -= dcls0.data<float>()[i];
    auto check = [&](const char* what, Tensor& x, const Tensor& analytic) {
      const auto idx = gc::sample_indices(x.numel(), 400);
      const gc::Comparison cmp =
          gc::compare(gc::gather(analytic, idx), gc::numeric_grad(x.data<float>(), idx, 0.25f, f));
      EXPECT_LT(cmp.rel_err, 1e-5) << what << ", " << threads << " threads";
    };
    check("dproj", proj, dproj);
    check("dpos", pos, dpos);
    if (c.cls) check("dcls", cls, dcls);
  }
}

INSTANTIATE_TEST_SUITE_P(Sequences, ImageTokens,
                         ::testing::Values(TokenCase{2, 4, 16, true}, TokenCase{2, 4, 16, false},
                                           TokenCase{3, 9, 5, true}, TokenCase{1, 1, 1, true},
                                           TokenCase{64, 64, 32, true}),  // threaded
                         [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(ImageTokensOps, RejectBadShapes) {
  const Tensor proj = Tensor::zeros({2, 4, 8}), cls = Tensor::zeros({8});
  Tensor out = Tensor::empty({2, 5, 8});
  EXPECT_NO_THROW(tessera::ops::image_tokens_forward(out, proj, cls, Tensor::zeros({5, 8})));
  EXPECT_THROW(tessera::ops::image_tokens_forward(out, proj, Tensor(), Tensor::zeros({5, 8})), tessera::Error)
      << "without a class token T = P";
  EXPECT_THROW(tessera::ops::image_tokens_forward(out, proj, cls, Tensor::zeros({4, 8})), tessera::Error);
  EXPECT_THROW(tessera::ops::image_tokens_forward(out, Tensor::zeros({8, 8}), cls, Tensor::zeros({5, 8})),
               tessera::Error)
      << "proj must be [B, P, C]";
}

// ---- pooling -----------------------------------------------------------------------------------------

struct PoolCase {
  int64_t batch, tokens, channels;
  TokenPool pool;
};

class Pool : public ::testing::TestWithParam<PoolCase> {};

TEST_P(Pool, ForwardMatchesNaiveLoopAndBackwardFiniteDifferences) {
  const PoolCase c = GetParam();
  const bool mean = c.pool == TokenPool::mean;
  Tensor x = random({c.batch, c.tokens, c.channels}, 8);
  Tensor pooled = Tensor::empty({c.batch, c.channels});
  const Tensor r = random({c.batch, c.channels}, 9);
  auto f = [&] {
    tessera::ops::token_pool_forward(pooled, x, c.pool);
    return gc::dot(pooled, r);
  };
  for (int threads : {1, 3}) {
    Threads scope(threads);
    f();
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t ch = 0; ch < c.channels; ++ch) {
        double want = x.data<float>()[b * c.tokens * c.channels + ch];
        if (mean) {
          want = 0;
          for (int64_t t = 0; t < c.tokens; ++t) want += x.data<float>()[(b * c.tokens + t) * c.channels + ch];
          want /= static_cast<double>(c.tokens);
        }
        ASSERT_NEAR(pooled.data<float>()[b * c.channels + ch], want, 1e-6 * c.tokens) << "b " << b << " c " << ch;
      }
    Tensor dx = random(x.shape(), 10);  // overwritten
    tessera::ops::token_pool_backward(dx, r, c.pool);
    for (int64_t i = 0; i < dx.numel(); ++i) {
      const int64_t ch = i % c.channels, t = (i / c.channels) % c.tokens, b = i / (c.channels * c.tokens);
      const float g = r.data<float>()[b * c.channels + ch];
      const float want = mean ? g / static_cast<float>(c.tokens) : (t == 0 ? g : 0.0f);
      ASSERT_EQ(dx.data<float>()[i], want) << "element " << i;
    }
    const auto idx = gc::sample_indices(x.numel(), 300);
    const gc::Comparison cmp = gc::compare(gc::gather(dx, idx), gc::numeric_grad(x.data<float>(), idx, 0.25f, f));
    EXPECT_LT(cmp.rel_err, 1e-5) << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Pools, Pool,
                         ::testing::Values(PoolCase{2, 5, 16, TokenPool::first}, PoolCase{2, 4, 16, TokenPool::mean},
                                           PoolCase{3, 1, 7, TokenPool::mean}, PoolCase{64, 65, 32, TokenPool::mean},
                                           PoolCase{64, 65, 32, TokenPool::first}),
                         [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(PoolOps, RejectBadShapes) {
  Tensor pooled = Tensor::empty({2, 8});
  EXPECT_THROW(tessera::ops::token_pool_forward(pooled, Tensor::zeros({2, 8}), TokenPool::mean), tessera::Error);
  EXPECT_THROW(tessera::ops::token_pool_forward(pooled, Tensor::zeros({3, 4, 8}), TokenPool::mean), tessera::Error);
  Tensor dx = Tensor::empty({2, 0, 8});
  EXPECT_THROW(tessera::ops::token_pool_backward(dx, pooled, TokenPool::first), tessera::Error) << "no tokens";
}

}  // namespace
