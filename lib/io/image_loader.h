// ImageLoader: cuts the global batch of a step from an image data set and augments it (random crop
// from a zero-padded image, horizontal flip, per-channel normalisation) as a pure function of
// (seed, epoch, image index), so any split of the rows over ranks sees the serial run's images.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "io/image_dataset.h"

namespace tessera::io {

// Training augmentation: a crop at a random offset from the image zero-padded by `pad` pixels on
// every side, then a horizontal flip with probability 1/2 when `flip`. {0, false} turns both off.
struct ImageAugment {
  int64_t pad = 4;
  bool flip = true;
};

// One image's draw: the crop's top-left corner in the padded image (each in [0, 2 pad]) and the flip.
struct CropFlip {
  int64_t dy = 0, dx = 0;
  bool flip = false;
};

// Images come out as float [H, W, C] (channels last, the layout ViT patches are cut from), a batch
// as [B, H, W, C], each value (pixel / 255 - mean[c]) / std[c]. Padding pixels are 0 before that.
//
// Order: epoch e visits the data set in a Fisher-Yates permutation drawn from Philox
// (seed, "image_loader.shuffle", e * N + i). Training sample s = step * B + r (B the global batch,
// r its row) is position s mod N of epoch s / N: epochs are counted in samples, a batch may straddle
// two, and every image appears exactly once per epoch. The crop and flip of image i in epoch e come
// from Philox (seed, "image_loader.augment", e * N + i): the same whatever the layout or batch.
class ImageLoader {
 public:
  // Shares the data set (loaders of one set, or a trainer and its loader, hold one copy). norm:
  // mean and std per channel of pixels in [0, 1], e.g. channel_stats of the train set. Throws on
  // an invalid data set, batch, norm or padding.
  ImageLoader(std::shared_ptr<const ImageDataset> data, int64_t global_batch, uint64_t seed,
              ChannelStats norm, ImageAugment augment = {});

  // The data set indices of epoch e in visiting order (a permutation of [0, N)).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // The data set indices of the global batch of `step` (0-based), row by row.
  std::vector<int64_t> global_batch(int64_t step) const;
  // The epoch of a step's first sample.
  int64_t epoch_of(int64_t step) const { return step * batch_ / size(); }

  CropFlip crop_flip(int64_t epoch, int64_t index) const;
  // Image `index` augmented as in `epoch` and normalised, into out[H * W * C].
  void augmented_image(int64_t epoch, int64_t index, float* out) const;
  // Image `index` normalised only, into out[H * W * C].
  void plain_image(int64_t index, float* out) const;

  // Rows [first_row, first_row + count) of the global batch of `step`: augmented, normalised
  // images into images[count * H * W * C] and their labels into labels[count]. A data-parallel
  // rank passes its slice of rows; the slices concatenate to the global batch.
  void train_batch(int64_t step, int64_t first_row, int64_t count, float* images, int32_t* labels) const;

  // Evaluation: batch b holds images b * B .. b * B + B - 1 in data set order, normalised only.
  // Rows past the end of the data set (in the last batch) are padding: all zeros and label -1.
  int64_t eval_batches() const { return (size() + batch_ - 1) / batch_; }
  void eval_batch(int64_t batch, int64_t first_row, int64_t count, float* images, int32_t* labels) const;

  // Throws unless [first_row, first_row + count) lies inside the global batch.
  void check_rows(int64_t first_row, int64_t count) const;

  const ImageDataset& data() const { return *data_; }
  int64_t size() const { return data_->size(); }
  int64_t batch_size() const { return batch_; }
  int64_t image_floats() const { return data_->image_bytes(); }  // H * W * C

 private:
  // Epoch orders are cached (the two most recent), shared by the caller and a prefetch thread.
  std::shared_ptr<const std::vector<int64_t>> order(int64_t epoch) const;
  // Image `index` through crop `cf` (no crop: pad 0) and normalisation.
  void write_image(int64_t index, const CropFlip& cf, int64_t pad, float* out) const;

  std::shared_ptr<const ImageDataset> data_;
  int64_t batch_;
  uint64_t seed_, shuffle_stream_, augment_stream_;
  ImageAugment augment_;
  std::vector<float> scale_, shift_;  // per channel: value = pixel * scale + shift

  mutable std::mutex cache_mutex_;
  mutable std::vector<std::pair<int64_t, std::shared_ptr<const std::vector<int64_t>>>> cache_;
};

}  // namespace tessera::io
