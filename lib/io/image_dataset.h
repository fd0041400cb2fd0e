// ImageDataset: one split of an HDF5 image data set (uint8 images [N, H, W, C], int32 labels [N],
// class names) held in memory, read with validation that names the file and dataset, and written.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::io {

class H5File;

// The schema (docs/data.md): /<split>/images uint8 [N, H, W, C], /<split>/labels int32 [N] for the
// splits "train" and "test"; root attributes num_classes (integer) and class_names (one string,
// the names joined by '\n', in label order).
struct ImageDataset {
  // split "train" or "test". Every error names the file and the dataset or attribute.
  static ImageDataset open(const std::string& path, const std::string& split);

  std::string path, split;  // where it came from (path may be a folder for converted sources)
  int64_t height = 0, width = 0, channels = 0;
  std::vector<std::string> class_names;  // num_classes() names, in label order
  std::vector<uint8_t> images;           // [size(), height, width, channels], row-major (HWC)
  std::vector<int32_t> labels;           // [size()], each in [0, num_classes())

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t num_classes() const { return static_cast<int64_t>(class_names.size()); }
  int64_t image_bytes() const { return height * width * channels; }
  const uint8_t* image(int64_t i) const { return images.data() + i * image_bytes(); }

  // Throws unless sizes agree, the set is not empty and every label is in range (names `path`).
  void check() const;
};

// Throws unless `test` holds images of train's shape (H x W x C) and train's classes: a model built
// for the train images reads the test images with it. The message names both shapes and the files.
void check_same_images(const ImageDataset& train, const ImageDataset& test);

// The two splits of an image data set, as a converter or generator makes them.
struct ImageSplits {
  ImageDataset train, test;
};

// Writes train and test under /train and /test of `file` with the root attributes. Both splits
// must pass check() and share image shape and class names.
void write_image_dataset(H5File& file, const ImageSplits& data);

// Per-channel mean and standard deviation of the pixels scaled to [0, 1], over all images.
struct ChannelStats {
  std::vector<float> mean, std;
};
ChannelStats channel_stats(const ImageDataset& data);

}  // namespace tessera::io
