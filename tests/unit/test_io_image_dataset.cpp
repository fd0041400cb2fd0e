// Unit tests of io::ImageDataset (the image schema: round trip, every validation error naming the
// file and dataset), channel_stats, and the synthetic image generator.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <filesystem>

#include "core/error.h"
#include "io/hdf5_file.h"
#include "io/image_dataset.h"
#include "io/synth_images.h"

namespace fs = std::filesystem;
using tessera::DType;
using tessera::Tensor;
using tessera::io::H5File;
using tessera::io::ImageDataset;
using tessera::io::ImageSplits;

namespace {

class ImageDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_io_images_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// n images of h x w x c with distinct pixels, labels i mod classes.
ImageDataset small_split(const std::string& split, int64_t n, int64_t h, int64_t w, int64_t c, int64_t classes) {
  ImageDataset d;
  d.path = "memory";
  d.split = split;
  d.height = h;
  d.width = w;
  d.channels = c;
  for (int64_t k = 0; k < classes; ++k) d.class_names.push_back("name " + std::to_string(k));
  for (int64_t i = 0; i < n; ++i) d.labels.push_back(static_cast<int32_t>(i % classes));
  for (int64_t p = 0; p < n * h * w * c; ++p) d.images.push_back(static_cast<uint8_t>((p * 7 + 3) % 256));
  return d;
}

// A file with the schema's datasets written as given (for malformed variants).
void write_raw(const std::string& path, const Tensor& images, const Tensor& labels, int64_t num_classes,
               const std::string& class_names) {
  H5File f = H5File::create(path);
  f.write("/train/images", images);
  f.write("/train/labels", labels);
  f.set_attr("/", "num_classes", num_classes);
  f.set_attr("/", "class_names", class_names);
}

Tensor u8_images(int64_t n, int64_t h, int64_t w, int64_t c) { return Tensor::zeros({n, h, w, c}, DType::u8); }

Tensor i32_labels(std::initializer_list<int> values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::i32);
  int64_t i = 0;
  for (int v : values) t.data<int32_t>()[i++] = v;
  return t;
}

// Expects ImageDataset::open(path, split) to fail with a message holding all of `words`.
void expect_open_error(const std::string& path, const std::string& split, std::initializer_list<std::string> words) {
  try {
    ImageDataset::open(path, split);
    ADD_FAILURE() << "expected an error opening " << path;
  } catch (const tessera::Error& e) {
    const std::string msg = e.what();
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

}  // namespace

TEST_F(ImageDatasetTest, RoundTrip) {
  const ImageSplits data{small_split("train", 7, 4, 5, 3, 3), small_split("test", 2, 4, 5, 3, 3)};
  const std::string path = file("images.h5");
  {
    H5File f = H5File::create(path);
    tessera::io::write_image_dataset(f, data);
  }
  for (const ImageDataset* want : {&data.train, &data.test}) {
    const ImageDataset got = ImageDataset::open(path, want->split);
    EXPECT_EQ(got.path, path);
    EXPECT_EQ(got.split, want->split);
    EXPECT_EQ(got.size(), want->size());
    EXPECT_EQ(got.height, 4);
    EXPECT_EQ(got.width, 5);
    EXPECT_EQ(got.channels, 3);
    EXPECT_EQ(got.num_classes(), 3);
    EXPECT_EQ(got.class_names, want->class_names);
    EXPECT_EQ(got.labels, want->labels);
    EXPECT_EQ(got.images, want->images);
    EXPECT_EQ(got.image(1)[0], want->images[60]);
  }
  // The stored layout is the schema's: uint8 [N, H, W, C], int32 [N], root attributes.
  const H5File f = H5File::open_read(path);
  EXPECT_EQ(f.shape("/train/images"), (std::vector<int64_t>{7, 4, 5, 3}));
  EXPECT_EQ(f.stored_type("/train/images"), "u8");
  EXPECT_EQ(f.stored_type("/test/labels"), "i32");
  EXPECT_EQ(f.attr_int("/", "num_classes"), 3);
  EXPECT_EQ(f.attr_string("/", "class_names"), "name 0\nname 1\nname 2");
}

TEST_F(ImageDatasetTest, WriteRefusesMismatchedSplits) {
  H5File f = H5File::create(file("bad.h5"));
  EXPECT_THROW(tessera::io::write_image_dataset(f, {small_split("train", 2, 4, 4, 3, 2), small_split("test", 2, 4, 5, 3, 2)}),
               tessera::Error);
  ImageSplits names{small_split("train", 2, 4, 4, 3, 2), small_split("test", 2, 4, 4, 3, 2)};
  names.test.class_names[1] = "other";
  EXPECT_THROW(tessera::io::write_image_dataset(f, names), tessera::Error);
  ImageSplits label{small_split("train", 2, 4, 4, 3, 2), small_split("test", 2, 4, 4, 3, 2)};
  label.train.labels[1] = 2;
  try {
    tessera::io::write_image_dataset(f, label);
    ADD_FAILURE() << "a label outside the classes was written";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 2 of image 1"), std::string::npos) << e.what();
  }
}

// The splits a trainer reads together: test images of another shape than the train images, or
// other classes, are refused naming both (the model built for the train images would read past
// the test images' end).
TEST(ImageSplitsCheck, TestImagesOfAnotherShapeOrClasses) {
  const ImageDataset train = small_split("train", 2, 8, 8, 3, 2);
  EXPECT_NO_THROW(tessera::io::check_same_images(train, small_split("test", 3, 8, 8, 3, 2)));
  try {
    tessera::io::check_same_images(train, small_split("test", 2, 4, 4, 3, 2));
    ADD_FAILURE() << "test images of another shape were accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory: test images are 4x4x3 but train images are 8x8x3 (H x W x C)"),
              std::string::npos) << e.what();
  }
  ImageDataset other_file = small_split("test", 2, 8, 8, 1, 2);
  other_file.path = "other.h5";
  try {
    tessera::io::check_same_images(train, other_file);
    ADD_FAILURE() << "test images with another channel count were accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("other.h5: test images are 8x8x1 but memory's train images are 8x8x3"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(tessera::io::check_same_images(train, small_split("test", 2, 8, 8, 3, 3)), tessera::Error);
}

TEST_F(ImageDatasetTest, UnknownSplitAndMissingFile) {
  expect_open_error(file("missing.h5"), "train", {"missing.h5", "no such file"});
  const std::string path = file("ok.h5");
  write_raw(path, u8_images(2, 2, 2, 3), i32_labels({0, 1}), 2, "a\nb");
  expect_open_error(path, "val", {"ok.h5", "unknown image split 'val'"});
  expect_open_error(path, "test", {"ok.h5", "no dataset /test/images"});
  EXPECT_EQ(ImageDataset::open(path, "train").size(), 2);
}

TEST_F(ImageDatasetTest, ImagesOfTheWrongShapeOrType) {
  const std::string rank3 = file("rank3.h5");
  write_raw(rank3, Tensor::zeros({2, 4, 4}, DType::u8), i32_labels({0, 1}), 2, "a\nb");
  expect_open_error(rank3, "train", {"rank3.h5", "/train/images", "4-D", "[2, 4, 4]"});

  const std::string floats = file("floats.h5");
  write_raw(floats, Tensor::zeros({2, 2, 2, 3}, DType::f32), i32_labels({0, 1}), 2, "a\nb");
  expect_open_error(floats, "train", {"floats.h5", "/train/images", "uint8", "f32"});

  const std::string empty = file("empty.h5");
  write_raw(empty, u8_images(0, 2, 2, 3), Tensor::zeros({0}, DType::i32), 2, "a\nb");
  expect_open_error(empty, "train", {"empty.h5", "/train/images", "empty"});

  const std::string zero_width = file("zero_width.h5");
  write_raw(zero_width, u8_images(2, 2, 0, 3), i32_labels({0, 1}), 2, "a\nb");
  expect_open_error(zero_width, "train", {"zero_width.h5", "empty image dimension"});
}

TEST_F(ImageDatasetTest, LabelsOfTheWrongShapeTypeOrCount) {
  const std::string two_d = file("labels2d.h5");
  write_raw(two_d, u8_images(2, 2, 2, 3), Tensor::zeros({2, 1}, DType::i32), 2, "a\nb");
  expect_open_error(two_d, "train", {"labels2d.h5", "/train/labels", "1-D"});

  const std::string floats = file("labels_f32.h5");
  write_raw(floats, u8_images(2, 2, 2, 3), Tensor::zeros({2}, DType::f32), 2, "a\nb");
  expect_open_error(floats, "train", {"labels_f32.h5", "/train/labels", "integer", "f32"});

  const std::string count = file("count.h5");
  write_raw(count, u8_images(3, 2, 2, 3), i32_labels({0, 1}), 2, "a\nb");
  expect_open_error(count, "train", {"count.h5", "2 labels", "3 images"});
}

TEST_F(ImageDatasetTest, LabelsOutsideTheClasses) {
  const std::string high = file("high.h5");
  write_raw(high, u8_images(3, 2, 2, 3), i32_labels({0, 2, 1}), 2, "a\nb");
  expect_open_error(high, "train", {"high.h5", "/train/labels[1] = 2", "[0, 2)"});
  const std::string negative = file("negative.h5");
  write_raw(negative, u8_images(3, 2, 2, 3), i32_labels({0, 1, -1}), 2, "a\nb");
  expect_open_error(negative, "train", {"negative.h5", "/train/labels[2] = -1"});
}

TEST_F(ImageDatasetTest, ClassAttributes) {
  const std::string no_classes = file("no_classes.h5");
  {
    H5File f = H5File::create(no_classes);
    f.write("/train/images", u8_images(1, 2, 2, 3));
    f.write("/train/labels", i32_labels({0}));
  }
  expect_open_error(no_classes, "train", {"no_classes.h5", "num_classes"});

  const std::string mismatch = file("mismatch.h5");
  write_raw(mismatch, u8_images(2, 2, 2, 3), i32_labels({0, 1}), 3, "a\nb");
  expect_open_error(mismatch, "train", {"mismatch.h5", "class_names holds 2 names", "num_classes is 3"});

  const std::string zero = file("zero.h5");
  write_raw(zero, u8_images(2, 2, 2, 3), i32_labels({0, 0}), 0, "");
  expect_open_error(zero, "train", {"zero.h5", "invalid num_classes 0"});

  const std::string blank = file("blank.h5");
  write_raw(blank, u8_images(2, 2, 2, 3), i32_labels({0, 1}), 2, "a\n");
  expect_open_error(blank, "train", {"blank.h5", "class 1 is empty"});
}

TEST(ImageChannelStats, MeanAndStdPerChannel) {
  ImageDataset d;
  d.height = 1;
  d.width = 2;
  d.channels = 2;
  d.class_names = {"x"};
  d.labels = {0};
  d.images = {0, 255, 255, 255};  // channel 0: 0 and 1; channel 1: 1 and 1
  const tessera::io::ChannelStats s = tessera::io::channel_stats(d);
  ASSERT_EQ(s.mean.size(), 2u);
  EXPECT_FLOAT_EQ(s.mean[0], 0.5f);
  EXPECT_FLOAT_EQ(s.std[0], 0.5f);
  EXPECT_FLOAT_EQ(s.mean[1], 1.0f);
  EXPECT_NEAR(s.std[1], 0.0f, 1e-6);
}

TEST(SynthImages, DeterministicBalancedAndSeparable) {
  const tessera::io::SynthImageSpec spec{4, 200, 80, 8, 7};
  const ImageSplits a = tessera::io::make_synth_images(spec);
  const ImageSplits b = tessera::io::make_synth_images(spec);
  EXPECT_EQ(a.train.images, b.train.images);
  EXPECT_EQ(a.test.images, b.test.images);
  EXPECT_NE(a.train.images, tessera::io::make_synth_images({4, 200, 80, 8, 8}).train.images);
  a.train.check();
  a.test.check();
  EXPECT_EQ(a.train.size(), 200);
  EXPECT_EQ(a.test.size(), 80);
  EXPECT_EQ(a.train.image_bytes(), 8 * 8 * 3);
  for (int64_t i = 0; i < a.train.size(); ++i) EXPECT_EQ(a.train.labels[i], i % 4);

  // Learnable: the nearest class-mean colour of the train set classifies most test images.
  std::vector<std::array<double, 3>> mean(4, {0, 0, 0});
  auto colour = [](const ImageDataset& d, int64_t i) {
    std::array<double, 3> m{0, 0, 0};
    for (int64_t p = 0; p < d.image_bytes(); ++p) m[p % 3] += d.image(i)[p] / double(d.image_bytes() / 3);
    return m;
  };
  for (int64_t i = 0; i < a.train.size(); ++i)
    for (int k = 0; k < 3; ++k) mean[a.train.labels[i]][k] += colour(a.train, i)[k] / 50.0;
  int correct = 0;
  for (int64_t i = 0; i < a.test.size(); ++i) {
    const auto m = colour(a.test, i);
    int best = 0;
    double best_d = 1e30;
    for (int c = 0; c < 4; ++c) {
      double d = 0;
      for (int k = 0; k < 3; ++k) d += (m[k] - mean[c][k]) * (m[k] - mean[c][k]);
      if (d < best_d) best_d = d, best = c;
    }
    correct += best == a.test.labels[i];
  }
  EXPECT_GE(correct, 76) << "of 80";
}
