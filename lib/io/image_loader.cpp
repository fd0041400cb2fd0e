// ImageLoader: Philox epoch permutations, per-image crop/flip draws, normalisation, and the train
// and evaluation batches built from them.
#include "io/image_loader.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"

namespace tessera::io {
namespace {

// A uniform integer in [0, n) from 64 Philox bits (multiply-shift; bias below 2^-32 here).
int64_t uniform_below(const PhiloxCounter& w, uint64_t n) {
  const uint64_t bits = (static_cast<uint64_t>(w[1]) << 32) | w[0];
  return static_cast<int64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

}  // namespace

ImageLoader::ImageLoader(std::shared_ptr<const ImageDataset> data, int64_t global_batch, uint64_t seed,
                         ChannelStats norm, ImageAugment augment)
    : data_(std::move(data)), batch_(global_batch), seed_(seed),
      shuffle_stream_(stream_id("image_loader.shuffle")), augment_stream_(stream_id("image_loader.augment")),
      augment_(augment) {
  TESSERA_CHECK(data_ != nullptr, "image loader: no data set");
  data_->check();
  TESSERA_CHECK(global_batch >= 1, "image loader: global batch must be at least 1, got ", global_batch);
  TESSERA_CHECK(augment.pad >= 0, "image loader: crop padding must not be negative, got ", augment.pad);
  const auto channels = static_cast<size_t>(data_->channels);
  TESSERA_CHECK(norm.mean.size() == channels && norm.std.size() == channels, "image loader: ", data_->path,
                " has ", channels, " channels but the normalisation has ", norm.mean.size(), " means and ",
                norm.std.size(), " standard deviations");
  for (size_t c = 0; c < channels; ++c) {
    TESSERA_CHECK(norm.std[c] > 0, "image loader: the standard deviation of channel ", c,
                  " must be positive, got ", norm.std[c]);
    scale_.push_back(1.0f / (255.0f * norm.std[c]));
    shift_.push_back(-norm.mean[c] / norm.std[c]);
  }
}

std::vector<int64_t> ImageLoader::epoch_order(int64_t epoch) const {
  TESSERA_CHECK(epoch >= 0, "image loader: negative epoch ", epoch);
  const int64_t n = size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    const PhiloxCounter w = philox_bits(seed_, shuffle_stream_, static_cast<uint64_t>(epoch * n + i));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(uniform_below(w, static_cast<uint64_t>(i + 1)))]);
  }
  return order;
}

std::shared_ptr<const std::vector<int64_t>> ImageLoader::order(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  for (const auto& [e, o] : cache_)
    if (e == epoch) return o;
  auto o = std::make_shared<const std::vector<int64_t>>(epoch_order(epoch));
  if (cache_.size() == 2) cache_.erase(cache_.begin());
  cache_.emplace_back(epoch, o);
  return o;
}

std::vector<int64_t> ImageLoader::global_batch(int64_t step) const {
  TESSERA_CHECK(step >= 0, "image loader: negative step ", step);
  std::vector<int64_t> indices;
  for (int64_t r = 0; r < batch_; ++r) {
    const int64_t sample = step * batch_ + r;
    indices.push_back((*order(sample / size()))[static_cast<size_t>(sample % size())]);
  }
  return indices;
}

CropFlip ImageLoader::crop_flip(int64_t epoch, int64_t index) const {
  TESSERA_CHECK(epoch >= 0 && index >= 0 && index < size(), "image loader: no image ", index, " in epoch ",
                epoch, " (", size(), " images)");
  const PhiloxCounter w = philox_bits(seed_, augment_stream_, static_cast<uint64_t>(epoch * size() + index));
  const auto span = static_cast<uint32_t>(2 * augment_.pad + 1);
  return {static_cast<int64_t>(w[0] % span), static_cast<int64_t>(w[1] % span), augment_.flip && (w[2] & 1u)};
}

void ImageLoader::write_image(int64_t index, const CropFlip& cf, int64_t pad, float* out) const {
  const int64_t h = data_->height, w = data_->width, c = data_->channels;
  const uint8_t* img = data_->image(index);
  for (int64_t y = 0; y < h; ++y) {
    const int64_t sy = y + cf.dy - pad;
    for (int64_t x = 0; x < w; ++x) {
      const int64_t sx = (cf.flip ? w - 1 - x : x) + cf.dx - pad;
      const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
      const uint8_t* px = inside ? img + (sy * w + sx) * c : nullptr;
      float* o = out + (y * w + x) * c;
      for (int64_t k = 0; k < c; ++k) o[k] = static_cast<float>(inside ? px[k] : 0) * scale_[k] + shift_[k];
    }
  }
}

void ImageLoader::augmented_image(int64_t epoch, int64_t index, float* out) const {
  write_image(index, crop_flip(epoch, index), augment_.pad, out);
}

void ImageLoader::plain_image(int64_t index, float* out) const {
  TESSERA_CHECK(index >= 0 && index < size(), "image loader: no image ", index, " (", size(), " images)");
  write_image(index, CropFlip{}, 0, out);
}

void ImageLoader::check_rows(int64_t first_row, int64_t count) const {
  TESSERA_CHECK(first_row >= 0 && count >= 0 && first_row + count <= batch_, "image loader: rows [", first_row,
                ", ", first_row + count, ") are outside the global batch of ", batch_);
}

void ImageLoader::train_batch(int64_t step, int64_t first_row, int64_t count, float* images,
                              int32_t* labels) const {
  TESSERA_CHECK(step >= 0, "image loader: negative step ", step);
  check_rows(first_row, count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t sample = step * batch_ + first_row + i;
    const int64_t epoch = sample / size();
    const int64_t index = (*order(epoch))[static_cast<size_t>(sample % size())];
    augmented_image(epoch, index, images + i * image_floats());
    labels[i] = data_->labels[static_cast<size_t>(index)];
  }
}

void ImageLoader::eval_batch(int64_t batch, int64_t first_row, int64_t count, float* images,
                             int32_t* labels) const {
  TESSERA_CHECK(batch >= 0 && batch < eval_batches(), "image loader: no evaluation batch ", batch, " (",
                eval_batches(), " batches)");
  check_rows(first_row, count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = batch * batch_ + first_row + i;
    float* out = images + i * image_floats();
    if (index < size()) {
      plain_image(index, out);
      labels[i] = data_->labels[static_cast<size_t>(index)];
    } else {
      std::fill(out, out + image_floats(), 0.0f);
      labels[i] = -1;
    }
  }
}

}  // namespace tessera::io
