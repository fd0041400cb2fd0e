// ImagePrefetcher: prepares the next training batches on one background thread (a bounded queue,
// double-buffered by default), so a step finds its images ready; errors reach the consumer.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "io/image_loader.h"
#include "io/step_prefetcher.h"

namespace tessera::io {

struct ImageBatch {
  int64_t step = -1;
  std::vector<float> images;
  std::vector<int32_t> labels;
};

class ImagePrefetcher : public StepPrefetcher<ImageBatch> {
 public:
  // fill(step, images, labels) writes one batch of `rows` images of `image_floats` floats each.
  using FillImages = std::function<void(int64_t step, float* images, int32_t* labels)>;

  // Batches of steps first_step, first_step + 1, ..., at most `depth` (>= 1) made ahead. The
  // buffers (depth + 1 batches) are allocated here; no batch allocates afterwards.
  ImagePrefetcher(FillImages fill, int64_t first_step, int64_t rows, int64_t image_floats, int depth = 2);
  // Rows [first_row, first_row + count) of loader.train_batch. `loader` must outlive this.
  ImagePrefetcher(const ImageLoader& loader, int64_t first_step, int64_t first_row, int64_t count,
                  int depth = 2);
};

}  // namespace tessera::io
