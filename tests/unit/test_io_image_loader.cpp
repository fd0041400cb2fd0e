// Unit tests of io::ImageLoader and io::ImagePrefetcher: determinism of crops, flips and order,
// zero padding, mirroring, normalisation, dp slices, epochs, evaluation batches, and the
// background thread (same batches as a synchronous call, errors passed on, clean shutdown).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <thread>

#include "core/error.h"
#include "io/image_loader.h"
#include "io/image_prefetcher.h"

using tessera::io::ChannelStats;
using tessera::io::CropFlip;
using tessera::io::ImageAugment;
using tessera::io::ImageBatch;
using tessera::io::ImageDataset;
using tessera::io::ImageLoader;
using tessera::io::ImagePrefetcher;

namespace {

constexpr int64_t kH = 6, kW = 5, kC = 3, kN = 10;

// kN images of kH x kW x kC (not square, so transposes show) whose pixels are all non-zero and
// distinct within an image; labels i mod 3.
ImageDataset make_images() {
  ImageDataset d;
  d.path = "memory";
  d.split = "train";
  d.height = kH;
  d.width = kW;
  d.channels = kC;
  d.class_names = {"a", "b", "c"};
  for (int64_t i = 0; i < kN; ++i) {
    d.labels.push_back(static_cast<int32_t>(i % 3));
    for (int64_t p = 0; p < kH * kW * kC; ++p) d.images.push_back(static_cast<uint8_t>(1 + (i * 13 + p) % 250));
  }
  return d;
}

std::shared_ptr<const ImageDataset> test_images() { return std::make_shared<const ImageDataset>(make_images()); }

// mean 0, std 1: the loader's values are pixel / 255, so padding reads 0.
ChannelStats identity() { return {{0, 0, 0}, {1, 1, 1}}; }

float pixel(const ImageDataset& d, int64_t i, int64_t y, int64_t x, int64_t c) {
  return d.image(i)[(y * kW + x) * kC + c] / 255.0f;
}

std::vector<float> augmented(const ImageLoader& l, int64_t epoch, int64_t index) {
  std::vector<float> out(static_cast<size_t>(l.image_floats()));
  l.augmented_image(epoch, index, out.data());
  return out;
}

struct Batch {
  std::vector<float> images;
  std::vector<int32_t> labels;
};

Batch train_rows(const ImageLoader& l, int64_t step, int64_t first, int64_t count) {
  Batch b{std::vector<float>(static_cast<size_t>(count * l.image_floats())), std::vector<int32_t>(static_cast<size_t>(count))};
  l.train_batch(step, first, count, b.images.data(), b.labels.data());
  return b;
}

}  // namespace

TEST(ImageLoader, SameSeedEpochIndexGivesTheSameImage) {
  const ImageLoader a(test_images(), 4, 11, identity());
  const ImageLoader b(test_images(), 4, 11, identity());
  for (int64_t e = 0; e < 3; ++e)
    for (int64_t i = 0; i < kN; ++i) {
      EXPECT_EQ(augmented(a, e, i), augmented(b, e, i));
      EXPECT_EQ(augmented(a, e, i), augmented(a, e, i));
    }
  EXPECT_EQ(a.epoch_order(2), b.epoch_order(2));
  EXPECT_EQ(train_rows(a, 5, 0, 4).images, train_rows(b, 5, 0, 4).images);
}

TEST(ImageLoader, EpochsAndSeedsDrawDifferentCropsAndFlips) {
  const ImageLoader l(test_images(), 4, 11, identity());
  const ImageLoader other_seed(test_images(), 4, 12, identity());
  int differ_epoch = 0, differ_seed = 0, flips = 0, draws = 0;
  std::set<int64_t> offsets;
  for (int64_t e = 0; e < 40; ++e)
    for (int64_t i = 0; i < kN; ++i) {
      const CropFlip a = l.crop_flip(e, i), b = l.crop_flip(e + 1, i), c = other_seed.crop_flip(e, i);
      differ_epoch += a.dy != b.dy || a.dx != b.dx || a.flip != b.flip;
      differ_seed += a.dy != c.dy || a.dx != c.dx || a.flip != c.flip;
      EXPECT_TRUE(a.dy >= 0 && a.dy <= 8 && a.dx >= 0 && a.dx <= 8);
      offsets.insert(a.dy);
      offsets.insert(a.dx);
      flips += a.flip;
      ++draws;
    }
  EXPECT_GT(differ_epoch, draws * 8 / 10);
  EXPECT_GT(differ_seed, draws * 8 / 10);
  EXPECT_EQ(offsets.size(), 9u) << "every offset in [0, 2 * pad] occurs";
  EXPECT_GT(flips, draws * 4 / 10);  // p = 1/2
  EXPECT_LT(flips, draws * 6 / 10);
  EXPECT_NE(l.epoch_order(0), l.epoch_order(1));
  EXPECT_NE(l.epoch_order(0), other_seed.epoch_order(0));
}

TEST(ImageLoader, CropShiftsTheImageAndPadsWithZeros) {
  const auto data = test_images();
  const ImageDataset& d = *data;
  const ImageLoader l(data, 4, 3, identity(), ImageAugment{4, false});
  int padded_seen = 0;
  for (int64_t e = 0; e < 20; ++e)
    for (int64_t i = 0; i < kN; ++i) {
      const CropFlip cf = l.crop_flip(e, i);
      EXPECT_FALSE(cf.flip);
      const std::vector<float> out = augmented(l, e, i);
      for (int64_t y = 0; y < kH; ++y)
        for (int64_t x = 0; x < kW; ++x)
          for (int64_t c = 0; c < kC; ++c) {
            const int64_t sy = y + cf.dy - 4, sx = x + cf.dx - 4;
            const bool inside = sy >= 0 && sy < kH && sx >= 0 && sx < kW;
            const float v = out[(y * kW + x) * kC + c];
            if (inside) {
              EXPECT_FLOAT_EQ(v, pixel(d, i, sy, sx, c));
            } else {
              EXPECT_EQ(v, 0.0f) << "padding at (" << y << ", " << x << ") of image " << i;
              ++padded_seen;
            }
          }
    }
  EXPECT_GT(padded_seen, 0);
}

TEST(ImageLoader, FlipMirrorsTheImage) {
  const auto data = test_images();
  const ImageLoader l(data, 4, 5, identity(), ImageAugment{0, true});
  std::vector<float> plain(static_cast<size_t>(l.image_floats()));
  int flipped = 0, kept = 0;
  for (int64_t e = 0; e < 10; ++e)
    for (int64_t i = 0; i < kN; ++i) {
      const CropFlip cf = l.crop_flip(e, i);
      EXPECT_EQ(cf.dy, 0);
      EXPECT_EQ(cf.dx, 0);
      l.plain_image(i, plain.data());
      const std::vector<float> out = augmented(l, e, i);
      for (int64_t y = 0; y < kH; ++y)
        for (int64_t x = 0; x < kW; ++x)
          for (int64_t c = 0; c < kC; ++c)
            EXPECT_EQ(out[(y * kW + x) * kC + c], plain[(y * kW + (cf.flip ? kW - 1 - x : x)) * kC + c]);
      (cf.flip ? flipped : kept) += 1;
    }
  EXPECT_GT(flipped, 0);
  EXPECT_GT(kept, 0);
}

TEST(ImageLoader, NormalisesPerChannel) {
  const auto data = test_images();
  const ImageDataset& d = *data;
  const ChannelStats norm{{0.5f, 0.25f, 0.0f}, {0.25f, 0.5f, 2.0f}};
  const ImageLoader l(data, 4, 5, norm);
  std::vector<float> out(static_cast<size_t>(l.image_floats()));
  l.plain_image(7, out.data());
  for (int64_t y = 0; y < kH; ++y)
    for (int64_t x = 0; x < kW; ++x)
      for (int64_t c = 0; c < kC; ++c)
        EXPECT_NEAR(out[(y * kW + x) * kC + c], (pixel(d, 7, y, x, c) - norm.mean[c]) / norm.std[c], 1e-6);
  // A padding pixel is 0 before normalisation: -mean / std after it.
  const ImageLoader crop(data, 4, 5, norm, ImageAugment{4, false});
  for (int64_t e = 0;; ++e) {
    const CropFlip cf = crop.crop_flip(e, 0);
    if (cf.dy != 0 || cf.dx != 0) continue;  // (0, 0): the top-left corner is padding
    const std::vector<float> a = augmented(crop, e, 0);
    for (int64_t c = 0; c < kC; ++c) EXPECT_NEAR(a[c], -norm.mean[c] / norm.std[c], 1e-6);
    break;
  }
}

TEST(ImageLoader, TrainBatchRowsAreTheGlobalBatchAugmented) {
  const auto data = test_images();
  const ImageDataset& d = *data;
  const ImageLoader l(data, 4, 9, identity());
  for (int64_t step = 0; step < 6; ++step) {
    const std::vector<int64_t> global = l.global_batch(step);
    ASSERT_EQ(global.size(), 4u);
    const Batch b = train_rows(l, step, 0, 4);
    for (int64_t r = 0; r < 4; ++r) {
      const int64_t sample = step * 4 + r;
      EXPECT_EQ(global[r], l.epoch_order(sample / kN)[sample % kN]);
      EXPECT_EQ(b.labels[r], d.labels[global[r]]);
      const std::vector<float> want = augmented(l, sample / kN, global[r]);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), b.images.begin() + r * l.image_floats()));
    }
  }
  EXPECT_EQ(l.epoch_of(2), 0);  // samples 8..11: starts in epoch 0, straddles into 1
  EXPECT_EQ(l.epoch_of(3), 1);
}

TEST(ImageLoader, DataParallelSlicesConcatenateToTheGlobalBatch) {
  const ImageLoader l(test_images(), 8, 21, identity());
  for (int64_t step : {0, 1, 2, 7}) {  // step 1 straddles epochs 0 and 1 (N = 10, B = 8)
    const Batch whole = train_rows(l, step, 0, 8);
    for (int64_t dp : {2, 4, 8}) {
      Batch joined;
      for (int64_t rank = 0; rank < dp; ++rank) {
        const Batch part = train_rows(l, step, rank * 8 / dp, 8 / dp);
        joined.images.insert(joined.images.end(), part.images.begin(), part.images.end());
        joined.labels.insert(joined.labels.end(), part.labels.begin(), part.labels.end());
      }
      EXPECT_EQ(joined.images, whole.images) << "step " << step << ", dp " << dp;
      EXPECT_EQ(joined.labels, whole.labels) << "step " << step << ", dp " << dp;
    }
  }
}

TEST(ImageLoader, EveryImageOnceAnEpoch) {
  const ImageLoader l(test_images(), 3, 4, identity());  // 3 does not divide 10: batches straddle
  std::vector<std::vector<int64_t>> seen(5);  // 14 steps: epochs 0..3 whole, 4 begun
  for (int64_t step = 0; step < 14; ++step) {
    const std::vector<int64_t> g = l.global_batch(step);
    for (int64_t r = 0; r < 3; ++r) seen[(step * 3 + r) / kN].push_back(g[r]);
  }
  for (int64_t e = 0; e < 4; ++e) {
    std::vector<int64_t> sorted = seen[e];
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(kN);
    for (int64_t i = 0; i < kN; ++i) all[i] = i;
    EXPECT_EQ(sorted, all) << "epoch " << e;
  }
}

TEST(ImageLoader, EvalBatchesInOrderWithoutAugmentation) {
  const auto data = test_images();
  const ImageDataset& d = *data;
  const ImageLoader l(data, 4, 1, identity());
  ASSERT_EQ(l.eval_batches(), 3);  // 10 images: 4 + 4 + 2 and 2 padding rows
  std::vector<float> plain(static_cast<size_t>(l.image_floats()));
  for (int64_t b = 0; b < 3; ++b) {
    Batch out{std::vector<float>(4 * l.image_floats()), std::vector<int32_t>(4)};
    l.eval_batch(b, 0, 4, out.images.data(), out.labels.data());
    for (int64_t r = 0; r < 4; ++r) {
      const int64_t i = b * 4 + r;
      const auto row = out.images.begin() + r * l.image_floats();
      if (i < kN) {
        l.plain_image(i, plain.data());
        EXPECT_TRUE(std::equal(plain.begin(), plain.end(), row));
        EXPECT_EQ(out.labels[r], d.labels[i]);
        EXPECT_FLOAT_EQ(*row, pixel(d, i, 0, 0, 0));
      } else {
        EXPECT_TRUE(std::all_of(row, row + l.image_floats(), [](float v) { return v == 0.0f; }));
        EXPECT_EQ(out.labels[r], -1);
      }
    }
  }
  std::vector<float> img(static_cast<size_t>(l.image_floats()));
  int32_t label;
  EXPECT_THROW(l.eval_batch(3, 0, 1, img.data(), &label), tessera::Error);
}

TEST(ImageLoader, RefusesBadArguments) {
  EXPECT_THROW(ImageLoader(test_images(), 0, 1, identity()), tessera::Error);
  EXPECT_THROW(ImageLoader(test_images(), 4, 1, ChannelStats{{0}, {1}}), tessera::Error);
  EXPECT_THROW(ImageLoader(test_images(), 4, 1, ChannelStats{{0, 0, 0}, {1, 0, 1}}), tessera::Error);
  EXPECT_THROW(ImageLoader(test_images(), 4, 1, identity(), ImageAugment{-1, true}), tessera::Error);
  ImageDataset bad = make_images();
  bad.labels[3] = 3;
  EXPECT_THROW(ImageLoader(std::make_shared<const ImageDataset>(bad), 4, 1, identity()), tessera::Error);
  EXPECT_THROW(ImageLoader(nullptr, 4, 1, identity()), tessera::Error);
  const ImageLoader l(test_images(), 4, 1, identity());
  std::vector<float> img(static_cast<size_t>(3 * l.image_floats()));
  int32_t labels[3];
  try {
    l.train_batch(0, 2, 3, img.data(), labels);
    ADD_FAILURE() << "rows outside the batch were accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rows [2, 5) are outside the global batch of 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(l.train_batch(-1, 0, 1, img.data(), labels), tessera::Error);
}

TEST(ImagePrefetcher, GivesTheSameBatchesAsASynchronousCall) {
  const ImageLoader l(test_images(), 8, 17, identity());
  for (int depth : {1, 2, 3}) {
    ImagePrefetcher p(l, 3, 2, 4, depth);  // rows [2, 6) from step 3 on
    for (int64_t step = 3; step < 15; ++step) {
      const ImageBatch& b = p.next();
      EXPECT_EQ(b.step, step);
      const Batch want = train_rows(l, step, 2, 4);
      EXPECT_EQ(b.images, want.images) << "step " << step << ", depth " << depth;
      EXPECT_EQ(b.labels, want.labels);
    }
  }
}

TEST(ImagePrefetcher, PassesErrorsToTheConsumer) {
  auto fill = [](int64_t step, float* images, int32_t* labels) {
    if (step == 4) tessera::fail("no batch for step ", step);
    images[0] = static_cast<float>(step);
    labels[0] = static_cast<int32_t>(step);
  };
  ImagePrefetcher p(fill, 1, 1, 1);
  for (int64_t step = 1; step < 4; ++step) EXPECT_EQ(p.next().labels[0], step);  // made before the error
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      p.next();
      ADD_FAILURE() << "the producer's error was lost";
    } catch (const tessera::Error& e) {
      EXPECT_STREQ(e.what(), "no batch for step 4");
    }
  }
}

TEST(ImagePrefetcher, StopsCleanlyAtAnyPoint) {
  std::atomic<int64_t> made{0};
  auto fill = [&made](int64_t, float*, int32_t*) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ++made;
  };
  { ImagePrefetcher idle(fill, 0, 1, 1); }  // destroyed before any batch was asked for
  made = 0;
  {
    ImagePrefetcher p(fill, 0, 1, 1, 2);
    p.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_LE(made.load(), 3) << "the queue is bounded: the batch held and depth 2 ahead";
  }
  EXPECT_THROW(ImagePrefetcher(fill, 0, 1, 1, 0), tessera::Error);
  const ImageLoader l(test_images(), 4, 1, identity());
  EXPECT_THROW(ImagePrefetcher(l, 0, 3, 2), tessera::Error);  // rows [3, 5) of a batch of 4
}
