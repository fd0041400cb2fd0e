// ImagePrefetcher: prepares the next training batches on one background thread (a bounded queue,
// double-buffered by default), so a step finds its images ready; errors reach the consumer.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "io/image_loader.h"

namespace tessera::io {

// One rank's rows of a step's batch: images [rows, H, W, C] (float, normalised), labels [rows].
struct ImageBatch {
  int64_t step = -1;
  std::vector<float> images;
  std::vector<int32_t> labels;
};

class ImagePrefetcher {
 public:
  // fill(step, images, labels) writes one batch of `rows` images of `image_floats` floats each.
  using Fill = std::function<void(int64_t step, float* images, int32_t* labels)>;

  // Batches of steps first_step, first_step + 1, ..., at most `depth` (>= 1) made ahead. The
  // buffers (depth + 1 batches) are allocated here; no batch allocates afterwards.
  ImagePrefetcher(Fill fill, int64_t first_step, int64_t rows, int64_t image_floats, int depth = 2);
  // Rows [first_row, first_row + count) of loader.train_batch. `loader` must outlive this.
  ImagePrefetcher(const ImageLoader& loader, int64_t first_step, int64_t first_row, int64_t count,
                  int depth = 2);
  ImagePrefetcher(const ImagePrefetcher&) = delete;
  ImagePrefetcher& operator=(const ImagePrefetcher&) = delete;
  // Stops the thread (it finishes the batch in hand) and joins it.
  ~ImagePrefetcher();

  // The next step's batch, waiting only if it is not ready yet. Valid until the next call. If
  // making a batch threw, the batches before it are still handed out, then next() rethrows.
  const ImageBatch& next();

 private:
  void produce();

  Fill fill_;
  int64_t first_step_;
  std::vector<ImageBatch> slots_;  // batch n lives in slot n mod slots_.size()
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t produced_ = 0;   // batches made
  int64_t handed_out_ = 0;  // batches returned by next(); all but the last are free again
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once everything above is ready
};

}  // namespace tessera::io
