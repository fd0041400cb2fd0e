// ImageDataset::open and write_image_dataset: the image schema in HDF5, validated on read (shape,
// type, sizes, attributes, label range) with errors naming the file and the dataset or attribute.
#include "io/image_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "io/hdf5_file.h"

namespace tessera::io {
namespace {

constexpr char kNameSeparator = '\n';

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? std::string(1, kNameSeparator) : "") + names[i];
  return s;
}

std::vector<std::string> split_names(const std::string& joined) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t end = joined.find(kNameSeparator, start);
    names.push_back(joined.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return names;
    start = end + 1;
  }
}

bool is_integer_type(const std::string& type) {
  for (const char* t : {"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64"})
    if (type == t) return true;
  return false;
}

// Reads num_classes and class_names from the root, checking that they agree.
std::vector<std::string> read_class_names(const H5File& file) {
  const std::string& path = file.path();
  if (!file.has_attr("/", "num_classes")) fail(path, ": missing root attribute num_classes");
  const int64_t num_classes = file.attr_int("/", "num_classes");
  if (num_classes < 1 || num_classes > (int64_t{1} << 31) - 1)
    fail(path, ": invalid num_classes ", num_classes, " (must be in [1, 2^31 - 1])");
  if (!file.has_attr("/", "class_names")) fail(path, ": missing root attribute class_names");
  const std::vector<std::string> names = split_names(file.attr_string("/", "class_names"));
  if (static_cast<int64_t>(names.size()) != num_classes)
    fail(path, ": class_names holds ", names.size(), " names (one per line) but num_classes is ", num_classes);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].empty()) fail(path, ": class_names: the name of class ", i, " is empty");
  return names;
}

}  // namespace

ImageDataset ImageDataset::open(const std::string& path, const std::string& split) {
  if (split != "train" && split != "test")
    fail(path, ": unknown image split '", split, "' (expected train or test)");
  const H5File file = H5File::open_read(path);
  const std::string images_at = "/" + split + "/images", labels_at = "/" + split + "/labels";
  for (const std::string& d : {images_at, labels_at})
    if (!file.has(d)) fail(path, ": no dataset ", d, " (an image data set needs /", split, "/images and /", split, "/labels)");

  const std::vector<int64_t> shape = file.shape(images_at);
  if (shape.size() != 4)
    fail(path, ": ", images_at, " must be 4-D [N, H, W, C], but has shape ", Shape(shape).str());
  if (const std::string type = file.stored_type(images_at); type != "u8")
    fail(path, ": ", images_at, " must hold uint8 pixels, but holds ", type);
  if (shape[0] == 0) fail(path, ": ", images_at, " is empty (no images)");
  for (int d = 1; d < 4; ++d)
    if (shape[d] == 0) fail(path, ": ", images_at, " has an empty image dimension: shape ", Shape(shape).str());

  const std::vector<int64_t> label_shape = file.shape(labels_at);
  if (label_shape.size() != 1)
    fail(path, ": ", labels_at, " must be 1-D [N], but has shape ", Shape(label_shape).str());
  if (const std::string type = file.stored_type(labels_at); !is_integer_type(type))
    fail(path, ": ", labels_at, " must hold integer (int32) labels, but holds ", type);
  if (label_shape[0] != shape[0])
    fail(path, ": ", labels_at, " has ", label_shape[0], " labels but ", images_at, " has ", shape[0], " images");

  ImageDataset ds;
  ds.path = path;
  ds.split = split;
  ds.height = shape[1];
  ds.width = shape[2];
  ds.channels = shape[3];
  ds.class_names = read_class_names(file);

  const Tensor images = file.read(images_at, DType::u8);
  ds.images.assign(images.data<uint8_t>(), images.data<uint8_t>() + images.numel());
  const Tensor labels = file.read(labels_at, DType::i32);
  ds.labels.assign(labels.data<int32_t>(), labels.data<int32_t>() + labels.numel());
  for (size_t i = 0; i < ds.labels.size(); ++i) {
    const int32_t v = ds.labels[i];
    if (v < 0 || v >= ds.num_classes())
      fail(path, ": ", labels_at, "[", i, "] = ", v, " is outside [0, ", ds.num_classes(),
           ") (num_classes; first bad label)");
  }
  return ds;
}

void ImageDataset::check() const {
  const std::string what = path + (split.empty() ? "" : " (" + split + ")");
  if (height < 1 || width < 1 || channels < 1)
    fail(what, ": invalid image shape ", height, "x", width, "x", channels);
  if (labels.empty()) fail(what, ": no images");
  if (static_cast<int64_t>(images.size()) != size() * image_bytes())
    fail(what, ": ", images.size(), " pixel bytes for ", size(), " images of ", image_bytes(), " bytes");
  if (class_names.empty()) fail(what, ": no class names");
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0 || labels[i] >= num_classes())
      fail(what, ": label ", labels[i], " of image ", i, " is outside [0, ", num_classes(), ")");
}

void check_same_images(const ImageDataset& train, const ImageDataset& test) {
  // "f.h5: test images ..." from one file; "a.h5: test images ..., b.h5's train images ..." from two.
  const bool one_file = train.path == test.path;
  const std::string train_at = one_file ? "" : train.path + "'s ";
  auto shape = [](const ImageDataset& d) {
    return std::to_string(d.height) + "x" + std::to_string(d.width) + "x" + std::to_string(d.channels);
  };
  if (train.height != test.height || train.width != test.width || train.channels != test.channels)
    fail(test.path, ": test images are ", shape(test), " but ", train_at, "train images are ", shape(train),
         " (H x W x C): both splits must hold images of one shape");
  if (train.class_names != test.class_names)
    fail(test.path, ": the test split's ", test.num_classes(), " class names differ from ", train_at, "the train split's ",
         train.num_classes());
}

void write_image_dataset(H5File& file, const ImageSplits& data) {
  const ImageDataset& train = data.train;
  const ImageDataset& test = data.test;
  train.check();
  test.check();
  check_same_images(train, test);
  for (const std::string& name : train.class_names)
    if (name.find(kNameSeparator) != std::string::npos || name.empty())
      fail(file.path(), ": class name '", name, "' is empty or spans lines");

  for (const ImageDataset* split : {&train, &test}) {
    Tensor images = Tensor::empty({split->size(), split->height, split->width, split->channels}, DType::u8);
    std::memcpy(images.raw(), split->images.data(), split->images.size());
    Tensor labels = Tensor::empty({split->size()}, DType::i32);
    std::memcpy(labels.raw(), split->labels.data(), split->labels.size() * sizeof(int32_t));
    const std::string group = split == &train ? "/train" : "/test";
    file.write(group + "/images", images);
    file.write(group + "/labels", labels);
  }
  file.set_attr("/", "num_classes", train.num_classes());
  file.set_attr("/", "class_names", join_names(train.class_names));
}

ChannelStats channel_stats(const ImageDataset& data) {
  const auto c = static_cast<size_t>(data.channels);
  std::vector<double> sum(c, 0.0), sum_sq(c, 0.0);
  const size_t pixels = c > 0 ? data.images.size() / c : 0;
  for (size_t p = 0; p < pixels; ++p)
    for (size_t k = 0; k < c; ++k) {
      const double v = data.images[p * c + k] / 255.0;
      sum[k] += v;
      sum_sq[k] += v * v;
    }
  const auto n = static_cast<double>(pixels);
  ChannelStats s;
  for (size_t k = 0; k < c; ++k) {
    const double mean = n > 0 ? sum[k] / n : 0.0;
    const double var = n > 0 ? std::max(0.0, sum_sq[k] / n - mean * mean) : 0.0;
    s.mean.push_back(static_cast<float>(mean));
    s.std.push_back(static_cast<float>(std::sqrt(var)));
  }
  return s;
}

}  // namespace tessera::io
