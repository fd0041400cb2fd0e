// make_synth_images: class-coloured gratings with Philox phase and noise, one pure function of
// (seed, split, image index, pixel).
#include "io/synth_images.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/philox.h"

namespace tessera::io {
namespace {

ImageDataset make_split(const SynthImageSpec& spec, const std::string& split, int64_t count) {
  ImageDataset d;
  d.path = "synthetic";
  d.split = split;
  d.height = d.width = spec.size;
  d.channels = 3;
  for (int64_t c = 0; c < spec.classes; ++c) d.class_names.push_back("class" + std::to_string(c));
  d.labels.resize(static_cast<size_t>(count));
  d.images.resize(static_cast<size_t>(count * d.image_bytes()));

  const uint64_t phase_stream = stream_id("synth_images." + split + ".phase");
  const uint64_t noise_stream = stream_id("synth_images." + split + ".noise");
  const double k = 2.0 * M_PI * 2.0 / static_cast<double>(spec.size);  // 2 cycles per image
  for (int64_t i = 0; i < count; ++i) {
    const int64_t c = i % spec.classes;
    d.labels[static_cast<size_t>(i)] = static_cast<int32_t>(c);
    const double hue = 2.0 * M_PI * static_cast<double>(c) / static_cast<double>(spec.classes);
    const double angle = M_PI * static_cast<double>(c) / static_cast<double>(spec.classes);
    const double phase = 2.0 * M_PI * philox_uniform(spec.seed, phase_stream, static_cast<uint64_t>(i));
    uint8_t* img = d.images.data() + i * d.image_bytes();
    for (int64_t y = 0; y < spec.size; ++y)
      for (int64_t x = 0; x < spec.size; ++x) {
        const double wave = std::cos(k * (x * std::cos(angle) + y * std::sin(angle)) + phase);
        for (int64_t ch = 0; ch < 3; ++ch) {
          const int64_t at = (y * spec.size + x) * 3 + ch;
          const double tint = std::cos(hue - 2.0 * M_PI * static_cast<double>(ch) / 3.0);
          const double noise =
              philox_normal(spec.seed, noise_stream, static_cast<uint64_t>(i * d.image_bytes() + at));
          const double v = 128.0 + 50.0 * tint + 45.0 * wave + 20.0 * noise;
          img[at] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
        }
      }
  }
  return d;
}

}  // namespace

ImageSplits make_synth_images(const SynthImageSpec& spec) {
  TESSERA_CHECK(spec.classes >= 2, "synthetic images need at least 2 classes, got ", spec.classes);
  TESSERA_CHECK(spec.train >= 1 && spec.test >= 1, "synthetic images need at least 1 train and 1 test image, got ",
                spec.train, " and ", spec.test);
  TESSERA_CHECK(spec.size >= 1, "synthetic image size must be at least 1, got ", spec.size);
  return {make_split(spec, "train", spec.train), make_split(spec, "test", spec.test)};
}

}  // namespace tessera::io
