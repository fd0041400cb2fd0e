// Synthetic image classes: a small, learnable image data set made from Philox alone, so tests and
// the quickstart can train an image model without CIFAR-10.
#pragma once
#include <cstdint>

#include "io/image_dataset.h"

namespace tessera::io {

struct SynthImageSpec {
  int64_t classes = 10;   // K >= 2
  int64_t train = 1000;   // train images (>= 1)
  int64_t test = 200;     // test images (>= 1)
  int64_t size = 32;      // S: images are S x S x 3
  uint64_t seed = 0;
};

// Image i of a split has label i mod K. Class c is an RGB tint at hue 2 pi c / K plus a grating
// (2 cycles per image) at angle pi c / K, with a per-image phase and per-pixel normal noise
// (std 20 grey levels) drawn from Philox at (seed, split's stream, index): colour alone separates
// the classes, so a small model learns them; the noise keeps it from being trivial.
ImageSplits make_synth_images(const SynthImageSpec& spec);

}  // namespace tessera::io
