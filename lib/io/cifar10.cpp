// CIFAR-10 binary reader: checks every file (presence, exact size, labels, class names) and converts
// each record's CHW colour planes to the HWC layout of ImageDataset.
#include "io/cifar10.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace tessera::io {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kPlane = kCifar10Side * kCifar10Side;

std::string train_file(const std::string& dir, int i) {
  return (fs::path(dir) / ("data_batch_" + std::to_string(i) + ".bin")).string();
}

// A batch file must exist and hold exactly 10000 records.
void check_batch_file(const std::string& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) fail("cannot read CIFAR-10 batch ", file, ": no such file");
  if (!fs::is_regular_file(file, ec)) fail("cannot read CIFAR-10 batch ", file, ": not a regular file");
  const auto size = static_cast<int64_t>(fs::file_size(file, ec));
  if (ec) fail("cannot read CIFAR-10 batch ", file, ": ", ec.message());
  if (size != kCifar10FileBytes)
    fail("CIFAR-10 batch ", file, size < kCifar10FileBytes ? " is truncated" : " is too long", ": ", size,
         " bytes, expected ", kCifar10FileBytes, " (", kCifar10RecordsPerFile, " records of ",
         kCifar10RecordBytes, " bytes)");
}

}  // namespace

std::vector<std::string> read_cifar10_class_names(const std::string& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) fail("cannot read CIFAR-10 class names ", file, ": no such file");
  std::ifstream in(file);
  if (!in || fs::is_directory(file, ec)) fail("cannot read CIFAR-10 class names ", file, ": unreadable");
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    names.push_back(line);
  }
  while (!names.empty() && names.back().empty()) names.pop_back();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].empty()) fail(file, ": line ", i + 1, " is empty (expected one class name per line)");
  if (static_cast<int64_t>(names.size()) != kCifar10Classes)
    fail(file, ": expected ", kCifar10Classes, " class names (one per line), found ", names.size());
  return names;
}

void read_cifar10_batch(const std::string& file, ImageDataset& out) {
  check_batch_file(file);
  std::ifstream in(file, std::ios::binary);
  if (!in) fail("cannot read CIFAR-10 batch ", file, ": permission denied or unreadable");
  std::vector<uint8_t> bytes(static_cast<size_t>(kCifar10FileBytes));
  in.read(reinterpret_cast<char*>(bytes.data()), kCifar10FileBytes);
  if (in.gcount() != kCifar10FileBytes) fail("cannot read CIFAR-10 batch ", file, ": read error");

  const int64_t first = out.size();
  out.labels.resize(static_cast<size_t>(first + kCifar10RecordsPerFile));
  out.images.resize(static_cast<size_t>((first + kCifar10RecordsPerFile) * 3 * kPlane));
  for (int64_t r = 0; r < kCifar10RecordsPerFile; ++r) {
    const uint8_t* record = bytes.data() + r * kCifar10RecordBytes;
    if (record[0] >= kCifar10Classes)
      fail("CIFAR-10 batch ", file, ": record ", r, " has label ", int{record[0]}, ", outside 0..",
           kCifar10Classes - 1);
    out.labels[static_cast<size_t>(first + r)] = record[0];
    uint8_t* hwc = out.images.data() + (first + r) * 3 * kPlane;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t p = 0; p < kPlane; ++p) hwc[p * 3 + c] = record[1 + c * kPlane + p];
  }
}

std::vector<std::string> cifar10_files(const std::string& dir) {
  std::vector<std::string> files;
  for (int i = 1; i <= 5; ++i) files.push_back(train_file(dir, i));
  files.push_back((fs::path(dir) / "test_batch.bin").string());
  files.push_back((fs::path(dir) / "batches.meta.txt").string());
  return files;
}

ImageSplits read_cifar10(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("cannot read CIFAR-10 from ", dir, ": no such directory");
  if (!fs::is_directory(dir, ec)) fail("cannot read CIFAR-10 from ", dir, ": not a directory");
  const std::string test_file = (fs::path(dir) / "test_batch.bin").string();
  // Sizes first, so a bad file is reported before 180 MB are read.
  for (int i = 1; i <= 5; ++i) check_batch_file(train_file(dir, i));
  check_batch_file(test_file);
  const std::vector<std::string> names =
      read_cifar10_class_names((fs::path(dir) / "batches.meta.txt").string());

  ImageSplits data;
  for (ImageDataset* split : {&data.train, &data.test}) {
    const int64_t files = split == &data.train ? 5 : 1;
    split->path = dir;
    split->split = split == &data.train ? "train" : "test";
    split->height = split->width = kCifar10Side;
    split->channels = 3;
    split->class_names = names;
    split->labels.reserve(static_cast<size_t>(files * kCifar10RecordsPerFile));
    split->images.reserve(static_cast<size_t>(files * kCifar10RecordsPerFile * 3 * kPlane));
  }
  for (int i = 1; i <= 5; ++i) read_cifar10_batch(train_file(dir, i), data.train);
  read_cifar10_batch(test_file, data.test);
  return data;
}

}  // namespace tessera::io
