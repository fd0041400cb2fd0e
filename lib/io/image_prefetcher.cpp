// ImagePrefetcher: a producer thread filling a ring of batch buffers ahead of the consumer.
#include "io/image_prefetcher.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::io {

ImagePrefetcher::ImagePrefetcher(Fill fill, int64_t first_step, int64_t rows, int64_t image_floats, int depth)
    : fill_(std::move(fill)), first_step_(first_step) {
  TESSERA_CHECK(depth >= 1, "image prefetcher: depth must be at least 1, got ", depth);
  TESSERA_CHECK(first_step >= 0 && rows >= 0 && image_floats >= 1, "image prefetcher: invalid batch (first step ",
                first_step, ", ", rows, " rows of ", image_floats, " floats)");
  slots_.resize(static_cast<size_t>(depth) + 1);
  for (ImageBatch& b : slots_) {
    b.images.resize(static_cast<size_t>(rows * image_floats));
    b.labels.resize(static_cast<size_t>(rows));
  }
  thread_ = std::thread([this] { produce(); });
}

ImagePrefetcher::ImagePrefetcher(const ImageLoader& loader, int64_t first_step, int64_t first_row,
                                 int64_t count, int depth)
    : ImagePrefetcher(
          [&loader, first_row, count](int64_t step, float* images, int32_t* labels) {
            loader.train_batch(step, first_row, count, images, labels);
          },
          first_step, (loader.check_rows(first_row, count), count), loader.image_floats(), depth) {}

ImagePrefetcher::~ImagePrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ImagePrefetcher::produce() {
  const auto slots = static_cast<int64_t>(slots_.size());
  for (int64_t n = 0;; ++n) {
    {
      // Batch n may be made once its slot is free: the consumer holds at most one batch.
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || n < std::max<int64_t>(handed_out_ - 1, 0) + slots; });
      if (stop_) return;
    }
    ImageBatch& b = slots_[static_cast<size_t>(n % slots)];
    try {
      b.step = first_step_ + n;
      fill_(b.step, b.images.data(), b.labels.data());
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      produced_ = n + 1;
    }
    changed_.notify_all();
  }
}

const ImageBatch& ImagePrefetcher::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  ++handed_out_;  // frees the slot of the batch handed out before this one
  changed_.notify_all();
  changed_.wait(lock, [&] { return produced_ >= handed_out_ || error_; });
  if (produced_ < handed_out_) {
    --handed_out_;  // nothing handed out this time; calling again rethrows again
    std::rethrow_exception(error_);
  }
  return slots_[static_cast<size_t>((handed_out_ - 1) % static_cast<int64_t>(slots_.size()))];
}

}  // namespace tessera::io
