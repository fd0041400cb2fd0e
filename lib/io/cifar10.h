// CIFAR-10 reader: the official binary version (data_batch_1..5.bin, test_batch.bin,
// batches.meta.txt) turned into train and test ImageDatasets (HWC), every file checked first.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/image_dataset.h"

namespace tessera::io {

// The binary format: each batch file is 10000 records of 1 label byte (0..9) followed by
// 32x32 red, then green, then blue bytes (each plane row-major).
constexpr int64_t kCifar10Side = 32;
constexpr int64_t kCifar10Classes = 10;
constexpr int64_t kCifar10RecordsPerFile = 10000;
constexpr int64_t kCifar10RecordBytes = 1 + 3 * kCifar10Side * kCifar10Side;  // 3073
constexpr int64_t kCifar10FileBytes = kCifar10RecordsPerFile * kCifar10RecordBytes;  // 30730000

// The files of the binary version that read_cifar10 reads in `dir`: data_batch_1..5.bin,
// test_batch.bin, batches.meta.txt.
std::vector<std::string> cifar10_files(const std::string& dir);

// Reads the folder `dir`: train holds 50000 images, test 10000 (path = the folder). Errors name the
// file and the problem: missing, wrong size (truncated or too long), a label outside 0..9, a meta
// file without exactly 10 class names. All sizes are checked before any file is read.
ImageSplits read_cifar10(const std::string& dir);

// The class names of batches.meta.txt: one per line; trailing empty lines are ignored.
std::vector<std::string> read_cifar10_class_names(const std::string& file);

// Appends the records of one batch file to `out` (pixels converted from CHW planes to HWC).
void read_cifar10_batch(const std::string& file, ImageDataset& out);

}  // namespace tessera::io
